"""The status document written back to the fleet repo, as pure functions.

``build`` turns a RunReport (plus the previously committed document) into
the content of ``status.yaml``; ``meaningful`` strips what changes on every
tick (timestamps, run history) so that the writer commits only when the
fleet's state did change; ``changes`` says in sentences what changed, for the
commit message; ``render_markdown`` writes STATUS.md for people.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ruamel.yaml import YAML

from reconciler.core.load.yamlload import load_documents
from reconciler.model.plan import ActionKind, Blocked
from reconciler.model.report import ActionResult, HostStatus, ProxyStatus, RunReport, RunResult

API_VERSION = "proxyfleet/v1"
KIND = "FleetStatus"
_VOLATILE = ("updated", "runs")
_RUN_TIMES = ("started", "finished", "durationSeconds")

Doc = dict[str, Any]


def host_state(host: Mapping[str, Any]) -> str:
    """A host entry's state as operators read it: ``active``, ``cordoned``, or for a
    draining host how far it is (``draining: 2 VMs left``, ``draining: empty``, which
    means it can be taken down). A document written before hosts had a state: active."""
    state = str(host.get("state") or "active")
    if state != "draining":
        return state
    if not host.get("reachable", True):
        return "draining: unknown (unreachable)"
    left = host.get("owned") or 0
    return f"draining: {left} VM{'s' if left != 1 else ''} left" if left else "draining: empty"


def _phase(host: Mapping[str, Any]) -> str:
    """``host_state`` without the count: ``draining: empty`` is news, one VM fewer is not."""
    state = host_state(host)
    return "draining" if state.endswith(" left") else state


def timestamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_entry(report: RunReport) -> Doc:
    """One line of the run history."""
    counts: dict[str, int] = {}
    failures = []
    for outcome in report.outcomes:
        if outcome.result == ActionResult.SUCCEEDED:
            kind = outcome.action.kind.value
            counts[kind] = counts.get(kind, 0) + 1
        elif outcome.result == ActionResult.FAILED:
            failures.append(
                f"{outcome.action.kind.value} {_target(outcome.action)}: {outcome.error}"
            )
    return {
        "started": timestamp(report.started),
        "finished": timestamp(report.finished),
        "durationSeconds": round(report.duration_seconds, 3),
        "result": report.result.value,
        "revision": report.revision,
        "applied": counts,
        "failed": failures,
        "problems": list(report.problems),
    }


def proxy_entry(p: ProxyStatus) -> Doc:
    """A proxy's status as plain values: the one shape status.yaml and ``--json`` print."""
    return {
        "name": p.name,
        "zone": p.zone,
        "host": p.host,
        "domain": p.domain,
        "state": p.state.value,
        "ip": p.ip,
        "health": p.health.value,
        "detail": p.detail,
    }


def host_entry(h: HostStatus) -> Doc:
    """A host's status as plain values, as status.yaml has it."""
    return {
        "name": h.name,
        "zone": h.zone,
        "reachable": h.reachable,
        "error": h.error,
        "state": h.state.value,
        "owned": h.owned,
        "foreign": h.foreign,
    }


def build(report: RunReport, previous: Mapping[str, Any] | None, *, runs: Sequence[Doc]) -> Doc:
    """The new document. ``runs`` is the history, newest first, this run included."""
    prev = previous or {}
    when = timestamp(report.finished)
    revision = report.revision
    attempted = revision and report.result in (RunResult.SUCCESS, RunResult.PARTIAL)
    prev_conditions = {c.get("type"): c for c in prev.get("conditions", []) if isinstance(c, dict)}
    prev_proxies = {p.get("name"): p for p in prev.get("proxies", []) if isinstance(p, dict)}
    conditions = []
    for c in report.conditions:
        status = "True" if c.status else "False"
        old = prev_conditions.get(c.type, {})
        since = old.get("since", when) if old.get("status") == status else when
        conditions.append(
            {
                "type": c.type,
                "status": status,
                "reason": c.reason,
                "message": c.message,
                "since": since,
            }
        )
    proxies = []
    for p in sorted(report.proxies, key=lambda p: p.name):
        entry = proxy_entry(p)
        old = prev_proxies.get(p.name, {})
        same = all(old.get(k) == entry[k] for k in ("host", "domain", "state", "health"))
        # The engine's record (history.json) when it has one: it outlives the runs a
        # daemon holds in memory and the status file alike.
        recorded = timestamp(p.since) if p.since is not None else None
        entry["since"] = recorded or (old.get("since", when) if same else when)
        proxies.append(entry)
    hosts = [host_entry(h) for h in sorted(report.hosts, key=lambda h: h.name)]
    plan_actions = report.plan.actions if report.plan is not None else ()
    blocked = [
        {
            "action": a.blocks.value,
            "proxy": a.proxy or "",
            "host": a.host or "",
            "domain": a.domain or "",
            "reason": a.reason,
        }
        for a in plan_actions
        if isinstance(a, Blocked)
    ]
    abandoned = [
        {"host": a.host or "", "domain": a.domain or "", "reason": a.reason}
        for a in plan_actions
        if a.kind == ActionKind.ABANDON
    ]
    if report.plan is None and not report.hosts and not report.proxies:
        # Nothing was observed (a stalled or broken run): the last picture still holds.
        hosts = list(prev.get("hosts", []))
        proxies = list(prev.get("proxies", []))
        blocked = list(prev.get("blocked", []))
        abandoned = list(prev.get("abandoned", []))
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "updated": when,
        "observedRevision": revision or prev.get("observedRevision", ""),
        "lastAttemptedRevision": revision if attempted else prev.get("lastAttemptedRevision", ""),
        "lastAppliedRevision": (
            revision
            if revision and report.result == RunResult.SUCCESS
            else prev.get("lastAppliedRevision", "")
        ),
        "suspended": report.suspended,
        "conditions": conditions,
        "hosts": hosts,
        "proxies": proxies,
        "blocked": blocked,
        "abandoned": abandoned,
        "runs": list(runs),
    }


