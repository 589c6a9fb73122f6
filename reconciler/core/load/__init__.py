"""Stage 1, load: YAML and JSON read as untrusted input, schema-checked, into the frozen model."""
