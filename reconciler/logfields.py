"""Structured fields on log lines: run id, revision, host, proxy.

The engine says once what it works on (``start_run`` when a cycle starts,
``bind(revision=…)`` once the revision is known, ``about(action)`` around one
action), and every line logged after, by any module, carries those fields:
``FieldsFilter`` copies them from a context variable onto each record, where the
JSON and logfmt formatters (reconciler.cli.logsetup) print them as keys of their
own instead of only inside ``msg``. A context variable, not a thread-local:
``carry`` hands the caller's fields to a pool's worker thread.

Values are names and ids only (a proxy's name, a commit hash), never input text.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import ParamSpec, Protocol, TypeVar

NAMES = ("run", "revision", "host", "proxy")
"""The fields, in the order the log lines show them."""
ATTRIBUTE = "pf_fields"
"""The record attribute ``FieldsFilter`` sets: a mapping of some of ``NAMES``."""

_FIELDS: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "proxyfleet_log_fields", default=MappingProxyType({})
)

P = ParamSpec("P")
R = TypeVar("R")


class Targeted(Protocol):
    """What an action names (``model.plan.Action``)."""

    @property
    def host(self) -> str | None: ...

    @property
    def proxy(self) -> str | None: ...


@contextlib.contextmanager
def fields(**values: str | None) -> Iterator[None]:
    """The block's log lines carry ``values`` (each one of ``NAMES``; None or "": unset)."""
    token = _FIELDS.set(_merged(_known(values)))
    try:
        yield
    finally:
        _FIELDS.reset(token)


def start_run(run: str) -> None:
    """From here on in this context (the daemon loop's thread), lines carry ``run`` and
    nothing the run before bound."""
    _FIELDS.set({"run": run})


def bind(**values: str | None) -> None:
    """From here on in this context, lines carry ``values`` too (as ``fields``, unscoped:
    for a loop that binds anew each run)."""
    _FIELDS.set(_merged(_known(values)))


def about(action: Targeted) -> contextvars.Context:
    """A copy of the current context in which log lines name ``action``'s host and proxy:
    ``about(action).run(fn, action)``."""
    context = contextvars.copy_context()
    context.run(_FIELDS.set, _merged({"host": action.host, "proxy": action.proxy}))
    return context


def carry(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run in a copy of the caller's context: the fields reach a worker thread."""
    context = contextvars.copy_context()

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return context.run(fn, *args, **kwargs)

    return run


def current() -> Mapping[str, str]:
    return _FIELDS.get()


def _known(values: Mapping[str, str | None]) -> Mapping[str, str | None]:
    unknown = set(values) - set(NAMES)
    if unknown:
        raise ValueError(f"unknown log fields: {', '.join(sorted(unknown))}")
    return values


def _merged(values: Mapping[str, str | None]) -> Mapping[str, str]:
    merged = {**_FIELDS.get(), **{k: v for k, v in values.items() if v}}
    return {name: merged[name] for name in NAMES if name in merged}


class FieldsFilter(logging.Filter):
    """Puts the context's fields on each record passing through (``record.pf_fields``);
    a record logged with ``extra={"pf_fields": {...}}`` keeps its own over them."""

    def filter(self, record: logging.LogRecord) -> bool:
        own = getattr(record, ATTRIBUTE, None)
        setattr(record, ATTRIBUTE, {**_FIELDS.get(), **(own if isinstance(own, Mapping) else {})})
        return True