def meaningful(doc: Mapping[str, Any] | None) -> Doc:
    """What must differ for a commit: the state of the fleet, not the story of one run.

    Left out: timestamps (``updated``, every ``since``), the run history, what
    the last run applied (its effect shows in the proxies), why Reconciling
    is False ("Converged" after a change, "NoChanges" on the next idle run).
    The newest run's result, failures and problems count, and so do the per-host
    VM counts (as they stand after the run: a VM made or deleted by hand shows).
    """
    if not doc:
        return {}
    view = {k: v for k, v in doc.items() if k not in _VOLATILE}
    view["conditions"] = [_steady_condition(c) for c in doc.get("conditions", [])]
    view["proxies"] = [_without(p, ("since",)) for p in doc.get("proxies", [])]
    runs = doc.get("runs") or []
    if runs and isinstance(runs[0], dict):
        view["lastRun"] = _without(runs[0], (*_RUN_TIMES, "applied"))
    return view


def _without(entry: Any, keys: Sequence[str]) -> Any:
    if not isinstance(entry, Mapping):
        return entry
    return {k: v for k, v in entry.items() if k not in keys}


def _steady_condition(c: Any) -> Any:
    if not isinstance(c, Mapping):
        return c
    if c.get("type") == "Reconciling" and c.get("status") == "False":
        return {"type": "Reconciling", "status": "False"}
    return _without(c, ("since",))


def changes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """What changed from ``old`` to ``new``, one sentence each, most important first."""
    prev = old or {}
    out: list[str] = []
    for key, label in (
        ("lastAppliedRevision", "applied revision"),
        ("observedRevision", "observed revision"),
    ):
        if new.get(key) and new.get(key) != prev.get(key):
            out.append(f"{label} {str(new[key])[:12]}")
    old_cond = {c["type"]: c for c in prev.get("conditions", [])}
    for c in new.get("conditions", []):
        o = old_cond.get(c["type"])
        if _steady_condition(o) != _steady_condition(c):
            out.append(f"{c['type']} is {c['status']} ({c['reason']})")
    out += _proxy_changes(prev.get("proxies", []), new.get("proxies", []))
    out += _host_changes(prev.get("hosts", []), new.get("hosts", []))
    old_blocked = {_blocked_line(b) for b in prev.get("blocked", [])}
    new_blocked = {_blocked_line(b) for b in new.get("blocked", [])}
    out += [f"blocked: {line}" for line in sorted(new_blocked - old_blocked)]
    out += [f"no longer blocked: {line}" for line in sorted(old_blocked - new_blocked)]
    if new.get("suspended") != prev.get("suspended", False):
        out.append("suspended" if new.get("suspended") else "resumed")
    new_run = meaningful(new).get("lastRun", {})
    if not out and new_run != meaningful(prev).get("lastRun", {}):
        failed = len(new_run.get("failed", []))
        problems = len(new_run.get("problems", []))
        out.append(f"last run {new_run.get('result')}: {failed} failed, {problems} problems")
    if not out and meaningful(prev) != meaningful(new):
        out.append("status details changed")
    return out


