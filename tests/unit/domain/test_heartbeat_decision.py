"""The heartbeat's one decision (`functions/domain/heartbeat_decision.py`), case by case: what an
authenticated heartbeat writes, what it appends to the timeline, and what its agent is told."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from functions.domain.heartbeat_contract import (
    CheckpointRef,
    GpuProbe,
    HeartbeatReply,
    HeartbeatRequest,
    OutputsRef,
    RestoreReport,
    SkippedCheckpoint,
)
from functions.domain.heartbeat_decision import (
    CheckpointsWrite,
    HeartbeatDecision,
    HeartbeatFacts,
    HeartbeatMeasures,
    decide_heartbeat,
    previous_generation_needed,
)
from functions.domain.job import Generation, Heartbeat, Job, JobState, new_job
from functions.domain.jobspec import parse_job
from tests.integration.api.helpers import SPEC, credentials, heartbeat_body

NOW = 1_800_000_000.0
JOB_ID = "tiny-cpu-0000abcd"
MAX_AGE_S = 180
# The example's budget ($1) at the generation's $0.50/h: a renewed lease runs two hours.
RENEWED = NOW + 7200
OLD_LEASE = NOW + 60
G1_MANIFEST = "jobs/tiny-cpu-0000abcd/g1/checkpoints/000000000100/manifest.json"
G1_OUTPUTS = "jobs/tiny-cpu-0000abcd/g1/outputs/manifest.json"
SHA = "ab" * 32
SILENT = "supervisor silent: lease not renewed"


def make_job(**fields: Any) -> Job:
    spec = SPEC | {"secrets": fields.pop("secrets", [])}
    job, _ = new_job(parse_job(spec), job_id=JOB_ID, now=NOW - 600, submitted_by="me")
    return job.model_copy(update={"state": JobState.RUNNING, "current_generation": 1, **fields})


def make_gen(n: int = 1, **fields: Any) -> Generation:
    """The job's current generation, supervised a minute ago, with an old lease."""
    values: dict[str, Any] = {
        "job_id": JOB_ID, "generation": n, "token_hash": "h", "usd_per_hour": 0.5,
        "supervised_at": NOW - 60, "lease_expires_at": OLD_LEASE,
    }  # fmt: skip
    return Generation(**(values | fields))


def make_request(generation: int = 1, **fields: Any) -> HeartbeatRequest:
    body = heartbeat_body(
        JOB_ID, generation, **({"agent_time": NOW, "last_checkpoint": None} | fields)
    )
    return HeartbeatRequest.model_validate(body)


def beat(step: int | None = 3, **fields: Any) -> Heartbeat:
    """A heartbeat stored on a generation before this one arrived."""
    return Heartbeat(at=NOW - 15, agent_time=NOW - 15, phase="training", step=step,
                     gpu=GpuProbe(available=True), **fields)  # fmt: skip


def decide(
    job: Job | None = None,
    generation: Generation | None = None,
    request: HeartbeatRequest | None = None,
    previous: Generation | None = None,
) -> HeartbeatDecision:
    facts = HeartbeatFacts(
        job=job or make_job(),
        generation=generation or make_gen(),
        request=request or make_request(),
        previous=previous,
    )
    return decide_heartbeat(facts, now=NOW, supervised_max_age_s=MAX_AGE_S)


# --- what the agent is told, and whether anything is written ---------------------------------


@dataclass(frozen=True)
class Told:
    command: str
    lease_expires_at: float
    lease_renewed: bool
    reason: str | None
    written: bool
    secret_names: tuple[str, ...] | None = None


CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], Told]] = [
    (
        "supervised a minute ago: lease renewed to what the budget allows",
        {}, {}, {},
        Told("continue", RENEWED, True, None, written=True),
    ),
    (
        "supervised exactly the max age ago: still renewed",
        {}, {"supervised_at": NOW - 180}, {},
        Told("continue", RENEWED, True, None, written=True),
    ),
    (
        "supervised past the max age: the old lease is kept",
        {}, {"supervised_at": NOW - 181}, {},
        Told("continue", OLD_LEASE, False, SILENT, written=True),
    ),
    (
        "never supervised: the old lease is kept",
        {}, {"supervised_at": None}, {},
        Told("continue", OLD_LEASE, False, SILENT, written=True),
    ),
    (
        "budget spent as the last supervision measured it: a lease that ends now",
        {}, {"job_spent_usd": 1.0}, {},
        Told("continue", NOW, True, None, written=True),
    ),
    (
        "a replaced generation: superseded, lease 0, nothing written",
        {"current_generation": 2}, {"is_current": False}, {"wants_secrets": True},
        Told("superseded", 0.0, False, "generation 1 was replaced (current: 2)", written=False),
    ),
    (
        "a generation no longer flagged current: superseded",
        {}, {"is_current": False}, {},
        Told("superseded", 0.0, False, "generation 1 was replaced (current: 1)", written=False),
    ),
    (
        "a cancelled job: stop, and no secrets even when asked",
        {"state": JobState.STOPPING, "stop_reason": "cancelled", "secrets": ["HF_TOKEN"]},
        {}, {"wants_secrets": True},
        Told("stop", RENEWED, True, "job is stopping (cancelled)", written=True),
    ),
    (
        "an ended job without a stop reason: stop",
        {"state": JobState.FAILED}, {"supervised_at": None}, {},
        Told("stop", OLD_LEASE, False, "job is failed", written=True),
    ),
    (
        "asks for the secrets: the reply carries the spec's names",
        {"secrets": ["HF_TOKEN", "WANDB_KEY"]}, {}, {"wants_secrets": True},
        Told("continue", RENEWED, True, None, written=True,
             secret_names=("HF_TOKEN", "WANDB_KEY")),
    ),
    (
        "asks for the secrets of a job that lists none: an empty set of them",
        {}, {}, {"wants_secrets": True},
        Told("continue", RENEWED, True, None, written=True, secret_names=()),
    ),
    (
        "the secrets go with continue even while the lease is not renewed",
        {"secrets": ["HF_TOKEN"]}, {"supervised_at": None}, {"wants_secrets": True},
        Told("continue", OLD_LEASE, False, SILENT, written=True, secret_names=("HF_TOKEN",)),
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("job_fields", "gen_fields", "request_fields", "told"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_what_the_agent_is_told(
    job_fields: dict[str, Any], gen_fields: dict[str, Any], request_fields: dict[str, Any],
    told: Told,
) -> None:  # fmt: skip
    decision = decide(
        make_job(**job_fields), make_gen(**gen_fields), make_request(**request_fields)
    )
    lease, reply = decision.answer.lease, decision.answer.reply
    assert (reply.command, reply.lease_expires_at, reply.reason) == (
        told.command,
        told.lease_expires_at,
        told.reason,
    )
    assert (lease.command, lease.lease_renewed) == (told.command, told.lease_renewed)
    assert reply.server_time == NOW
    assert reply.secrets is None  # the values are read only once the write has held
    assert (decision.write is not None) == told.written
    assert decision.secret_names == told.secret_names
    if decision.write is not None:
        assert decision.write.lease_expires_at == told.lease_expires_at


def test_a_superseded_generation_writes_records_and_measures_nothing() -> None:
    ref = CheckpointRef(step=100, generation=1, manifest_key=G1_MANIFEST, manifest_sha256=SHA)
    decision = decide(
        make_job(current_generation=2),
        make_gen(is_current=False),
        make_request(last_checkpoint=ref.model_dump(), misplaced_checkpoints=["sub/ckpt-1"]),
    )
    assert decision.write is None
    assert decision.checkpoints is None
    assert decision.events == ()
    assert decision.measures == HeartbeatMeasures()


def test_a_write_refused_for_a_replacement_answers_superseded() -> None:
    decision = decide(make_job(secrets=["HF_TOKEN"]), request=make_request(wants_secrets=True))
    refused = decision.answer_if_replaced
    assert refused.reply == HeartbeatReply(
        command="superseded",
        lease_expires_at=0.0,
        server_time=NOW,
        reason="generation was replaced",
    )
    assert not refused.lease.lease_renewed


# --- the storage credentials ----------------------------------------------------------------


CREDENTIAL_CASES = [
    ("the agent holds none: the generation's go back", None, NOW + 5 * 3600, True),
    ("the agent holds older ones: the newer go back", NOW + 3600, NOW + 5 * 3600, True),
    ("the agent holds the same ones: none go back", NOW + 5 * 3600, NOW + 5 * 3600, False),
]


@pytest.mark.parametrize(
    ("held", "stored", "sent"),
    [case[1:] for case in CREDENTIAL_CASES],
    ids=[case[0] for case in CREDENTIAL_CASES],
)
def test_newer_credentials_go_back_with_a_renewed_lease(
    held: float | None, stored: float, sent: bool
) -> None:
    creds = credentials(stored)
    decision = decide(
        generation=make_gen(credentials=creds), request=make_request(credentials_expire_at=held)
    )
    assert decision.answer.reply.credentials == (creds if sent else None)


def test_no_credentials_go_back_without_a_renewed_lease() -> None:
    creds = credentials(NOW + 5 * 3600)
    decision = decide(generation=make_gen(credentials=creds, supervised_at=None))
    assert decision.answer.reply.credentials is None


def test_a_renewed_lease_ends_before_the_credentials_allow_a_final_upload() -> None:
    creds = credentials(NOW + 3600)  # expires before the budget's two hours
    decision = decide(generation=make_gen(credentials=creds))
    assert decision.answer.reply.lease_expires_at == NOW + 3600 - 300


# --- what is written on the generation ------------------------------------------------------


WRITE_CASES = [
    ("first training heartbeat: training starts at its step", {}, {"step": 120}, 120),
    ("first training heartbeat without a step: at the restored one's",
     {}, {"step": None, "restored_checkpoint": {"step": 80, "generation": 1,
                                                "manifest_key": "m.json"}}, 80),
    ("training already started on this host: nothing new", {"training_started_at": NOW - 99},
     {"step": 120}, None),
    ("not training yet: nothing", {}, {"phase": "starting", "step": None}, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("gen_fields", "request_fields", "start_step"),
    [case[1:] for case in WRITE_CASES],
    ids=[case[0] for case in WRITE_CASES],
)
def test_where_training_started_is_written_once(
    gen_fields: dict[str, Any], request_fields: dict[str, Any], start_step: int | None
) -> None:
    decision = decide(generation=make_gen(**gen_fields), request=make_request(**request_fields))
    assert decision.write is not None
    assert decision.write.training_start_step == start_step


@pytest.mark.parametrize(("utilization_pct", "busy"), [(97.0, True), (5.0, False), (None, False)])
def test_a_busy_gpu_is_written(utilization_pct: float | None, busy: bool) -> None:
    gpu = {"available": True, "responsive": True, "utilization_pct": utilization_pct}
    decision = decide(request=make_request(gpu=gpu))
    assert decision.write is not None
    assert decision.write.gpu_busy is busy


def test_the_heartbeat_record_keeps_only_outputs_at_their_place() -> None:
    mine = OutputsRef(generation=1, manifest_key=G1_OUTPUTS, manifest_sha256=SHA, files=2, bytes=9)
    elsewhere = mine.model_copy(update={"manifest_key": "jobs/other/g1/outputs/manifest.json"})
    kept = decide(request=make_request(step=7, outputs=mine.model_dump()))
    dropped = decide(request=make_request(step=7, outputs=elsewhere.model_dump()))
    assert kept.write is not None and dropped.write is not None
    assert kept.write.heartbeat.outputs == mine
    assert dropped.write.heartbeat.outputs is None
    assert (kept.write.heartbeat.at, kept.write.heartbeat.step) == (NOW, 7)


# --- the checkpoint record ------------------------------------------------------------------


OWN = CheckpointRef(step=100, generation=1, manifest_key=G1_MANIFEST, manifest_sha256=SHA)
OLDER = CheckpointRef(
    step=40,
    generation=1,
    manifest_key="jobs/tiny-cpu-0000abcd/g1/checkpoints/000000000040/manifest.json",
    manifest_sha256=SHA,
)
CHECKPOINT_CASES = [
    ("its own checkpoint, where the layout puts it: recorded first",
     [OLDER], OWN, CheckpointsWrite(checkpoints=[OWN, OLDER], previous_version=4)),
    ("without the manifest's sha256: not recorded",
     [], OWN.model_copy(update={"manifest_sha256": None}), None),
    ("anywhere else: not recorded",
     [], OWN.model_copy(update={"manifest_key": "jobs/tiny-cpu-0000abcd/elsewhere.json"}), None),
    ("already recorded: not again", [OWN], OWN, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("recorded", "named", "expected"),
    [case[1:] for case in CHECKPOINT_CASES],
    ids=[case[0] for case in CHECKPOINT_CASES],
)
def test_the_checkpoint_record(
    recorded: list[CheckpointRef], named: CheckpointRef, expected: CheckpointsWrite | None
) -> None:
    job = make_job(recorded_checkpoints=recorded, recorded_checkpoints_version=4)
    decision = decide(job, request=make_request(last_checkpoint=named.model_dump()))
    assert decision.checkpoints == expected


# --- the timeline ---------------------------------------------------------------------------


SKIPPED = RestoreReport(
    outcome="fresh",
    candidates=1,
    skipped=[SkippedCheckpoint(manifest_key=G1_MANIFEST, reason="malformed manifest")],
)


def test_a_restore_that_skipped_a_candidate_goes_on_the_timeline_once() -> None:
    request = make_request(restore=SKIPPED.model_dump())
    first = decide(request=request)
    again = decide(generation=make_gen(heartbeat=beat(restore=SKIPPED)), request=request)
    assert [(e.kind, e.message) for e in first.events] == [
        (
            "restore_skipped",
            "g1 none of 1 recorded checkpoint(s) usable: starting from scratch; skipped "
            f"{G1_MANIFEST}: malformed manifest",
        )
    ]
    assert again.events == ()


def test_a_new_misplaced_checkpoint_goes_on_the_timeline() -> None:
    known = make_gen(heartbeat=beat(misplaced_checkpoints=["out/checkpoint-1"]))
    same = decide(
        generation=known, request=make_request(misplaced_checkpoints=["out/checkpoint-1"])
    )
    new = decide(
        generation=known,
        request=make_request(misplaced_checkpoints=["out/checkpoint-1", "out/checkpoint-2"]),
    )
    assert same.events == ()
    assert [(e.kind, e.data["paths"]) for e in new.events] == [
        ("checkpoints_misplaced", ["out/checkpoint-1", "out/checkpoint-2"])
    ]


def test_a_new_unmarked_checkpoint_goes_on_the_timeline_with_the_fix() -> None:
    known = make_gen(heartbeat=beat(unmarked_checkpoints=["checkpoint-8"]))
    same = decide(generation=known, request=make_request(unmarked_checkpoints=["checkpoint-8"]))
    new = decide(
        generation=known,
        request=make_request(unmarked_checkpoints=["checkpoint-16", "checkpoint-8"]),
    )
    assert same.events == ()
    [event] = new.events
    assert (event.kind, event.data["names"]) == (
        "checkpoints_unmarked",
        ["checkpoint-16", "checkpoint-8"],
    )
    job = make_job()
    assert f"no marker file {job.spec.checkpoint.marker!r}" in event.message
    assert f"under {job.spec.checkpoint.dir} once saved" in event.message


def resumed(first_step_at: float | None) -> dict[str, Any]:
    return {"step": 80, "started_at": NOW - 30, "first_step_at": first_step_at}


def test_the_first_step_after_a_replace_goes_on_the_timeline_with_the_work_lost() -> None:
    job = make_job(current_generation=2, incident_at=NOW - 100, incident_generation=1)
    previous = make_gen(1, is_current=False, heartbeat=beat(step=97))
    decision = decide(
        job,
        make_gen(2),
        make_request(2, resumed=resumed(NOW - 10)),
        previous=previous,
    )
    assert [(e.kind, e.message, e.data) for e in decision.events] == [
        (
            "resumed",
            "generation 2 resumed at step 80; first step 20.0 s after the training process "
            "started, 90.0 s after the replace began; ≥ 17 steps lost (generation 1 last "
            "reported step 97)",
            {
                "resumed_step": 80,
                "first_step_after_start_s": 20.0,
                "lost_steps": 17,
                "lost_steps_lower_bound": True,
                "recovery_s": 90.0,
            },
        )
    ]
    assert decision.measures.recovery_to_training_s == 90.0
    assert decision.write is not None and decision.write.resumed is not None
    assert decision.write.resumed.first_step_at == NOW - 10


def test_a_first_generation_resumes_with_no_work_lost() -> None:
    decision = decide(request=make_request(resumed=resumed(NOW - 10)))
    assert [(e.kind, e.data) for e in decision.events] == [
        ("resumed", {"resumed_step": 80, "first_step_after_start_s": 20.0})
    ]
    assert decision.measures.recovery_to_training_s is None


def test_the_first_step_goes_on_the_timeline_once() -> None:
    stored = make_gen(first_step_at=NOW - 40)
    assert decide(generation=stored, request=make_request(resumed=resumed(NOW - 10))).events == ()


NEEDED_CASES = [
    ("a replacement's first step after its restore", 2, {}, resumed(NOW - 10), True),
    ("a first generation: there is none before it", 1, {}, resumed(NOW - 10), False),
    ("no step since the restore yet", 2, {}, resumed(None), False),
    ("the first step already stored", 2, {"first_step_at": NOW - 40}, resumed(NOW - 10), False),
    ("a superseded generation", 2, {"is_current": False}, resumed(NOW - 10), False),
    ("no resumption reported", 2, {}, None, False),
]


@pytest.mark.parametrize(
    ("n", "gen_fields", "report", "needed"),
    [case[1:] for case in NEEDED_CASES],
    ids=[case[0] for case in NEEDED_CASES],
)
def test_when_the_previous_generation_is_read(
    n: int, gen_fields: dict[str, Any], report: dict[str, Any] | None, needed: bool
) -> None:
    job = make_job(current_generation=n)
    request = make_request(n, resumed=report)
    assert previous_generation_needed(job, make_gen(n, **gen_fields), request, NOW) is needed


def test_a_new_checkpoints_upload_lag_is_measured_at_the_hosts_pace() -> None:
    """Training began 100 s ago at step 0 and is at step 120 now: 100 s for 120 steps; the
    checkpoint at step 100 lags 20 steps, 16.7 s of training."""
    generation = make_gen(training_started_at=NOW - 100, training_start_step=0)
    ref = CheckpointRef(step=100, generation=1, manifest_key=G1_MANIFEST, manifest_sha256=SHA)
    decision = decide(
        generation=generation, request=make_request(step=120, last_checkpoint=ref.model_dump())
    )
    assert decision.measures.checkpoint_upload_lag_s == pytest.approx(16.667, abs=0.001)
