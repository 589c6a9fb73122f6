"""Stage 3, render: what lands on a host (domain and volume XML, ownership metadata, seed ISO)."""
