"""Honest recovery figures (functions/domain/recovery.py): agent times on the server's clock,
lost work as the last known step minus the step resumed at, and how it is said."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from functions.domain.heartbeat_contract import GpuProbe, HeartbeatRequest, ResumeReport
from functions.domain.job import Heartbeat
from functions.domain.recovery import (
    LostWork,
    Resumed,
    last_known_step,
    lost_work,
    resumed_message,
    resumed_on_server,
    server_time,
)

NOW = 1_800_000_000.0
GPU = GpuProbe(available=False)


def request(**fields: Any) -> HeartbeatRequest:
    values: dict[str, Any] = {
        "job_id": "tiny-0000000a",
        "generation": 2,
        "phase": "training",
        "gpu": GPU,
        "agent_time": 1_000.0,
    }
    values.update(fields)
    return HeartbeatRequest(**values)


@pytest.mark.parametrize(
    ("agent_at", "agent_time", "now", "expected"),
    [
        pytest.param(990.0, 1_000.0, NOW, NOW - 10, id="ten-seconds-before-the-heartbeat"),
        pytest.param(1_000.0, 1_000.0, NOW, NOW, id="stamped-with-the-heartbeat"),
        pytest.param(1_005.0, 1_000.0, NOW, NOW, id="after-the-heartbeat-clamped-to-arrival"),
        pytest.param(NOW - 7_210, NOW - 7_200, NOW, NOW - 10, id="agent-clock-2h-behind"),
    ],
)
def test_agent_times_are_read_on_the_server_clock(
    agent_at: float, agent_time: float, now: float, expected: float
) -> None:
    assert server_time(agent_at, agent_time=agent_time, now=now) == expected


def test_the_resumed_report_is_converted_and_measures_start_to_first_step() -> None:
    report = ResumeReport(step=400, started_at=950.0, first_step_at=958.5)
    resumed = resumed_on_server(request(resumed=report), NOW)
    assert resumed == Resumed(step=400, started_at=NOW - 50, first_step_at=NOW - 41.5)
    assert resumed is not None and resumed.first_step_after_start_s == 8.5
    waiting = resumed_on_server(request(resumed=ResumeReport(step=0, started_at=999.0)), NOW)
    assert waiting == Resumed(step=0, started_at=NOW - 1, first_step_at=None)
    assert waiting is not None and waiting.first_step_after_start_s is None
    assert resumed_on_server(request(), NOW) is None


def test_a_first_step_before_the_process_started_is_refused() -> None:
    with pytest.raises(ValidationError, match="first_step_at is before started_at"):
        ResumeReport(step=3, started_at=950.0, first_step_at=949.0)


@pytest.mark.parametrize(
    ("last_step", "resumed_step", "ended", "expected"),
    [
        pytest.param(117, 100, False, LostWork(steps=17, lower_bound=True), id="killed-17-after"),
        pytest.param(100, 100, False, LostWork(steps=0, lower_bound=True), id="at-the-checkpoint"),
        pytest.param(117, 100, True, LostWork(steps=17, lower_bound=False), id="training-exited"),
        pytest.param(100, 100, True, LostWork(steps=0, lower_bound=False), id="exited-nothing"),
        pytest.param(None, 0, False, LostWork(steps=0, lower_bound=True), id="never-reported"),
        pytest.param(90, 100, False, LostWork(steps=0, lower_bound=True), id="resumed-ahead"),
        pytest.param(250, 0, False, LostWork(steps=250, lower_bound=True), id="fresh-restart"),
    ],
)
def test_lost_work_is_the_last_known_step_minus_the_resumed_one(
    last_step: int | None, resumed_step: int, ended: bool, expected: LostWork
) -> None:
    assert lost_work(last_step, resumed_step, training_ended=ended) == expected


@pytest.mark.parametrize(
    ("lost", "said"),
    [
        pytest.param(LostWork(steps=17, lower_bound=True), "≥ 17 steps lost", id="bound-17"),
        pytest.param(LostWork(steps=0, lower_bound=True), "≥ 0 steps lost", id="bound-none"),
        pytest.param(LostWork(steps=1, lower_bound=True), "≥ 1 step lost", id="bound-one"),
        pytest.param(LostWork(steps=17, lower_bound=False), "17 steps lost", id="exact-17"),
        pytest.param(LostWork(steps=1, lower_bound=False), "1 step lost", id="exact-one"),
        pytest.param(LostWork(steps=0, lower_bound=False), "no steps lost", id="exact-none"),
    ],
)
def test_lost_work_is_never_called_none_unless_it_is_known(lost: LostWork, said: str) -> None:
    assert lost.describe() == said


def beat(step: int | None, exit_code: int | None = None) -> Heartbeat:
    return Heartbeat(
        at=NOW, agent_time=NOW, phase="training", step=step, gpu=GPU, exit_code=exit_code
    )


@pytest.mark.parametrize(
    ("heartbeat", "expected"),
    [
        pytest.param(beat(117), (117, False), id="training"),
        pytest.param(beat(117, exit_code=1), (117, True), id="exited"),
        pytest.param(beat(None), (None, False), id="no-step"),
        pytest.param(None, (None, False), id="no-heartbeat"),
    ],
)
def test_the_last_known_step_is_the_last_heartbeat_s(
    heartbeat: Heartbeat | None, expected: tuple[int | None, bool]
) -> None:
    assert last_known_step(heartbeat) == expected


def test_the_timeline_line_says_where_when_and_the_lower_bound() -> None:
    resumed = Resumed(step=100, started_at=NOW - 10, first_step_at=NOW - 1.5)
    lost = LostWork(steps=17, lower_bound=True)
    assert resumed_message(2, resumed, since_incident_s=12.25, lost=lost, previous_step=117) == (
        "generation 2 resumed at step 100; first step 8.5 s after the training process "
        "started, 12.2 s after the replace began; ≥ 17 steps lost (generation 1 last reported "
        "step 117)"
    )
    fresh = Resumed(step=0, started_at=NOW - 10, first_step_at=NOW - 2)
    assert resumed_message(1, fresh, since_incident_s=None, lost=None, previous_step=None) == (
        "generation 1 started at step 0; first step 8.0 s after the training process started"
    )
