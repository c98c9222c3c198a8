"""Jobs and generations for the supervision tests (reconcile, rent, spend)."""

from __future__ import annotations

from typing import Any

from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.job import Generation, Heartbeat, Job, JobState, new_job
from functions.domain.jobspec import parse_job

NOW = 1_800_000_000.0
SPEC: dict[str, Any] = {
    "name": "t",
    "image": "python:3.12",
    "run": "python train.py",
    "expected_hours": 1,
    "budget_usd": 10,
}


def job(state: JobState = JobState.RUNNING, generation: int = 1, **fields: Any) -> Job:
    base, _ = new_job(parse_job(SPEC), job_id="t-0123abcd", now=NOW - 600, submitted_by="me")
    return base.model_copy(update={"state": state, "current_generation": generation, **fields})


def gen(
    n: int = 1, *, instance_id: int = 100, beat_age: float | None = 10, **fields: Any
) -> Generation:
    heartbeat = None
    if beat_age is not None:
        heartbeat = Heartbeat(
            at=NOW - beat_age, agent_time=NOW, phase="training", step=3,
            gpu=GpuProbe(available=True, utilization_pct=90.0),
        )  # fmt: skip
    values: dict[str, Any] = {
        "job_id": "t-0123abcd", "generation": n, "token_hash": "x", "instance_id": instance_id,
        "machine_id": 7, "usd_per_hour": 0.5, "created_at": NOW - 600, "heartbeat": heartbeat,
        "prices": {"gpu_usd_per_hour": 0.4, "storage_usd_per_hour": 0.1,
                   "inet_down_usd_per_gb": 0.01, "inet_up_usd_per_gb": 0.02},
    }  # fmt: skip
    values.update(fields)
    return Generation(**values)
