"""The recording rule (functions/domain/checkpoint_record.py): which heartbeat adds which
checkpoint to the job's record, how the record is bounded and ordered, what a new generation
is given, and the timeline event of a restore that skipped candidates."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.checkpoint_record import (
    MAX_RECORDED_CHECKPOINTS,
    checkpoint_to_record,
    restore_candidates,
    restore_event,
    with_recorded,
)
from functions.domain.heartbeat_contract import CheckpointRef, HeartbeatRequest
from functions.domain.job import Generation, Job, JobState, new_job
from functions.domain.jobspec import parse_job
from functions.domain.storage_layout import manifest_key
from tests.integration.api.helpers import SPEC, heartbeat_body

JOB = "tiny-cpu-0000abcd"


def ref(step: int, generation: int = 1, **over: Any) -> CheckpointRef:
    found: dict[str, Any] = {
        "step": step,
        "generation": generation,
        "manifest_key": manifest_key(JOB, step, generation),
        "manifest_sha256": f"{step:064x}",
    }
    return CheckpointRef.model_validate({**found, **over})


def job(current: int = 1, recorded: list[CheckpointRef] | None = None) -> Job:
    found, _ = new_job(parse_job(SPEC), job_id=JOB, now=1.0, submitted_by="me")
    return found.model_copy(
        update={
            "state": JobState.RUNNING,
            "current_generation": current,
            "recorded_checkpoints": recorded or [],
        }
    )


def gen(number: int = 1, *, is_current: bool = True) -> Generation:
    return Generation(job_id=JOB, generation=number, token_hash="h", is_current=is_current)


def request(
    generation: int = 1, last: CheckpointRef | None = None, **over: Any
) -> HeartbeatRequest:
    body = heartbeat_body(JOB, generation=generation, **over)
    body["last_checkpoint"] = last.model_dump(mode="json") if last else None
    return HeartbeatRequest.model_validate(body)


# --- which heartbeat records what -----------------------------------------------------------


def test_the_current_generation_records_its_own_checkpoint() -> None:
    assert checkpoint_to_record(job(), gen(), request(last=ref(100))) == ref(100)


@pytest.mark.parametrize(
    ("the_job", "the_gen", "the_request"),
    [
        pytest.param(job(), gen(is_current=False), request(last=ref(100)), id="superseded"),
        pytest.param(job(current=2), gen(), request(last=ref(100)), id="job moved on"),
        pytest.param(job(), gen(), request(), id="no checkpoint"),
        pytest.param(job(), gen(), request(last=ref(100, manifest_sha256=None)), id="no sha"),
        pytest.param(
            job(current=2), gen(2), request(2, last=ref(100, 1)), id="an older generation's"
        ),
        pytest.param(
            job(), gen(), request(last=ref(100, manifest_key="jobs/x/m.json")), id="off layout"
        ),
        pytest.param(
            job(),
            gen(),
            request(last=ref(100, manifest_key=manifest_key(JOB, 200, 1))),
            id="another step's key",
        ),
        pytest.param(job(recorded=[ref(100)]), gen(), request(last=ref(100)), id="already"),
    ],
)
def test_anything_else_records_nothing(
    the_job: Job, the_gen: Generation, the_request: HeartbeatRequest
) -> None:
    assert checkpoint_to_record(the_job, the_gen, the_request) is None


# --- the record -----------------------------------------------------------------------------


def test_the_newest_goes_first_and_a_key_is_kept_once() -> None:
    record = with_recorded([ref(200), ref(100)], ref(300), keep_per_generation=3)
    assert [r.step for r in record] == [300, 200, 100]
    again = with_recorded(record, ref(200), keep_per_generation=3)
    assert [r.step for r in again] == [200, 300, 100]


def test_a_later_generation_goes_first_whatever_its_step() -> None:
    """g2 restored g1's 400 (500 was bad) and went on from there: its 450 is the latest."""
    record = with_recorded([ref(500, 1), ref(400, 1)], ref(450, 2), keep_per_generation=3)
    assert [(r.step, r.generation) for r in record] == [(450, 2), (500, 1), (400, 1)]


@pytest.mark.parametrize(("keep", "kept"), [(1, [400]), (2, [400, 300]), (3, [400, 300, 200])])
def test_at_most_keep_last_per_generation(keep: int, kept: list[int]) -> None:
    record: list[CheckpointRef] = []
    for step in (100, 200, 300, 400):
        record = with_recorded(record, ref(step), keep_per_generation=keep)
    assert [r.step for r in record] == kept


def test_older_generations_stay_under_the_per_generation_bound() -> None:
    record = [ref(300, 1), ref(200, 1)]
    for step in (400, 500, 600):
        record = with_recorded(record, ref(step, 2), keep_per_generation=2)
    assert [(r.step, r.generation) for r in record] == [(600, 2), (500, 2), (300, 1), (200, 1)]


def test_the_record_is_bounded_in_all() -> None:
    assert MAX_RECORDED_CHECKPOINTS == 8
    record: list[CheckpointRef] = []
    for generation in range(1, 6):
        for step in (1, 2):
            record = with_recorded(
                record, ref(generation * 10 + step, generation), keep_per_generation=3
            )
    assert len(record) == 8
    assert (record[0].step, record[-1].step) == (52, 21)


def test_a_new_generation_is_given_the_record_less_its_own_and_newer() -> None:
    record = [ref(600, 3), ref(500, 2), ref(300, 1)]
    found = restore_candidates(job(recorded=record), generation=3)
    assert [(r.step, r.generation) for r in found] == [(500, 2), (300, 1)]
    assert restore_candidates(job(), generation=2) == []


# --- the timeline event ---------------------------------------------------------------------

SKIP = {"manifest_key": manifest_key(JOB, 200, 1), "reason": "malformed manifest"}


@pytest.mark.parametrize(
    ("restore", "restored", "expected"),
    [
        ({"outcome": "restored", "candidates": 1, "skipped": []}, ref(100), None),
        ({"outcome": "fresh", "candidates": 0, "skipped": []}, None, None),
        (
            {"outcome": "restored", "candidates": 2, "skipped": [SKIP]},
            ref(100),
            ("restore_skipped", "g2 restored step 100 (written by g1); skipped "),
        ),
        (
            {"outcome": "fresh", "candidates": 1, "skipped": [SKIP]},
            None,
            ("restore_skipped", "g2 none of 1 recorded checkpoint(s) usable"),
        ),
        (
            {"outcome": "unreadable", "candidates": 1, "skipped": [SKIP]},
            None,
            ("restore_skipped", "g2 storage could not be read"),
        ),
    ],
)
def test_the_timeline_hears_of_skips_and_fresh_starts_only(
    restore: dict[str, Any], restored: CheckpointRef | None, expected: tuple[str, str] | None
) -> None:
    body = request(2, restore=restore)
    if restored is not None:
        body = body.model_copy(update={"restored_checkpoint": restored})
    event = restore_event(body, now=5.0)
    if expected is None:
        assert event is None
        return
    assert event is not None and event.kind == expected[0] and event.at == 5.0
    assert event.message.startswith(expected[1])
    assert event.data["skipped"] == [SKIP]
    if restore["skipped"]:
        assert "malformed manifest" in event.message
