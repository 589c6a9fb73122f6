"""libvirt's errors classified once: NotFoundError, TransientError or PermanentError,
each keeping libvirt's code and its constant's name (``VIR_ERR_NO_DOMAIN``).

- VIR_ERR_NO_DOMAIN / VIR_ERR_NO_STORAGE_VOL are NotFoundError;
- ENOSPC ("No space left on device", a system error) is PermanentError: a full pool
  stays full for the run;
- system, RPC and dead-connection errors, and handles of a dropped connection, are
  TransientError;
- everything else is PermanentError.
"""

from __future__ import annotations

import libvirt

from reconciler.errors import HostError, NotFoundError, PermanentError, TransientError


def _silence_default_handler(_ctx: object, _err: object) -> None:
    """libvirt prints every error to stderr unless a handler is registered; we raise them."""


libvirt.registerErrorHandler(_silence_default_handler, None)

_LEVEL_NAMES = {"VIR_ERR_NONE", "VIR_ERR_WARNING", "VIR_ERR_ERROR"}
CODE_NAMES: dict[int, str] = {}
for _name in sorted(dir(libvirt)):
    if _name.startswith("VIR_ERR_") and _name not in _LEVEL_NAMES:
        CODE_NAMES.setdefault(getattr(libvirt, _name), _name)

NOT_FOUND = frozenset({libvirt.VIR_ERR_NO_DOMAIN, libvirt.VIR_ERR_NO_STORAGE_VOL})
TRANSIENT = frozenset(
    {
        libvirt.VIR_ERR_SYSTEM_ERROR,
        libvirt.VIR_ERR_RPC,
        libvirt.VIR_ERR_NO_CONNECT,
        libvirt.VIR_ERR_OPERATION_TIMEOUT,
        libvirt.VIR_ERR_AGENT_UNRESPONSIVE,
        libvirt.VIR_ERR_AGENT_UNSYNCED,
    }
)
NO_SPACE = "No space left on device"
"""ENOSPC as libvirt words it (a system error, otherwise transient): permanent for the run."""
LINK_DOMAINS = frozenset({libvirt.VIR_FROM_RPC, libvirt.VIR_FROM_REMOTE})
"""Error domains that speak about the connection itself, not about the object."""


def code_name(code: int | None) -> str:
    if code is None:
        return "VIR_ERR_UNKNOWN"
    return CODE_NAMES.get(code, f"VIR_ERR_{code}")


def classify(exc: libvirt.libvirtError, *, host: str, rpc: str, link_alive: bool) -> HostError:
    """Map one libvirt error onto the taxonomy, keeping its code and name."""
    code = exc.get_error_code()
    name = code_name(code)
    message = exc.get_error_message() or str(exc)
    if code in NOT_FOUND:
        kind: type[HostError] = NotFoundError
    elif NO_SPACE in message:  # a full pool stays full for this run: no retry
        kind = PermanentError
    elif code in TRANSIENT or not link_alive or _stale_handle(exc):
        kind = TransientError
    else:
        kind = PermanentError
    return kind(message, host=host, rpc=rpc, code=code, code_name=name)


def _stale_handle(exc: libvirt.libvirtError) -> bool:
    """A domain, pool or volume handle of a connection that has since been dropped (libvirtd
    restarted): libvirt says "client socket is closed" as an internal RPC error. The object
    is fine; a retry looks it up again on the live connection."""
    return (
        exc.get_error_code() == libvirt.VIR_ERR_INTERNAL_ERROR
        and exc.get_error_domain() in LINK_DOMAINS
    )


def link_failed(exc: libvirt.libvirtError, *, alive: bool) -> bool:
    """Whether this error means the connection is unusable (and must be redialled)."""
    if not alive:
        return True
    return exc.get_error_code() in (libvirt.VIR_ERR_RPC, libvirt.VIR_ERR_NO_CONNECT) or (
        exc.get_error_code() == libvirt.VIR_ERR_SYSTEM_ERROR
        and exc.get_error_domain() in LINK_DOMAINS
    )
