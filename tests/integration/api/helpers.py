"""Shared builders for the API tests."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from functions.domain.agent_token import hash_token
from functions.domain.heartbeat import StorageCredentials
from functions.domain.job import Generation, JobState, TimelineEvent
from tests.paths import ROOT

TOKEN = "tok-" + "a" * 40
SPEC: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "tiny-cpu.yaml").read_text())


def spec(**overrides: Any) -> dict[str, Any]:
    data = copy.deepcopy(SPEC)
    data.update(overrides)
    return data


def submit(api: Any, **overrides: Any) -> str:
    reply = api.jobs("POST", "/jobs", body=spec(**overrides))
    assert reply.status == 201, reply.body
    return str(reply.body["job_id"])


def credentials(expires_at: float, key: str = "AKIDNEW") -> StorageCredentials:
    return StorageCredentials(
        access_key_id=key,
        secret_access_key="secret",
        session_token="session",
        expires_at=expires_at,
        endpoint="https://acct.r2.cloudflarestorage.com",
        bucket="tether",
        prefix="jobs/x/",
    )


def running_job(
    api: Any,
    *,
    usd_per_hour: float = 0.5,
    generation: int = 1,
    token: str = TOKEN,
    lease_expires_at: float = 0.0,
    creds: StorageCredentials | None = None,
    **spec_overrides: Any,
) -> str:
    """A job in RUNNING whose current generation holds `token` (what the lifecycle leaves)."""
    job_id = submit(api, **spec_overrides)
    api.clock.now += 1
    now = api.clock.now
    api.store.put_generation(
        Generation(
            job_id=job_id,
            generation=generation,
            status="running",
            token_hash=hash_token(token),
            instance_id=1000 + generation,
            machine_id=77,
            offer_id=555,
            usd_per_hour=usd_per_hour,
            created_at=now,
            lease_expires_at=lease_expires_at,
            credentials=creds,
        )
    )
    api.store.transition_job(
        job_id,
        JobState.RUNNING,
        expected=[JobState.PENDING],
        now=now,
        event=TimelineEvent(job_id=job_id, at=now, kind="running", message="host up"),
        updates={"current_generation": generation},
    )
    return job_id


def heartbeat_body(job_id: str, generation: Any = 1, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "job_id": job_id,
        "generation": generation,
        "phase": "training",
        "step": 120,
        "gpu": {"available": True, "responsive": True, "utilization_pct": 97.0},
        "last_checkpoint": {"step": 100, "generation": generation, "manifest_key": "m.json"},
        "bytes_downloaded": 10,
        "bytes_uploaded": 5,
        "agent_time": 1_800_000_000.5,
    }
    body.update(overrides)
    return body


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
