"""Job states and transitions, written out in full.

Each expectation is spelled here, not derived from the constants under test: a state missing
from `TERMINAL_STATES` or one arrow added to `ALLOWED_TRANSITIONS` fails a named case.
"""

from __future__ import annotations

import itertools

import pytest

from functions.domain.health import ACTIONS, BLAMES_HOST, Health
from functions.domain.job import JobState, can_transition, is_terminal

S = JobState
TERMINAL = {"FINISHED", "FAILED", "CANCELLED", "OVER_BUDGET"}
ARROWS = {
    ("PENDING", "PROVISIONING"),
    ("PENDING", "STOPPING"),
    ("PENDING", "FAILED"),
    ("PROVISIONING", "RUNNING"),
    ("PROVISIONING", "STOPPING"),
    ("PROVISIONING", "FAILED"),
    ("RUNNING", "REPLACING"),
    ("RUNNING", "STOPPING"),
    ("RUNNING", "FAILED"),
    ("REPLACING", "RUNNING"),
    ("REPLACING", "STOPPING"),
    ("REPLACING", "FAILED"),
    ("STOPPING", "FINISHED"),
    ("STOPPING", "FAILED"),
    ("STOPPING", "CANCELLED"),
    ("STOPPING", "OVER_BUDGET"),
}
STATES = [
    "PENDING",
    "PROVISIONING",
    "RUNNING",
    "REPLACING",
    "STOPPING",
    "FINISHED",
    "FAILED",
    "CANCELLED",
    "OVER_BUDGET",
]


def test_the_states_are_these_nine() -> None:
    assert sorted(s.value for s in JobState) == sorted(STATES)


@pytest.mark.parametrize("state", STATES)
def test_terminal_states(state: str) -> None:
    assert is_terminal(S(state)) is (state in TERMINAL)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(STATES, STATES)))
def test_every_pair_of_states(current: str, target: str) -> None:
    assert can_transition(S(current), S(target)) is ((current, target) in ARROWS)


@pytest.mark.parametrize(
    ("health", "action"),
    [
        ("starting", "none"),
        ("healthy", "none"),
        ("dead", "replace"),
        ("hung", "replace"),
        ("crashed", "replace"),
        ("over_budget", "stop"),
        ("finished", "stop"),  # a finished job is never re-rented
        ("failed", "stop"),
    ],
)
def test_what_each_verdict_does(health: str, action: str) -> None:
    assert ACTIONS[Health(health)] == action


@pytest.mark.parametrize(
    ("health", "blames"),
    [
        ("starting", False),
        ("healthy", False),
        ("dead", True),
        ("hung", True),
        ("crashed", False),  # the script's fault, not the host's
        ("over_budget", False),
        ("finished", False),
        ("failed", False),
    ],
)
def test_which_verdicts_blame_the_host(health: str, blames: bool) -> None:
    assert (Health(health) in BLAMES_HOST) is blames
