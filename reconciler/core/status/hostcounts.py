"""Each host's VM counts as they stand after a run. Pure.

The observation counts a host's owned and foreign VMs before the run acts;
the report (status.yaml, STATUS.md, ``get``) gives them after it: every VM a
create or a replace made is one more owned VM on its host, every delete that
succeeded one fewer. A failed action changed nothing the counts can tell (an
interrupted create leaves volumes, not a VM), so it is not counted.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

from reconciler.model.plan import ActionKind
from reconciler.model.report import ActionOutcome, ActionResult, HostStatus

_MADE = (ActionKind.CREATE, ActionKind.REPLACE)


def after_run(
    hosts: Sequence[HostStatus], outcomes: Sequence[ActionOutcome]
) -> tuple[HostStatus, ...]:
    """``hosts`` as observed before the run, with the owned VMs its ``outcomes`` made and
    deleted counted in."""
    change: Counter[str] = Counter()
    for outcome in outcomes:
        action = outcome.action
        if outcome.result is not ActionResult.SUCCEEDED or not action.host:
            continue
        if action.kind in _MADE:
            change[action.host] += 1
        elif action.kind is ActionKind.DELETE:
            change[action.host] -= 1
    return tuple(
        dataclasses.replace(h, owned=max(0, h.owned + change[h.name])) if change[h.name] else h
        for h in hosts
    )
