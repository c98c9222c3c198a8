"""The heartbeat API records the good checkpoints (docs/architecture.md#recorded-checkpoints): from
the current generation only, each of its own checkpoints with the manifest's sha256, newest first
and bounded; a superseded generation's heartbeat records nothing; a restore that skipped a candidate
goes on the timeline."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.agent_token import hash_token
from functions.domain.checkpoint_record import MAX_RECORDED_CHECKPOINTS
from functions.domain.heartbeat_contract import CheckpointRef
from functions.domain.job import Generation, JobState, TimelineEvent
from functions.domain.storage_layout import manifest_key
from tests.integration.api.helpers import TOKEN, auth, heartbeat_body, replace, running_job

URL = "/agent/heartbeat"

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def ref(job_id: str, step: int, generation: int = 1, **over: Any) -> dict[str, Any]:
    found = {
        "step": step,
        "generation": generation,
        "manifest_key": manifest_key(job_id, step, generation),
        "manifest_sha256": f"{step:064x}",
    }
    return {**found, **over}


def beat(api: Any, job_id: str, token: str = TOKEN, **body: Any) -> Any:
    reply = api.heartbeat("POST", URL, body=heartbeat_body(job_id, **body), headers=auth(token))
    assert reply.status == 200, reply.body
    return reply


def recorded(api: Any, job_id: str) -> list[tuple[int, int]]:
    job = api.store.get_job(job_id)
    return [(c.step, c.generation) for c in job.recorded_checkpoints]


def test_the_current_generation_records_each_checkpoint_newest_first(api) -> None:
    job_id = running_job(api)
    for step in (100, 200, 200, 300):  # the same one twice is recorded once
        beat(api, job_id, last_checkpoint=ref(job_id, step))
    assert recorded(api, job_id) == [(300, 1), (200, 1), (100, 1)]
    job = api.store.get_job(job_id)
    assert job.recorded_checkpoints[0] == CheckpointRef.model_validate(ref(job_id, 300))
    assert job.recorded_checkpoints_version == 3
    view = api.jobs("GET", f"/jobs/{job_id}").body
    assert [c["step"] for c in view["recorded_checkpoints"]] == [300, 200, 100]


def test_the_record_is_bounded_per_generation_and_in_all(api) -> None:
    job_id = running_job(api, checkpoint={"dir": "/ckpt", "keep_last": 2})
    for step in (100, 200, 300):
        beat(api, job_id, last_checkpoint=ref(job_id, step))
    assert recorded(api, job_id) == [(300, 1), (200, 1)]  # g1's retention deletes its 100

    many = running_job(api, checkpoint={"dir": "/ckpt", "keep_last": 50})
    for step in range(1, MAX_RECORDED_CHECKPOINTS + 3):
        beat(api, many, last_checkpoint=ref(many, step))
    found = recorded(api, many)
    assert len(found) == MAX_RECORDED_CHECKPOINTS
    assert found[0] == (MAX_RECORDED_CHECKPOINTS + 2, 1)


@pytest.mark.parametrize(
    "checkpoint",
    [
        pytest.param(lambda j: ref(j, 100, manifest_sha256=None), id="no sha256"),
        pytest.param(lambda j: ref(j, 100, manifest_key="m.json"), id="outside the layout"),
        pytest.param(
            lambda j: ref(j, 100, manifest_key=manifest_key(j, 100, 2)), id="another generation's"
        ),
        pytest.param(
            lambda j: ref(j, 100, manifest_key=manifest_key(j, 200, 1)), id="another step's"
        ),
        pytest.param(lambda j: ref("other-job-00000000", 100), id="another job's"),
    ],
)
def test_a_checkpoint_that_is_not_plainly_the_generations_own_is_not_recorded(
    api, checkpoint
) -> None:
    job_id = running_job(api)
    assert beat(api, job_id, last_checkpoint=checkpoint(job_id)).body["command"] == "continue"
    assert recorded(api, job_id) == []


def test_a_restored_checkpoint_reported_again_is_not_recorded_as_the_new_generations(api) -> None:
    job_id = running_job(api, generation=2)
    # g2 restored g1's 100: it reports it as its last checkpoint until it uploads its own
    restored = ref(job_id, 100, generation=1)
    beat(api, job_id, generation=2, last_checkpoint=restored, restored_checkpoint=restored)
    assert recorded(api, job_id) == []
    beat(api, job_id, generation=2, last_checkpoint=ref(job_id, 150, generation=2))
    assert recorded(api, job_id) == [(150, 2)]


def test_a_superseded_generations_heartbeat_records_nothing(api) -> None:
    """The race the demo saw: g1 finishes a manifest after it was replaced and reports it in
    its next heartbeat. It is told `superseded`, and nothing it names is recorded."""
    job_id = running_job(api)
    beat(api, job_id, last_checkpoint=ref(job_id, 100))
    replace(api, job_id, 1)
    late = beat(api, job_id, last_checkpoint=ref(job_id, 200))
    assert late.body["command"] == "superseded"
    assert recorded(api, job_id) == [(100, 1)]
    assert api.store.record_generation(
        Generation(job_id=job_id, generation=2, token_hash=hash_token("g2"), usd_per_hour=1),
        expected=[JobState.REPLACING],
        now=api.clock.now,
        event=TimelineEvent(job_id=job_id, at=api.clock.now, kind="rented", message="g2"),
    )
    again = beat(api, job_id, last_checkpoint=ref(job_id, 300))
    assert again.body["command"] == "superseded"
    assert recorded(api, job_id) == [(100, 1)]
    assert api.store.get_job(job_id).recorded_checkpoints_version == 1


def test_a_generation_superseded_after_its_heartbeat_was_read_records_nothing(
    api, monkeypatch
) -> None:
    job_id = running_job(api)
    store = api.store
    real_store = store.store_heartbeat

    def store_then_replace(*args: Any, **kwargs: Any) -> bool:
        stored = real_store(*args, **kwargs)
        replace(api, job_id, 1)  # between the heartbeat's write and the record's
        return bool(stored)

    from functions.api import heartbeat

    monkeypatch.setattr(heartbeat.dependencies().store, "store_heartbeat", store_then_replace)
    beat(api, job_id, last_checkpoint=ref(job_id, 100))
    assert recorded(api, job_id) == []


def test_a_restore_that_skipped_candidates_goes_on_the_timeline_once(api) -> None:
    job_id = running_job(api, generation=2)
    good = ref(job_id, 100)
    report = {
        "outcome": "restored",
        "candidates": 2,
        "skipped": [{"manifest_key": manifest_key(job_id, 200, 1), "reason": "malformed manifest"}],
    }
    for _ in range(2):
        beat(api, job_id, generation=2, restored_checkpoint=good, restore=report)
    events = [e for e in api.store.get_job_view(job_id).events if e.kind.startswith("restore")]
    assert len(events) == 1
    (event,) = events
    assert event.kind == "restore_skipped"
    assert "g2 restored step 100 (written by g1)" in event.message
    assert "malformed manifest" in event.message
    stored = api.store.get_generation(job_id, 2).heartbeat
    assert stored.restore is not None and stored.restore.skipped[0].reason == "malformed manifest"


def test_a_fresh_start_after_unusable_candidates_goes_on_the_timeline(api) -> None:
    job_id = running_job(api, generation=2)
    report = {
        "outcome": "fresh",
        "candidates": 1,
        "skipped": [{"manifest_key": manifest_key(job_id, 200, 1), "reason": "no manifest"}],
    }
    beat(api, job_id, generation=2, restore=report)
    (event,) = [e for e in api.store.get_job_view(job_id).events if e.kind.startswith("restore")]
    assert "none of 1 recorded checkpoint(s) usable: starting from scratch" in event.message


def test_a_plain_restore_adds_no_event(api) -> None:
    job_id = running_job(api, generation=2)
    report = {"outcome": "restored", "candidates": 1, "skipped": []}
    beat(api, job_id, generation=2, restored_checkpoint=ref(job_id, 100), restore=report)
    assert not [e for e in api.store.get_job_view(job_id).events if e.kind.startswith("restore")]


@pytest.mark.parametrize(
    "restore",
    [
        {"outcome": "restored", "candidates": 17, "skipped": []},
        {"outcome": "maybe", "candidates": 1, "skipped": []},
        {"outcome": "fresh", "candidates": 1, "skipped": [{"manifest_key": "k", "reason": ""}]},
        {
            "outcome": "fresh",
            "candidates": 1,
            "skipped": [{"manifest_key": "k", "reason": "x" * 301}],
        },
        {
            "outcome": "fresh",
            "candidates": 16,
            "skipped": [{"manifest_key": "k", "reason": "r"}] * 17,
        },
    ],
)
def test_an_unbounded_restore_report_is_refused(api, restore) -> None:
    job_id = running_job(api)
    reply = api.heartbeat(
        "POST", URL, body=heartbeat_body(job_id, restore=restore), headers=auth(TOKEN)
    )
    assert reply.status == 400


def test_misplaced_checkpoints_go_on_the_timeline_once_per_new_path(api) -> None:
    job_id = running_job(api)
    for paths in (["out/checkpoint-5"], ["out/checkpoint-5"], ["out/checkpoint-10"], []):
        beat(api, job_id, misplaced_checkpoints=paths)
    events = [e for e in api.store.get_job_view(job_id).events if e.kind == "checkpoints_misplaced"]
    # The test's clock stands still: events of one instant come back in any order.
    assert len(events) == 2
    by_path = {e.data["paths"][0]: e for e in events}
    assert sorted(by_path) == ["out/checkpoint-10", "out/checkpoint-5"]
    assert by_path["out/checkpoint-5"].message == (
        "g1 checkpoints below the checkpoint dir are never uploaded: out/checkpoint-5; "
        "save each directly in /workspace/checkpoints (Hugging Face: output_dir; accelerate: "
        "save_state into a step_<step> folder there; Lightning: ModelCheckpoint(dirpath); "
        "torch.save: step_<step>.pt there) and mark it with the marker file '.tether-complete' "
        "in its folder, or next to a single-file checkpoint as <file>.tether-complete (the "
        "hooks mark Trainer's, accelerate's and Lightning's saves; otherwise "
        "tether_hooks.checkpoint_saved(path); agent/README.md)"
    )
    assert api.store.get_generation(job_id, 1).heartbeat.misplaced_checkpoints == []


@pytest.mark.parametrize(
    ("paths", "problem"),
    [
        ([f"out/checkpoint-{n}" for n in range(5)], "must have at most 4 item(s)"),
        (["o" * 301], "at most 300 characters"),
        ([""], "must not be empty"),
    ],
)
def test_misplaced_checkpoints_past_their_bounds_are_refused_and_nothing_stored(
    api, paths: list[str], problem: str
) -> None:
    job_id = running_job(api)
    body = heartbeat_body(job_id, misplaced_checkpoints=paths)
    reply = api.heartbeat("POST", URL, body=body, headers=auth(TOKEN))
    assert reply.status == 400, reply.body
    (detail,) = reply.body["details"]
    assert detail["path"].startswith("misplaced_checkpoints") and problem in detail["reason"]
    assert api.store.get_generation(job_id, 1).heartbeat is None
    assert not [e for e in api.store.get_job_view(job_id).events if "misplaced" in e.kind]