def commit_message(
    old: Mapping[str, Any] | None, new: Mapping[str, Any], *, extra: Sequence[str] = ()
) -> str:
    """Subject and body: what changed from ``old`` to ``new``, then the ``extra`` lines."""
    lines = [*changes(old, new), *extra] or ["status refreshed"]
    revision = str(new.get("observedRevision", ""))[:12] or "no revision"
    subject = f"Status of {revision}: {lines[0]}"
    if len(lines) > 1:
        subject += f" (+{len(lines) - 1} more)"
    body = "\n".join(f"- {line}" for line in lines)
    return f"{subject}\n\n{body}\n"


def _proxy_changes(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> list[str]:
    before = {p["name"]: p for p in old}
    after = {p["name"]: p for p in new}
    out = []
    for name, p in after.items():
        o = before.get(name)
        if o is None:
            where = f" on {p['host']}" if p.get("host") else ""
            out.append(f"proxy {name} {p['state']}{where}, {p['health']}")
            continue
        diffs = [
            f"{k} {o.get(k) or '-'} -> {p.get(k) or '-'}"
            for k in ("host", "domain", "state", "ip", "health")
            if o.get(k) != p.get(k)
        ]
        if diffs:
            out.append(f"proxy {name}: {', '.join(diffs)}")
        elif o.get("detail") != p.get("detail"):
            out.append(f"proxy {name}: {p.get('detail') or 'detail cleared'}")
    out += [f"proxy {name} gone" for name in before if name not in after]
    return out


def _host_changes(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> list[str]:
    before = {h["name"]: h for h in old}
    out = []
    for h in new:
        o = before.get(h["name"])
        if o is not None and o.get("reachable") == h["reachable"]:
            continue
        if h["reachable"]:
            out.append(f"host {h['name']} reachable")
        else:
            out.append(f"host {h['name']} unreachable: {h.get('error', '')}".rstrip(": "))
    for h in new:
        o = before.get(h["name"])
        if o is not None and h["reachable"] and _phase(o) != _phase(h):
            out.append(f"host {h['name']} {_phase(h)}")
    names = {h["name"] for h in new}
    out += [f"host {name} removed" for name in before if name not in names]
    return out


def _blocked_line(b: Mapping[str, Any]) -> str:
    target = b.get("proxy") or b.get("domain") or b.get("host") or "fleet"
    return f"{b.get('action') or 'action'} of {target} ({b.get('reason', '')})"


def _target(action: Any) -> str:
    parts = [action.proxy or action.domain or "", f"on {action.host}" if action.host else ""]
    return " ".join(p for p in parts if p)


def dump_yaml(doc: Mapping[str, Any]) -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    stream = io.StringIO()
    yaml.dump(dict(doc), stream)
    return "# Written by proxyfleet; do not edit (the next change overwrites it).\n" + (
        stream.getvalue()
    )


def parse_yaml(text: str) -> Doc | None:
    """A previous status.yaml, or None when it is missing, unreadable or not ours.

    The status branch takes pushes from anyone with commit access, so the text
    is loaded with the bounded loader and its shape checked (``well_formed``):
    a document this module could trip over counts as absent.
    """
    documents, problems = load_documents(text, "status.yaml")
    if problems or len(documents) != 1:
        return None
    data = documents[0].data
    return data if well_formed(data) else None


_SCALAR = (str, int, float, bool, type(None))
_ENTRY_KEYS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "conditions": {"type": str, "status": str, "reason": str, "message": str},
    "proxies": {"name": str, "host": str, "domain": str, "state": str, "health": str},
    "hosts": {"name": str, "reachable": bool},
    "blocked": {},
    "abandoned": {},
    "runs": {},
}


def well_formed(data: Any) -> bool:
    """True when ``data`` has the shape ``build`` writes (every field this module reads)."""
    if not isinstance(data, dict) or data.get("kind") != KIND:
        return False
    for key in ("updated", "observedRevision", "lastAttemptedRevision", "lastAppliedRevision"):
        if not isinstance(data.get(key, ""), str):
            return False
    if not isinstance(data.get("suspended", False), bool):
        return False
    for key, required in _ENTRY_KEYS.items():
        entries = data.get(key, [])
        if not isinstance(entries, list) or not all(
            _entry_ok(entry, required, run=key == "runs") for entry in entries
        ):
            return False
    return True


def _entry_ok(entry: Any, required: Mapping[str, type | tuple[type, ...]], *, run: bool) -> bool:
    if not isinstance(entry, dict):
        return False
    if any(not isinstance(entry.get(k), t) for k, t in required.items()):
        return False
    if not isinstance(entry.get("since", ""), str):
        return False
    for value in entry.values():
        if isinstance(value, _SCALAR):
            continue
        if run and isinstance(value, list) and all(isinstance(v, str) for v in value):
            continue
        if run and isinstance(value, dict) and all(isinstance(v, int) for v in value.values()):
            continue
        return False
    return True
