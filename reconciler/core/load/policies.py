"""The rules a fleet runs by, read from a valid document with their defaults filled in:
fleet.yaml's policy (prune, delete budget, drift, rollout, overcommit, shrink) and a
proxy's health check. ``reading`` calls these once the schema check passed."""

from __future__ import annotations

from typing import Any

from reconciler.core.load import durations
from reconciler.model.fleet import (
    Amount,
    DriftMode,
    HealthCheck,
    Overcommit,
    Policy,
    Rollout,
)


def read_policy(value: dict[str, Any]) -> Policy:
    """fleet.yaml's ``spec.policy`` (a valid one), its defaults filled in."""
    defaults = Policy()
    return Policy(
        prune=value.get("prune", defaults.prune),
        max_deletes_per_run=value.get("maxDeletesPerRun", defaults.max_deletes_per_run),
        allow_empty=value.get("allowEmpty", defaults.allow_empty),
        drift=DriftMode(value.get("drift", defaults.drift.value)),
        suspend=value.get("suspend", defaults.suspend),
        rollout=_rollout(value.get("rollout", {})),
        overcommit=_overcommit(value.get("overcommit", {})),
        max_shrink_percent=value.get("maxShrinkPercent", defaults.max_shrink_percent),
        acknowledge_shrink_to=value.get("acknowledgeShrinkTo"),
    )


def _overcommit(value: dict[str, Any]) -> Overcommit:
    defaults = Overcommit()
    return Overcommit(
        memory=float(value.get("memory", defaults.memory)),
        cpu=float(value.get("cpu", defaults.cpu)),
        disk=float(value.get("disk", defaults.disk)),
    )


def _amount(value: int | str) -> Amount:
    if isinstance(value, str):
        return Amount(int(value.removesuffix("%")), percent=True)
    return Amount(value)


def _rollout(value: dict[str, Any]) -> Rollout:
    defaults = Rollout()
    surge = value.get("maxSurge")
    unavailable = value.get("maxUnavailable")
    return Rollout(
        max_surge=_amount(surge) if surge is not None else defaults.max_surge,
        max_unavailable=_amount(unavailable)
        if unavailable is not None
        else defaults.max_unavailable,
    )


def read_health(value: dict[str, Any]) -> HealthCheck:
    """A proxy's ``spec.health`` (a valid one, fleet.yaml's defaults merged), its defaults
    filled in."""
    defaults = HealthCheck()
    return HealthCheck(
        proxy_port=value.get("proxyPort", defaults.proxy_port),
        probe_url=value.get("probeURL", defaults.probe_url),
        expect_status=value.get("expectStatus", defaults.expect_status),
        timeout_seconds=durations.seconds(value.get("timeoutSeconds", defaults.timeout_seconds)),
        replace_after_seconds=durations.seconds(
            value.get("replaceAfterSeconds", defaults.replace_after_seconds)
        ),
        max_restarts=value.get("maxRestarts", defaults.max_restarts),
        restart_window_seconds=durations.seconds(
            value.get("restartWindowSeconds", defaults.restart_window_seconds)
        ),
    )
