"""Stage 4, status: the status document and STATUS.md built from a RunReport, and the
history a run hands on to the next (``history``). Pure."""
