"""A plan: what the planner decided, one Action per proxy, VM or safety stop."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import StrEnum

from reconciler.model.inventory import Owner


class ActionKind(StrEnum):
    CREATE = "create"
    KEEP = "keep"
    START = "start"
    RELABEL = "relabel"
    REPLACE = "replace"
    DELETE = "delete"
    BLOCKED = "blocked"
    ABANDON = "abandon"
    CLEANUP = "cleanup"
    """Remove volumes named as this fleet's VMs that no domain on their host uses: what a
    create interrupted (SIGKILL) before its define leaves behind."""


MUTATING = frozenset(
    {
        ActionKind.CREATE,
        ActionKind.START,
        ActionKind.RELABEL,
        ActionKind.REPLACE,
        ActionKind.DELETE,
        ActionKind.CLEANUP,
    }
)


@dataclass(frozen=True, slots=True)
class DomainRef:
    host: str
    domain: str


@dataclass(frozen=True, slots=True)
class Action:
    """One decision.

    ``blocks`` is set on a BLOCKED action: the action a safety rule stopped.
    ``replaces`` is set on a REPLACE: the old VM, deleted only after the new
    one (``host``/``domain``) runs. ``owner`` is set on a RELABEL: the
    ownership record to write into the VM (the one it carries, with only
    ``protect`` changed). ``volumes`` is set on a CLEANUP: the pool volumes of
    ``domain`` (a domain that does not exist) to remove, and nothing else.
    """

    kind: ActionKind
    reason: str
    proxy: str | None = None
    host: str | None = None
    domain: str | None = None
    digest: str | None = None
    blocks: ActionKind | None = None
    replaces: DomainRef | None = None
    owner: Owner | None = None
    volumes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    actions: tuple[Action, ...] = ()

    def summary(self) -> dict[str, int]:
        counts = Counter(a.kind for a in self.actions)
        return {kind.value: counts.get(kind, 0) for kind in ActionKind}

    @property
    def has_changes(self) -> bool:
        """True when anything but keep/abandon is planned (``plan`` exits 2)."""
        return any(a.kind not in (ActionKind.KEEP, ActionKind.ABANDON) for a in self.actions)

    def of_kind(self, kind: ActionKind) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.kind == kind)
