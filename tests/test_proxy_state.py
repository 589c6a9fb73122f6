"""A proxy's state is an enum whose values are the strings status.yaml and the metrics
have always carried: a DomainState of its VM, or absent, unknown, failed."""

from __future__ import annotations

from reconciler.core.status import statusdoc
from reconciler.model import DomainState
from reconciler.model.report import ProxyState, ProxyStatus


def test_proxy_states_are_the_domain_states_and_absent_unknown_failed() -> None:
    assert {s.value for s in ProxyState} == {d.value for d in DomainState} | {
        "absent",
        "unknown",
        "failed",
    }
    assert all(ProxyState.of(d).value == d.value for d in DomainState)


def test_a_status_written_with_the_enum_prints_the_plain_string() -> None:
    shown = statusdoc.proxy_entry(ProxyStatus("web-1", state=ProxyState.SHUTOFF))
    assert shown["state"] == "shutoff" and type(shown["state"]) is str


def test_a_serialized_state_read_back_becomes_the_enum() -> None:
    assert ProxyStatus("web-1", state="unknown").state is ProxyState.UNKNOWN  # type: ignore[arg-type]
