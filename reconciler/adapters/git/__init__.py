"""Adapters that talk to git: the fleet repo source (and its fake), the status writer."""
