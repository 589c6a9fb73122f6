"""Durations as operators write them: ``30s``, ``5m``, ``1h``, ``1h30m``, or seconds."""

from __future__ import annotations

import re

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
PATTERN = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?[smh])+")
"""What the daemon schema accepts for a duration given as text."""
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smh])")


def seconds(value: float | int | str) -> float:
    """``value`` in seconds. A number is seconds already; text is one or more
    ``<number><unit>`` parts (units s, m, h), e.g. ``1h30m``. Raises ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    if not PATTERN.fullmatch(text):
        raise ValueError(f"not a duration: {value!r} (write e.g. 30s, 5m, 1h or 1h30m)")
    return sum(float(number) * UNITS[unit] for number, unit in _PART.findall(text))


def from_text(text: str) -> float:
    """A duration as a flag gives it: seconds as a number (``90``, ``0.5``) or with units
    (``30s``, ``5m``, ``1h30m``). Raises ValueError otherwise."""
    try:
        return float(text)
    except ValueError:
        return seconds(text)
