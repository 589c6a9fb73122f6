"""Stage 4, status: the status document and STATUS.md built from a RunReport. Pure."""
