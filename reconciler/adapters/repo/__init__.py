"""The fleet repo checkout on disk, read as untrusted input for the loader."""
