"""STATUS.md: the status document as tables a person reads on the git forge."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.core.status.statusdoc import host_state


def render_markdown(doc: Mapping[str, Any]) -> str:
    out = ["# proxyfleet status", ""]
    out.append(
        f"Updated {doc.get('updated', '')}. Revision observed `{_short(doc, 'observedRevision')}`, "
        f"last applied `{_short(doc, 'lastAppliedRevision')}`, "
        f"last attempted `{_short(doc, 'lastAttemptedRevision')}`."
    )
    if doc.get("suspended"):
        out += ["", "**The fleet is suspended (`spec.policy.suspend`): nothing is changed.**"]
    out += _section(
        "Conditions",
        ("Condition", "Status", "Reason", "Message", "Since"),
        [
            (c["type"], c["status"], c["reason"], c["message"], c["since"])
            for c in _list(doc, "conditions")
        ],
    )
    out += _section(
        "Proxies",
        ("Proxy", "Zone", "Host", "State", "IP", "Health", "Since", "Detail"),
        [
            (
                p["name"],
                p["zone"],
                p["host"],
                p["state"],
                p["ip"],
                p["health"],
                p["since"],
                p["detail"],
            )
            for p in _list(doc, "proxies")
        ],
    )
    out += _section(
        "Hosts",
        ("Host", "Zone", "State", "Reachable", "Owned VMs", "Foreign VMs", "Error"),
        [
            (
                h["name"],
                h["zone"],
                host_state(h),
                "yes" if h["reachable"] else "**no**",
                h["owned"],
                h["foreign"],
                h["error"],
            )
            for h in _list(doc, "hosts")
        ],
    )
    out += _section(
        "Blocked actions",
        ("Action", "Proxy", "Host", "Domain", "Reason"),
        [
            (b["action"], b["proxy"], b["host"], b["domain"], b["reason"])
            for b in _list(doc, "blocked")
        ],
    )
    abandoned = _list(doc, "abandoned")
    if abandoned:
        out += _section(
            "Abandoned VMs (their host left fleet.yaml; never deleted)",
            ("Host", "Domain", "Reason"),
            [(a["host"], a["domain"], a["reason"]) for a in abandoned],
        )
    out += _section(
        "Last runs",
        ("Started", "Seconds", "Result", "Revision", "Applied", "Failed", "Problems"),
        [
            (
                r["started"],
                r["durationSeconds"],
                r["result"],
                str(r["revision"])[:12],
                ", ".join(f"{k} {v}" for k, v in r.get("applied", {}).items()),
                "; ".join(r.get("failed", [])),
                "; ".join(r.get("problems", [])),
            )
            for r in _list(doc, "runs")
        ],
    )
    return "\n".join(out) + "\n"


def _short(doc: Mapping[str, Any], key: str) -> str:
    return str(doc.get(key) or "-")[:12]


def _list(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = doc.get(key) or []
    return [v for v in value if isinstance(v, Mapping)]


def _cell(value: object) -> str:
    text = " ".join(str(value).split())
    return text.replace("|", "\\|") if text else " "


def _section(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    out = ["", f"## {title}", ""]
    if not rows:
        return [*out, "None."]
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join("---" for _ in header) + "|")
    out += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return out
