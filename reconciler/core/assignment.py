"""What a daemon does about one fleet, given the ring's word and its own standing.

A daemon that serves several fleets asks, for each of them and every poll: does the
ring give this fleet to me (``assigned``), and do I lead it now (``leading``)? The
answer is one of four steps; the leadership (reconciler.engine.leadership) carries
it out. Pure, so that the table is tested as a table:

| assigned | leading | step  | what happens                                                |
|----------|---------|-------|-------------------------------------------------------------|
| yes      | no      | TAKE  | try the fleet's lock; with it, lead and reconcile at once   |
| yes      | yes     | KEEP  | go on; a lock that lapsed makes this daemon stand by        |
| no       | yes     | YIELD | close the fence, wait for calls in flight, release the lock |
| no       | no      | WAIT  | stand by without touching the lock                          |

The ring (who should act) is advice; the lock (who may act) is the rule. A YIELD
releases the lock only once no mutating call of this daemon is in flight, so the
next owner, which takes the lock after that, never overlaps with it.
"""

from __future__ import annotations

import enum


class Step(enum.Enum):
    TAKE = "take"
    KEEP = "keep"
    YIELD = "yield"
    WAIT = "wait"


def step(*, assigned: bool, leading: bool) -> Step:
    """The step for one fleet; see the module docstring's table."""
    if assigned:
        return Step.KEEP if leading else Step.TAKE
    return Step.YIELD if leading else Step.WAIT


def owned(owner: str | None, member: str) -> bool:
    """True when the ring gives the fleet to ``member``. An unknown owner (the ring not read
    yet) is nobody's: a daemon acts on a fleet only once the ring has been read."""
    return owner is not None and owner == member
