"""The dashboard's measures (functions/domain/measures.py) and the job transition event shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.domain.heartbeat_contract import CheckpointRef, GpuProbe, HeartbeatRequest
from functions.domain.job import Generation, Heartbeat, Job, JobState
from functions.domain.job_events import submission_event, transition_event
from functions.domain.jobspec import load_job_file
from functions.domain.measures import (
    TrainingPace,
    budget_used_max_fraction,
    checkpoint_upload_lag_s,
    heartbeat_age_max_s,
    recovery_to_training_s,
    tether_instances,
    training_start_step,
    work_lost,
)
from functions.domain.reconcile import InstanceFacts, JobSnapshot
from functions.domain.recovery import Resumed
from tests.paths import ROOT

NOW = 1_800_000_000.0
SPEC = load_job_file(ROOT / "examples" / "tiny-cpu" / "job.yaml")
GPU = GpuProbe(available=True, utilization_pct=90.0)


def job(**fields: Any) -> Job:
    values: dict[str, Any] = {
        "job_id": "tiny-0000000a",
        "name": "tiny",
        "state": JobState.RUNNING,
        "spec": SPEC,
        "created_at": NOW - 7200,
        "updated_at": NOW - 7200,
        "budget_usd": 10.0,
        "current_generation": 1,
    }
    values.update(fields)
    return Job(**values)


def ref(step: int, generation: int = 1) -> CheckpointRef:
    return CheckpointRef(step=step, generation=generation, manifest_key=f"m-{step}.json")


def generation(number: int = 1, **fields: Any) -> Generation:
    return Generation(job_id="tiny-0000000a", generation=number, token_hash="0" * 64, **fields)


def beat(at: float, step: int | None, last: CheckpointRef | None = None, **kw: Any) -> Heartbeat:
    return Heartbeat(
        at=at, agent_time=at, phase="training", step=step, gpu=GPU, last_checkpoint=last, **kw
    )


def request(generation_number: int = 1, **fields: Any) -> HeartbeatRequest:
    values: dict[str, Any] = {
        "job_id": "tiny-0000000a",
        "generation": generation_number,
        "phase": "training",
        "gpu": GPU,
        "agent_time": NOW,
    }
    values.update(fields)
    return HeartbeatRequest(**values)


# --- once a run -----------------------------------------------------------------------------


def test_budget_fraction_is_the_highest_among_jobs_and_none_without_jobs() -> None:
    assert budget_used_max_fraction([(1.0, 10.0), (4.5, 5.0), (0.0, 2.0)]) == pytest.approx(0.9)
    assert budget_used_max_fraction([]) is None


def test_only_tether_labelled_instances_count() -> None:
    instances = [
        InstanceFacts(id=1, label="tether:tiny-0000000a:g1", actual_status="running"),
        InstanceFacts(id=2, label="tether:tiny-0000000b:g3", actual_status="stopped"),
        InstanceFacts(id=3, label="my own notebook"),
        InstanceFacts(id=4, label=None),
    ]
    assert tether_instances(instances) == 2


def test_heartbeat_age_is_the_oldest_among_running_jobs_only() -> None:
    running = JobSnapshot(job=job(), generations=(generation(heartbeat=beat(NOW - 40, 5)),))
    fresher = JobSnapshot(
        job=job(job_id="tiny-0000000b"),
        generations=(generation(heartbeat=beat(NOW - 5, 5)),),
    )
    stopping = JobSnapshot(
        job=job(job_id="tiny-0000000c", state=JobState.STOPPING),
        generations=(generation(heartbeat=beat(NOW - 900, 5)),),
    )
    starting = JobSnapshot(job=job(job_id="tiny-0000000d"), generations=(generation(),))
    assert heartbeat_age_max_s([running, fresher, stopping, starting], NOW) == pytest.approx(40)
    assert heartbeat_age_max_s([starting], NOW) is None


# --- pace -----------------------------------------------------------------------------------


def test_pace_turns_steps_into_training_seconds_never_more_than_trained() -> None:
    pace = TrainingPace(started_at=NOW - 100, start_step=400)  # 200 steps in 100 s
    assert pace.seconds_for(50, step=600, at=NOW) == pytest.approx(25)
    assert pace.seconds_for(0, step=600, at=NOW) == 0
    assert pace.seconds_for(900, step=600, at=NOW) == pytest.approx(100)
    assert pace.seconds_for(10, step=400, at=NOW) is None  # no step made yet: no pace


def test_training_starts_at_the_reported_step_else_the_restored_one() -> None:
    assert training_start_step(request(step=7)) == 7
    assert training_start_step(request(restored_checkpoint=ref(400))) == 400
    assert training_start_step(request()) == 0


# --- heartbeat API --------------------------------------------------------------------------


def test_recovery_is_measured_to_the_first_step_after_the_restore() -> None:
    replaced = job(current_generation=2, incident_at=NOW - 210, incident_generation=1)
    second = generation(2)
    # the process started 60 s after the replace began, its first step came 90 s later
    stepped = Resumed(step=400, started_at=NOW - 150, first_step_at=NOW - 60)
    assert recovery_to_training_s(replaced, second, stepped) == 150
    # not yet: the process started but no step came; not a recovery: reported before, the
    # first generation, no incident, an incident of another generation
    started = Resumed(step=400, started_at=NOW - 150, first_step_at=None)
    assert recovery_to_training_s(replaced, second, started) is None
    assert recovery_to_training_s(replaced, second, None) is None
    reported = second.model_copy(update={"first_step_at": NOW - 60})
    assert recovery_to_training_s(replaced, reported, stepped) is None
    assert recovery_to_training_s(replaced, generation(1), stepped) is None
    assert recovery_to_training_s(job(current_generation=2), second, stepped) is None
    stale = replaced.model_copy(update={"incident_generation": 3})
    assert recovery_to_training_s(stale, second, stepped) is None


def test_checkpoint_lag_is_measured_once_per_new_upload_of_this_generation() -> None:
    # 100 steps in 50 s since training began at step 100: 2 steps/s.
    current = generation(
        training_started_at=NOW - 50,
        training_start_step=100,
        heartbeat=beat(NOW - 15, 180, ref(100)),
    )
    new_upload = request(step=200, last_checkpoint=ref(180))
    assert checkpoint_upload_lag_s(current, new_upload, NOW) == pytest.approx(10)
    # the same checkpoint again, a restored one, or no step: nothing to measure
    seen = current.model_copy(update={"heartbeat": beat(NOW - 15, 190, ref(180))})
    assert checkpoint_upload_lag_s(seen, new_upload, NOW) is None
    restored = request(2, step=200, last_checkpoint=ref(180, generation=1))
    assert checkpoint_upload_lag_s(current, restored, NOW) is None
    assert checkpoint_upload_lag_s(current, request(last_checkpoint=ref(180)), NOW) is None
    # the very first checkpoint of the generation counts (no earlier one to compare)
    first = current.model_copy(update={"heartbeat": beat(NOW - 15, 150)})
    assert checkpoint_upload_lag_s(first, new_upload, NOW) == pytest.approx(10)


# --- per incident ---------------------------------------------------------------------------


def test_work_lost_is_training_past_the_durable_checkpoint_at_the_last_heartbeat() -> None:
    # Restored 400, trained to 700 in 600 s (0.5 steps/s), last upload 600: 100 steps = 200 s.
    dying = generation(
        training_started_at=NOW - 900,
        training_start_step=400,
        heartbeat=beat(NOW - 300, 700, ref(600), restored_checkpoint=ref(400)),
    )
    lost = work_lost(dying)
    assert lost.steps == 100 and lost.seconds == pytest.approx(200)


def test_a_host_that_never_uploaded_loses_all_it_trained() -> None:
    dying = generation(
        training_started_at=NOW - 900, training_start_step=0, heartbeat=beat(NOW - 300, 300)
    )
    lost = work_lost(dying)
    assert lost.steps == 300 and lost.seconds == pytest.approx(600)


def test_a_host_that_never_trained_loses_no_work() -> None:
    assert work_lost(generation()).seconds == 0
    assert work_lost(generation(heartbeat=beat(NOW, None))).steps == 0


def test_work_lost_without_a_pace_reports_steps_only() -> None:
    # The first training heartbeat already said step 500 and nothing moved since.
    dying = generation(
        training_started_at=NOW - 60, training_start_step=500, heartbeat=beat(NOW, 500, ref(450))
    )
    lost = work_lost(dying)
    assert lost.steps == 50 and lost.seconds is None


# --- events ---------------------------------------------------------------------------------


def test_transition_event_has_the_documented_shape_and_filter_attributes() -> None:
    moved = job(state=JobState.REPLACING, previous_state=JobState.RUNNING, current_generation=1)
    event = transition_event(moved, reason="replacing generation 1: dead: gone", at=NOW)
    assert json.loads(event.message()) == {
        "type": "tether.job.transition",
        "job_id": "tiny-0000000a",
        "from": "RUNNING",
        "to": "REPLACING",
        "reason": "replacing generation 1: dead: gone",
        "at": NOW,
        "generation": 1,
    }
    assert event.attributes() == {
        "type": "tether.job.transition",
        "state": "REPLACING",
        "job_id": "tiny-0000000a",
    }


def test_a_submission_comes_from_nothing_and_long_reasons_are_cut() -> None:
    event = submission_event(job(state=JobState.PENDING, current_generation=0), reason="x" * 5000)
    body = json.loads(event.message())
    assert body["from"] is None and body["to"] == "PENDING" and body["at"] == NOW - 7200
    assert len(body["reason"]) == 1000
