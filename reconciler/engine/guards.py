"""Guards between a loaded repo and the hosts: what a committer alone must not be able to do.

The planner's safety rules (``maxDeletesPerRun``, ``allowEmpty``, ``protect``)
trust the repo's idea of the fleet. These guards do not: they compare the
repo with what the box knows on its own (its config, its state dir, the
observed VMs) and stop the cycle before the plan is carried out.

- **Identity**: the fleet id the daemon acts for is pinned in the daemon
  config (``fleet``). A repo whose ``metadata.name`` differs is Stalled: a
  rename would otherwise take over another fleet's VMs on shared hosts.
- **Images**: every image URL must be one the box's image cache would fetch
  (``file://`` only below ``images.allowFileDirs``); checked before planning
  so that a refused image stops the cycle at once, before any host call.
- **Shrink**: a revision whose net loss of proxies (owned VMs on reachable
  hosts that no manifest asks for, less the new proxies it adds: a rename is
  no loss) is more than ``policy.maxShrinkPercent`` of the owned ones is
  Stalled unless ``policy.acknowledgeShrinkTo`` equals the number of proxies
  it asks for. Only with ``prune`` (else nothing is deleted); protected VMs
  (never deleted) do not count.
- **Delete window**: ``maxDeletesPerRun`` holds per ``deleteWindowSeconds``,
  not only per run. Deletes are recorded in the state dir, so a crash loop,
  whose every startup is a run, cannot multiply them. What the window still
  allows goes into the planner (``DeleteWindow.left``, a ``Limits`` field),
  the one place that blocks the excess.
- **The box's cap**: the daemon config's ``maxDeletesPerRun`` bounds the window
  too, below whatever the repo's policy says: a commit that raises its own
  limit, or acknowledges a shrink, still deletes at most the box's number.
- **Removed hosts**: a revision whose ``fleet.yaml`` no longer lists a host that
  the fleet's last status (status.yaml on the status branch, which every box
  reads alike and which outlives an upgrade) shows holding VMs of the fleet is
  Stalled, naming the host and its VMs, before any host call. A live run reads
  only the hosts of ``fleet.yaml``: it would leave those VMs running unmanaged
  and create their proxies anew elsewhere with no health gate between. The way
  out: ``state: draining`` until the status reports the host empty. What the
  status cannot tell never refuses: a host without a VM count (a document the
  daemon did not write) or one unreachable at the last run (taken as gone for good)
  is let go with a warning naming it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from reconciler.core.plan.gates import shrink
from reconciler.errors import PermanentError
from reconciler.model import ActionKind, Repo
from reconciler.model.inventory import Inventory
from reconciler.model.report import ActionOutcome, ActionResult

log = logging.getLogger(__name__)

DELETING = (ActionKind.DELETE,)
"""Actions that delete a VM (a replace deletes nothing: its old VM goes by a later delete)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a guard stopped the cycle: a Stalled condition ``reason`` and the problems."""

    reason: str
    problems: tuple[str, ...]


def check_identity(repo: Repo, pinned: str | None) -> Refusal | None:
    """Stalled when the repo names another fleet than the one the daemon config pins."""
    if pinned is None or repo.fleet.name == pinned:
        return None
    where = repo.fleet.location
    return Refusal(
        "FleetIdMismatch",
        (
            f"{where.file}:{where.line}:{where.column}: metadata.name: the repo is fleet "
            f"{repo.fleet.name!r} but this daemon acts for fleet {pinned!r} (daemon config "
            "'fleet'); nothing is done until one of them changes",
        ),
    )


def check_images(repo: Repo, check_url: Callable[[str], None] | None) -> Refusal | None:
    """Stalled when an image URL is one the box's image cache refuses (``check_url`` raises)."""
    if check_url is None:
        return None
    problems = []
    for image in repo.fleet.images:
        try:
            check_url(image.url)
        except PermanentError as exc:
            where = image.location if image.location.file else repo.fleet.location
            problems.append(f"{where}: spec.images.{image.key}.url: {exc}")
    return Refusal("ImageRefused", tuple(problems)) if problems else None


LISTED_VMS = 10
"""VMs a removed host's problem names; the rest are counted."""


def check_removed_hosts(repo: Repo, last: Mapping[str, Any] | None) -> Refusal | None:
    """Stalled when ``last`` (the fleet's last status document; None: not known) shows VMs
    of the fleet on a host ``repo``'s fleet.yaml no longer lists; one problem per host."""
    if last is None:
        return None
    listed = {host.name for host in repo.fleet.hosts}
    held: dict[str, set[str]] = {}
    for proxy in last.get("proxies") or ():
        if isinstance(proxy, Mapping) and proxy.get("host") not in listed and proxy.get("domain"):
            held.setdefault(str(proxy.get("host")), set()).add(str(proxy["domain"]))
    problems = []
    for entry in last.get("hosts") or ():
        name = str(entry.get("name", "")) if isinstance(entry, Mapping) else ""
        if not name or name in listed:
            continue
        owned, vms = entry.get("owned"), sorted(held.get(name, ()))
        if not isinstance(owned, int) or isinstance(owned, bool):
            log.warning(
                "Host %s left fleet.yaml; the fleet's last status has no VM count for it (not "
                "one the daemon wrote), so its removal is not checked: VMs it still runs stay, "
                "unmanaged.",
                name,
            )
        elif owned or vms:
            problem = _removed_with_vms(repo, name, max(owned, len(vms)), vms)
            if entry.get("reachable", True):
                problems.append(problem)
            else:
                log.warning(
                    "%s; it was unreachable at the last run, so it is taken as gone for good and "
                    "its removal is allowed: if it comes back, delete those VMs by hand.",
                    problem.split(";", 1)[0],
                )
    return Refusal("HostRemovedWithVms", tuple(problems)) if problems else None


