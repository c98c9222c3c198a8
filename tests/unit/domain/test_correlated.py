"""Correlated loss of heartbeats (functions/domain/correlated.py): which jobs count, and when
their silence is ours rather than their hosts'."""

from __future__ import annotations

import pytest

from functions.domain.correlated import Watch, correlated, held, watch
from functions.domain.health import Health, HeartbeatView, InstanceView
from functions.domain.jobspec import Policy

NOW = 1_800_000_000.0
POLICY = Policy()  # heartbeat timeout 180 s: silent from 90 s


def beat(age: float, phase: str = "training") -> HeartbeatView:
    return HeartbeatView(at=NOW - age, phase=phase)


@pytest.mark.parametrize(
    ("case", "heartbeat", "instance", "expected"),
    [
        ("fresh, running", beat(10), InstanceView(actual_status="running"), Watch(watched=True)),
        (
            "half the timeout, running",
            beat(90),
            InstanceView(actual_status="running"),
            Watch(watched=True, silent=True),
        ),
        ("just under half", beat(89.9), InstanceView(actual_status="running"), Watch(watched=True)),
        (
            "Vast unreadable: not known gone",
            beat(200),
            InstanceView(listed=False),
            Watch(watched=True, silent=True),
        ),
        ("Vast says exited", beat(200), InstanceView(actual_status="exited"), Watch()),
        ("gone from Vast", beat(200), InstanceView(present=False), Watch()),
        ("loading", beat(200), InstanceView(actual_status="loading"), Watch()),
        ("no heartbeat yet", None, InstanceView(actual_status="running"), Watch()),
        ("starting", beat(200, "starting"), InstanceView(actual_status="running"), Watch()),
        ("finished", beat(200, "finished"), InstanceView(actual_status="running"), Watch()),
        (
            "uploading",
            beat(200, "uploading"),
            InstanceView(actual_status="running"),
            Watch(watched=True, silent=True),
        ),
    ],
)
def test_which_jobs_are_watched_and_silent(
    case: str, heartbeat: HeartbeatView | None, instance: InstanceView, expected: Watch
) -> None:
    assert watch(heartbeat, instance, POLICY, NOW) == expected, case


SILENT, QUIET = Watch(watched=True, silent=True), Watch(watched=True)


@pytest.mark.parametrize(
    ("case", "watches", "expected"),
    [
        ("two of two silent: two hosts can die together", [SILENT] * 2, False),
        ("three of three", [SILENT] * 3, True),
        ("three of six: half", [SILENT] * 3 + [QUIET] * 3, True),
        ("three of seven: under half", [SILENT] * 3 + [QUIET] * 4, False),
        ("ten of twenty", [SILENT] * 10 + [QUIET] * 10, True),
        ("unwatched jobs do not dilute", [SILENT] * 3 + [Watch()] * 10, True),
        ("nobody", [], False),
    ],
)
def test_a_loss_is_correlated_from_three_jobs_and_half_of_the_watched(
    case: str, watches: list[Watch], expected: bool
) -> None:
    assert correlated(watches) is expected, case


def test_only_dead_verdicts_are_held() -> None:
    assert held(Health.DEAD, None) and held(Health.FAILED, Health.DEAD)
    assert not held(Health.HUNG, None) and not held(Health.FAILED, Health.HUNG)
    assert not held(Health.OVER_BUDGET, None)
