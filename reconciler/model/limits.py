"""What bounds a plan beside the repo's policy: the deadline of a new VM, the delete budget.

Both come from the box, not from the repo (the daemon config and the state dir
the engine keeps), so the planner gets them as a value of their own, and stays
the one place that decides what a run may do.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The box's bounds on one plan; the defaults bound nothing beyond the policy."""

    replace_timeout: float | None = None
    """Seconds a new VM has, from its creation, to pass its first health check; past it the
    rollout of the revision halts. None: no deadline (a plan without history)."""
    deletes_left: int | None = None
    """Deletes the delete window still allows (``deleteWindowSeconds``, kept in the state
    dir); None: only ``policy.maxDeletesPerRun`` bounds this run."""
    deletes_why: str = ""
    """Why ``deletes_left`` is what it is, for the reason of a delete it blocks."""
