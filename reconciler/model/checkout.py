"""What the source seam (reconciler.ports.source) hands the engine, and what the status
seam (reconciler.ports.status) says it did: plain values. And where an operator's checkout
stands beside the fleet (``Standing``: what ``apply`` asks before it plans, answered by
git in reconciler.adapters.git.fleetrevision)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Checkout:
    """A revision of the fleet repo, checked out and ready to load.

    ``root`` is the directory holding ``fleet.yaml`` (the repo's ``path``).
    ``fetch_error`` is set when the fetch failed and this is the last good
    checkout: the engine still reconciles it and reports the error.
    """

    revision: str
    root: Path
    fetch_error: str = ""
    rolled_back_from: str = ""
    """The revision checked out before, when this one does not descend from it and was
    accepted all the same (``repo.allowNonFastForward``: a rollback, a force-push); "" else."""


@dataclass(frozen=True, slots=True)
class Published:
    """What a publish of the status did: ``commit`` is set when a commit reached the remote."""

    commit: str = ""
    message: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class Standing:
    """A checkout beside the fleet: ``behind`` when it does not descend from ``fleet``."""

    checkout: str = ""
    """The commit the checkout has out ("" when it is not a git checkout)."""
    fleet: str = ""
    """The revision the fleet last applied; "" when not known (``unknown`` says why)."""
    behind: bool = False
    unknown: str = ""
    """Why the fleet's revision is not known, in one sentence; "" when it is."""
