"""The daemon's local state dir: what earlier runs saw (history.json)."""
