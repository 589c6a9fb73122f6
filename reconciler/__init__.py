"""proxyfleet: keep HTTP-proxy VMs on libvirt hosts exactly as a git repo says."""

__version__ = "0.3.0"
"""Semantic versioning, 0.x: a minor step for every change an operator must act on
(CHANGELOG.md); pyproject.toml reads it from here."""
