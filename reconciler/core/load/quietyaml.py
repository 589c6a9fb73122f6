"""ruamel's YAML reader, made without touching the disk.

``ruamel.yaml.YAML()`` looks for plug-ins each time one is made: it lists its
own package folder (a ``glob`` over site-packages). A load makes a reader per
file, and a load does no I/O (reconciler.core.load.repofiles), so the readers
made here skip that search; ruamel ships no plug-in that this package uses.
"""

from __future__ import annotations

from ruamel.yaml import YAML


class QuietYaml(YAML):
    """``YAML`` without the plug-in search."""

    def official_plug_ins(self) -> list[str]:
        return []
