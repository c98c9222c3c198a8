"""The agent's `resumed` report (tether_agent/progress.py `ResumeWatch`): the step resumed at, when
the training process started, and when the first step past it was seen."""

from __future__ import annotations

import pytest
from tether_agent.progress import ResumeWatch
from tether_agent.protocol import ResumeReport


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("resumed", "baseline", "readings", "first_step_at"),
    [
        # (readings: the `current_step` seen at 1001, 1002, … seconds)
        pytest.param(100, 100, [100, 100, 101, 102], 1_003.0, id="restored-then-stepped"),
        pytest.param(0, None, [None, None, 1], 1_003.0, id="fresh-start"),
        pytest.param(100, 100, [100, 100, 100], None, id="still-loading-the-model"),
        pytest.param(100, 500, [500, 500, 101], 1_003.0, id="stale-progress-file-ignored"),
        pytest.param(100, 100, [150], 1_001.0, id="many-steps-between-polls"),
        pytest.param(100, 100, [101, 102, 103], 1_001.0, id="first-seen-kept"),
    ],
)
def test_the_first_step_is_the_first_reading_past_the_resumed_step(
    resumed: int, baseline: int | None, readings: list[int | None], first_step_at: float | None
) -> None:
    clock = Clock()
    watch = ResumeWatch(clock)
    watch.observe(resumed + 1)  # before training started: nothing to report
    assert watch.report() is None and not watch.waiting()
    watch.started(resumed, baseline)
    for reading in readings:
        clock.now += 1
        watch.observe(reading)
    assert watch.report() == ResumeReport(
        step=resumed, started_at=1_000.0, first_step_at=first_step_at
    )
    assert watch.waiting() is (first_step_at is None)
