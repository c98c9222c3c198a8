"""The job as the agent receives it over the heartbeat (`functions/domain/job_bootstrap.py`), and
the decision that hands it out: only to a current generation told to continue that asks, with
the storage keys scoped to that generation; never to a superseded or stopped one."""

from __future__ import annotations

import json
from typing import Any

from functions.domain.heartbeat_contract import (
    CheckpointRef,
    HeartbeatRequest,
    StorageCredentials,
    StorageKey,
)
from functions.domain.heartbeat_decision import HeartbeatFacts, decide_heartbeat
from functions.domain.job import Generation, Job, JobState, new_job
from functions.domain.job_bootstrap import job_bootstrap
from functions.domain.jobspec import parse_job
from functions.domain.onstart import VAST_ENV_VALUE_LIMIT, build_host_env, env_size
from tests.integration.api.helpers import SPEC, heartbeat_body

NOW = 1_800_000_000.0
JOB_ID = "tiny-cpu-0000abcd"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
R2_TOKEN = "and" + "A" * 697  # an R2 session token is base64("jwt/" + JWT): 550-700 characters
LONG_RUN = "python train.py " + " ".join(f"--flag-{i}=value-{i}" for i in range(200))


def r2_keys(generation: int = 2, job_id: str = JOB_ID) -> StorageCredentials:
    def key(prefix: str, key_id: str) -> StorageKey:
        return StorageKey(
            access_key_id=key_id, secret_access_key="s" * 64, session_token=R2_TOKEN,
            expires_at=NOW + 4 * 3600, prefix=prefix,
        )  # fmt: skip

    return StorageCredentials(
        endpoint="https://0123456789abcdef0123456789abcdef.r2.cloudflarestorage.com",
        bucket="tether-ckpt",
        read=key(f"jobs/{job_id}/", "9d0e1b3c8a4f4e2db2c1a0f9e8d7c6b5"),
        write=key(f"jobs/{job_id}/g{generation}/", "0a1b2c3d4e5f60718293a4b5c6d7e8f9"),
    )


def recorded(generation: int, *steps: int) -> list[CheckpointRef]:
    return [
        CheckpointRef(
            step=step,
            generation=generation,
            manifest_sha256=f"{step:064x}",
            manifest_key=f"jobs/{JOB_ID}/g{generation}/checkpoints/{step:012d}/manifest.json",
        )
        for step in steps
    ]


def long_job(**fields: Any) -> Job:
    spec = SPEC | {
        "run": LONG_RUN,
        "env": {f"JOB_VAR_{i}": "v" * 1000 for i in range(20)},
        "secrets": ["HF_TOKEN"],
        "code": {"git": "https://github.com/u/r.git", "commit": COMMIT},
        "outputs": {"dir": "/workspace/out"},
    }
    job, _ = new_job(parse_job(spec), job_id=JOB_ID, now=NOW - 600, submitted_by="me")
    return job.model_copy(update={"state": JobState.RUNNING, "current_generation": 2, **fields})


def generation(n: int = 2, **fields: Any) -> Generation:
    values: dict[str, Any] = {
        "job_id": JOB_ID, "generation": n, "token_hash": "h", "usd_per_hour": 0.5,
        "supervised_at": NOW - 60, "lease_expires_at": NOW + 60, "credentials": r2_keys(n),
    }  # fmt: skip
    return Generation(**(values | fields))


def test_the_bootstrap_carries_what_the_instance_env_cannot() -> None:
    job = long_job(recorded_checkpoints=recorded(1, 300, 200, 100) + recorded(2, 400))
    boot = job_bootstrap(job, generation())
    assert boot is not None
    assert boot.run == LONG_RUN and len(LONG_RUN) > 3000
    assert boot.storage == r2_keys(2)
    # What generation 2 may restore: the record less its own (which it cannot have written).
    assert [(r.generation, r.step) for r in boot.restore] == [(1, 300), (1, 200), (1, 100)]
    assert boot.env == {f"JOB_VAR_{i}": "v" * 1000 for i in range(20)}
    assert boot.secrets == ["HF_TOKEN"]
    assert (boot.code_git, boot.code_commit, boot.code_archive_sha256) == (
        "https://github.com/u/r.git",
        COMMIT,
        None,
    )
    assert (boot.checkpoint_dir, boot.marker, boot.keep_last) == (
        job.spec.checkpoint.dir,
        job.spec.checkpoint.marker,
        job.spec.checkpoint.keep_last,
    )
    assert boot.outputs_dir == "/workspace/out"


def test_the_instance_env_of_the_same_job_fits_vasts_limits() -> None:
    # Everything long goes in the bootstrap; what is left for Vast's env fits its limits (each
    # value at most 256 characters, 32 KB in all) and holds none of it.
    job = long_job(recorded_checkpoints=recorded(1, *range(2000, 0, -100)))
    assert len(job.recorded_checkpoints) == 20
    boot = job_bootstrap(job, generation())
    assert boot is not None and boot.restore and boot.storage.read.session_token == R2_TOKEN
    env = build_host_env(
        job.spec, job_id=JOB_ID, generation=2,
        api_url="https://abc123defg.execute-api.us-east-1.amazonaws.com", agent_token="t" * 43,
        lease_expires_at=NOW + 3600, vast_url="https://console.vast.ai", gpu_probe="nvml",
        probe_timeout_s=10, work_dir="/var/lib/tether", checkpoint_interval_s=1800,
    )  # fmt: skip
    assert max(len(v) for v in env.values()) <= VAST_ENV_VALUE_LIMIT
    assert env_size(env) <= 32 * 1024
    blob = json.dumps(env)
    assert R2_TOKEN not in blob and "s" * 64 not in blob and LONG_RUN[:100] not in blob
    assert "JOB_VAR_0" not in blob and "manifest" not in blob and COMMIT not in blob


def test_keys_not_scoped_to_this_generation_are_never_handed_out() -> None:
    job = long_job()
    assert job_bootstrap(job, generation(credentials=None)) is None
    assert job_bootstrap(job, generation(credentials=r2_keys(1))) is None  # another generation
    assert job_bootstrap(job, generation(credentials=r2_keys(2, "other-job"))) is None


def request(**fields: Any) -> HeartbeatRequest:
    body = heartbeat_body(JOB_ID, 2, **({"agent_time": NOW, "last_checkpoint": None} | fields))
    return HeartbeatRequest.model_validate(body)


def decide(job: Job, gen: Generation, req: HeartbeatRequest) -> Any:
    facts = HeartbeatFacts(job=job, generation=gen, request=req)
    return decide_heartbeat(facts, now=NOW, supervised_max_age_s=180)


def test_the_current_generation_gets_its_job_only_when_it_asks() -> None:
    job = long_job()
    asked = decide(job, generation(), request(wants_job=True))
    assert asked.answer.reply.job == job_bootstrap(job, generation())
    assert asked.answer_if_replaced.reply.job is None  # replaced before the write: nothing
    assert decide(job, generation(), request()).answer.reply.job is None


def test_a_superseded_or_stopped_generation_gets_no_job() -> None:
    superseded = decide(long_job(current_generation=3), generation(), request(wants_job=True))
    assert superseded.answer.reply.command == "superseded"
    assert superseded.answer.reply.job is None and superseded.write is None
    stopping = decide(long_job(state=JobState.STOPPING), generation(), request(wants_job=True))
    assert stopping.answer.reply.command == "stop"
    assert stopping.answer.reply.job is None