def _removed_with_vms(repo: Repo, host: str, count: int, vms: Sequence[str]) -> str:
    named = ", ".join(vms[:LISTED_VMS])
    more = count - len(vms[:LISTED_VMS])
    listed = f"{named} and {more} more" if named and more else named or f"{count} unnamed"
    return (
        f"{repo.fleet.location.file}: spec.hosts: host {host} is no longer listed but the "
        f"fleet's last status shows {count} VM(s) of the fleet on it ({listed}); removed now, "
        "they would run on unmanaged while their proxies are created again elsewhere. Keep "
        "the host with state: draining until the status reports it empty, then remove it "
        '(docs/hosts.md, "Decommission a host")'
    )


def check_shrink(repo: Repo, inventory: Inventory) -> Refusal | None:
    """Stalled when the repo's net loss is more than ``maxShrinkPercent`` of the owned
    proxies and not acknowledged (the rule: reconciler.core.plan.gates.shrink)."""
    found = shrink(repo, inventory)
    if found is None:
        return None
    if found.acknowledged:
        log.warning(
            "Shrink of %d of %d proxies acknowledged (acknowledgeShrinkTo: %d).",
            found.lost,
            found.owned,
            found.desired,
        )
        return None
    return Refusal("ShrinkNotAcknowledged", (found.problem(repo),))


class DeleteWindow:
    """Deletes of the last ``window`` seconds, kept in ``path`` (JSON) across restarts.

    A file that cannot be read counts as full, not as empty: losing the record
    must not hand out a fresh budget. Delete it by hand to reset the window.
    """

    def __init__(
        self,
        path: Path | None,
        window: float,
        clock: Callable[[], datetime],
        *,
        cap: int | None = None,
    ) -> None:
        self._path = path
        self._window = timedelta(seconds=window)
        self._clock = clock
        self._cap = cap

    def recent(self) -> list[datetime] | None:
        """Times of the deletes within the window; None when the record is unreadable."""
        if self._path is None:
            return []
        try:
            text = self._path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.error("Delete window %s unreadable: %s; blocking deletes.", self._path, exc)
            return None
        try:
            times = [datetime.fromisoformat(t) for t in json.loads(text)["deletes"]]
        except (ValueError, KeyError, TypeError) as exc:
            log.error("Delete window %s malformed: %s; blocking deletes.", self._path, exc)
            return None
        since = self._clock() - self._window
        return [t for t in times if t > since]

    def left(self, max_deletes: int) -> tuple[int, str]:
        """Deletes the window still allows, and the reason a delete beyond them is
        blocked with (an unreadable record allows none).

        ``max_deletes`` is the repo's policy; the box's cap, when lower, is the budget."""
        recent = self.recent()
        cap = self._cap if self._cap is not None else max_deletes
        limit, box = min(cap, max_deletes), cap < max_deletes
        why = _reason(limit, self._window, box=box, unreadable=recent is None)
        if recent is None:
            return 0, why
        return max(0, limit - len(recent)), why

    def record(self, outcomes: Sequence[ActionOutcome]) -> None:
        """Add the deletes and replaces that ran (succeeded or failed: they may have acted)."""
        count = sum(
            1
            for o in outcomes
            if o.action.kind in DELETING and o.result is not ActionResult.SKIPPED
        )
        if self._path is None or count == 0:
            return
        now = self._clock()
        recent = self.recent() or []
        times = [*recent, *([now] * count)]
        data = json.dumps({"deletes": [t.isoformat() for t in times]}) + "\n"
        temporary = self._path.with_name(self._path.name + ".tmp")
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(data, encoding="utf-8")
            os.replace(temporary, self._path)
        except OSError as exc:
            log.error("Cannot record deletes in %s: %s", self._path, exc)


def _reason(limit: int, window: timedelta, *, box: bool, unreadable: bool) -> str:
    seconds = int(window.total_seconds())
    if unreadable:
        return "the record of recent deletes is unreadable; deletes wait until it is fixed"
    if box:
        return (
            f"deletes beyond the box's limit maxDeletesPerRun ({limit}, daemon config) within "
            f"{seconds} s; the fleet repo's policy cannot raise it"
        )
    return f"deletes beyond maxDeletesPerRun ({limit}) within {seconds} s"
