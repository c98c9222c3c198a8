"""What `tether status` answers (`functions/domain/job_status.py`): each rule by a table of
cases with the expected values written out."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.heartbeat_contract import CheckpointRef, GpuProbe
from functions.domain.job import Generation, Heartbeat, JobState
from functions.domain.job_status import (
    LastError,
    Pace,
    Transition,
    current_reason,
    host_state,
    last_error,
    last_transition,
    pace_of,
    progress,
)
from functions.domain.jobspec import parse_job
from functions.domain.log_gaps import missing_log_reason
from tests.unit.domain.builders import NOW, SPEC, gen, job

TIMEOUT_S = 180.0


def beat(age_s: float = 10, phase: str = "training", **fields: Any) -> Heartbeat:
    values: dict[str, Any] = {
        "at": NOW - age_s, "agent_time": NOW, "phase": phase, "step": 400,
        "gpu": GpuProbe(available=True),
    }  # fmt: skip
    return Heartbeat(**(values | fields))


def training(n: int = 2, *, steps: int, seconds: float, **fields: Any) -> Generation:
    """A generation that trained `steps` in `seconds` from its first step to its last beat."""
    return gen(
        n, heartbeat=beat(0, step=100 + steps), resumed_step=100, first_step_at=NOW - seconds,
        **fields,
    )  # fmt: skip


# --- the reason and the last transition -----------------------------------------------------


@pytest.mark.parametrize(
    ("state", "reason", "shown"),
    [
        (JobState.RUNNING, "dead: no heartbeat for 400 s", None),  # recovered: history
        (JobState.REPLACING, "dead: no heartbeat for 400 s", "dead: no heartbeat for 400 s"),
        (JobState.STOPPING, "cancelled by me", "cancelled by me"),
        (JobState.FAILED, "crashed: the script's own error", "crashed: the script's own error"),
        (JobState.PROVISIONING, "", None),
        (JobState.PENDING, "", None),
    ],
)
def test_the_reason_is_shown_only_while_it_is_the_state_of_affairs(state, reason, shown) -> None:
    assert current_reason(job(state, state_reason=reason)) == shown


RECOVERED_AT = NOW - 240


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        ("dead: no heartbeat for 400 s", "recovered from a dead host"),
        ("hung: no step for 1800 s", "recovered from a hung host"),
        ("crashed: training exited with code 1", "recovered from a training crash"),
        ("outbid: stopped by a higher bid", "recovered from an outbid host"),
        ("moved: by hand", "recovered from moved"),
    ],
)
def test_a_recovery_is_said_with_its_cause_from_the_first_step(reason: str, text: str) -> None:
    recovered = job(
        JobState.RUNNING, 2, state_reason=reason, previous_state=JobState.REPLACING,
        updated_at=NOW - 400,
    )  # fmt: skip
    current = gen(2, first_step_at=RECOVERED_AT)
    assert last_transition(recovered, current) == Transition(text=text, at=RECOVERED_AT)


def test_a_recovery_before_the_first_step_says_training_has_not_resumed() -> None:
    recovering = job(
        JobState.RUNNING, 2, state_reason="dead: offline", previous_state=JobState.REPLACING,
        updated_at=NOW - 60,
    )  # fmt: skip
    assert last_transition(recovering, gen(2)) == Transition(
        text="recovering from a dead host: a new host is rented, training not resumed yet",
        at=NOW - 60,
    )


@pytest.mark.parametrize(
    ("state", "previous", "text"),
    [
        (JobState.RUNNING, JobState.PROVISIONING, "rented its host"),
        (JobState.PROVISIONING, JobState.PENDING, "looking for a host"),
        (JobState.REPLACING, JobState.RUNNING, "replacing its host"),
        (JobState.STOPPING, JobState.RUNNING, "stopping"),
        (JobState.FAILED, JobState.STOPPING, "ended FAILED"),
        (JobState.FINISHED, JobState.STOPPING, "ended FINISHED"),
    ],
)
def test_every_other_transition_is_said_at_its_time(state, previous, text) -> None:
    found = job(state, previous_state=previous, updated_at=NOW - 30, state_reason="x: y")
    assert last_transition(found, gen(1)) == Transition(text=text, at=NOW - 30)


def test_a_pending_job_was_submitted_at_its_creation() -> None:
    pending = job(JobState.PENDING, 0)
    assert last_transition(pending, None) == Transition(
        text="submitted, waiting for a host to be looked for", at=NOW - 600
    )


# --- the host's state -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "state", "since"),
    [
        (None, "none", None),
        (gen(1, beat_age=None, created_at=NOW - 90), "provisioning", NOW - 90),
        (gen(1, heartbeat=beat(10, "restoring")), "restoring", None),
        (gen(1, heartbeat=beat(10, "training")), "training", None),
        (gen(1, heartbeat=beat(179, "training")), "training", None),
        (gen(1, heartbeat=beat(181, "training")), "lost", NOW - 181),
        (gen(1, heartbeat=beat(181, "restoring")), "lost", NOW - 181),
        (gen(1, heartbeat=beat(900, "finished")), "finished", None),
        (gen(1, is_current=False, status="superseded"), "replaced", None),
        (gen(1, is_current=False, ended_at=NOW - 50), "ended", NOW - 50),
    ],
)
def test_the_host_state_is_the_generations_not_its_record_status(generation, state, since) -> None:
    found = host_state(generation, TIMEOUT_S, NOW)
    assert (found.state, found.since) == (state, since)


# --- pace -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "expected"),
    [
        # 120 steps in 10 min on this host: settled, ±10 %
        (training(steps=120, seconds=600), Pace(steps_per_min=12, low=10.8, high=13.2,
                                                 source="this host")),
        # 12 steps in one minute: early, ±50 %
        (training(steps=12, seconds=60), Pace(steps_per_min=12, low=6, high=18,
                                               source="this host")),
        # 9 steps in 10 min: too few steps to be settled
        (training(steps=9, seconds=600), Pace(steps_per_min=0.9, low=0.45, high=1.35,
                                              source="this host")),
        # no step yet: the speed prior's 600 steps/h, from half to twice it
        (gen(2, prior_steps_per_hour=600.0), Pace(steps_per_min=10, low=5, high=20,
                                                   source="prior")),
        (gen(2), None),
    ],
)  # fmt: skip
def test_the_pace_and_its_band(generation: Generation, expected: Pace | None) -> None:
    found = pace_of(generation, [generation])
    if expected is None:
        assert found is None
        return
    assert found is not None and found.source == expected.source
    assert (found.steps_per_min, found.low, found.high) == pytest.approx(
        (expected.steps_per_min, expected.low, expected.high)
    )


def test_without_a_resumed_report_the_pace_starts_at_the_first_training_heartbeat() -> None:
    # No resumed report: from the first `training` heartbeat (step 40, 20 min ago) on.
    current = gen(1, heartbeat=beat(0, step=280), training_started_at=NOW - 1200,
                  training_start_step=40)  # fmt: skip
    found = pace_of(current, [current])
    assert found is not None and found.steps_per_min == pytest.approx(12)


def test_an_earlier_host_of_the_same_gpu_lends_its_pace_with_a_wider_band() -> None:
    earlier = training(1, steps=300, seconds=1200, gpu_name="RTX 4090", gpu_count=1)
    other_gpu = training(2, steps=600, seconds=600, gpu_name="A100 SXM4", gpu_count=1)
    current = gen(3, gpu_name="rtx  4090", gpu_count=1, prior_steps_per_hour=6000.0)
    found = pace_of(current, [earlier, other_gpu, current])
    assert found == Pace(steps_per_min=15, low=11.25, high=18.75, source="an earlier host")
    lone = gen(3, gpu_name="H100 SXM", gpu_count=1, prior_steps_per_hour=6000.0)
    assert pace_of(lone, [earlier, other_gpu, lone]) == Pace(
        steps_per_min=100, low=50, high=200, source="prior"
    )


# --- step N of M, ETA and the expected total ------------------------------------------------


def with_total(total_steps: int | None, **fields: Any) -> Any:
    spec = parse_job(SPEC | ({"total_steps": total_steps} if total_steps else {}))
    return job(JobState.RUNNING, 2, spec=spec, spent_usd=1.0, **fields)


def test_eta_and_expected_total_from_the_steps_left_at_the_pace_and_the_hosts_rate() -> None:
    # Step 400 of 1000 at 12 steps/min (±10 %), $0.60/h, $1.00 spent so far.
    current = training(steps=300, seconds=1500, usd_per_hour=0.6)
    found = progress(with_total(1000), current, [current])
    assert (found.step, found.total_steps, found.total_steps_from) == (400, 1000, "spec")
    assert found.eta_s == pytest.approx(3000)  # 600 steps ÷ 12/min = 50 min
    assert (found.eta_low_s, found.eta_high_s) == pytest.approx((2727.27, 3333.33), abs=0.01)
    assert found.to_finish_usd == pytest.approx(0.50)
    assert found.expected_total_usd == pytest.approx(1.50)
    assert (found.expected_total_low_usd, found.expected_total_high_usd) == pytest.approx(
        (1.4545, 1.5556), abs=1e-4
    )


def test_the_scripts_total_counts_when_the_spec_gives_none_and_the_spec_wins() -> None:
    current = gen(2, heartbeat=beat(0, step=50, total_steps=800))
    assert progress(with_total(None), current, [current]).model_dump(
        include={"step", "total_steps", "total_steps_from"}
    ) == {"step": 50, "total_steps": 800, "total_steps_from": "script"}
    assert progress(with_total(1000), current, [current]).total_steps_from == "spec"


def test_without_a_total_or_a_pace_there_is_no_eta() -> None:
    stepping = training(steps=300, seconds=1500)
    assert progress(with_total(None), stepping, [stepping]).eta_s is None
    unknown = gen(2, heartbeat=beat(0, step=10))
    found = progress(with_total(1000), unknown, [unknown])
    assert (found.step, found.pace, found.eta_s, found.expected_total_usd) == (10, None, None, None)


def test_an_ended_job_has_its_step_but_no_eta() -> None:
    current = training(steps=300, seconds=1500)
    ended = with_total(1000).model_copy(update={"state": JobState.FINISHED})
    found = progress(ended, current, [current])
    assert (found.step, found.eta_s) == (400, None)


def test_before_any_heartbeat_the_step_is_the_newest_recorded_checkpoint() -> None:
    recorded = [CheckpointRef(step=300, generation=1, manifest_key="m")]
    found = progress(with_total(1000, recorded_checkpoints=recorded), gen(2, beat_age=None), [])
    assert found.step == 300


# --- the last error -------------------------------------------------------------------------

TAIL = "Traceback (most recent call last):\nNameError: nme\n\n"


def failed(n: int, code: int | None = 1) -> Generation:
    return gen(n, heartbeat=beat(0, "failed", exit_code=code, exit_output=TAIL))


EXITED = "training exited with code 1: NameError: nme"
DEAD = "host replaced as dead: offline"


@pytest.mark.parametrize(
    ("incident", "generations", "expected"),
    [
        (None, [gen(1)], None),
        (None, [failed(1)], LastError(generation=1, text=EXITED)),
        (None, [failed(1, None)],
         LastError(generation=1, text="training could not start: NameError: nme")),
        # a newer generation's host replaced as dead: its reason
        ((2, "dead: offline"), [failed(1), gen(2)], LastError(generation=2, text=DEAD)),
        # the same generation: the training's own words
        ((1, "crashed: exit 1"), [failed(1)], LastError(generation=1, text=EXITED)),
        ((1, "dead: offline"), [gen(1), gen(2)], LastError(generation=1, text=DEAD)),
    ],
)  # fmt: skip
def test_the_last_error_in_one_line(incident, generations, expected) -> None:
    fields = {} if incident is None else {"incident_generation": incident[0],
                                           "incident_reason": incident[1]}  # fmt: skip
    assert last_error(job(JobState.RUNNING, 2, **fields), generations) == expected


# --- why a generation has no log ------------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "reason"),
    [
        (None, "no record of its host was found"),
        (gen(1, beat_age=None), "its host was destroyed before its agent reported"),
        (gen(1, replaced_for="dead"), "its host stopped answering before the first upload"),
        (gen(1, host_blamed=True), "its host stopped answering before the first upload"),
        (gen(1, replaced_for="crashed"), "its host was destroyed before the first upload"),
    ],
)
def test_a_missing_log_is_named_with_why(generation: Generation | None, reason: str) -> None:
    assert missing_log_reason(generation) == reason
