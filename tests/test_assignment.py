"""The step a daemon takes for one fleet, from the ring's word and its own standing."""

from __future__ import annotations

import pytest

from reconciler.core.assignment import Step, owned, step


@pytest.mark.parametrize(
    ("assigned", "leading", "expected"),
    [
        (True, False, Step.TAKE),
        (True, True, Step.KEEP),
        (False, True, Step.YIELD),
        (False, False, Step.WAIT),
    ],
)
def test_the_step_follows_the_table_of_the_module_docstring(
    assigned: bool, leading: bool, expected: Step
) -> None:
    assert step(assigned=assigned, leading=leading) is expected


def test_a_fleet_is_owned_only_by_the_member_the_ring_names() -> None:
    assert owned("box-a", "box-a")
    assert not owned("box-b", "box-a")


def test_a_ring_not_read_yet_gives_the_fleet_to_nobody() -> None:
    assert not owned(None, "box-a")
