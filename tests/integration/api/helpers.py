"""Shared builders for the API tests."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from functions.domain.agent_token import hash_token
from functions.domain.heartbeat_contract import StorageCredentials, StorageKey
from functions.domain.job import Generation, JobState, TimelineEvent
from tests.paths import ROOT

TOKEN = "tok-" + "a" * 40
# The example without its `code.dir`: the API takes the archive `tether submit` packs from it
# (tests that need code pass `code=`).
SPEC: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "tiny-cpu" / "job.yaml").read_text())
del SPEC["code"]


def spec(**overrides: Any) -> dict[str, Any]:
    data = copy.deepcopy(SPEC)
    data.update(overrides)
    return data


def submit(api: Any, **overrides: Any) -> str:
    reply = api.jobs("POST", "/jobs", body=spec(**overrides))
    assert reply.status == 201, reply.body
    return str(reply.body["job_id"])


def credentials(expires_at: float, key: str = "AKIDNEW") -> StorageCredentials:
    def one(prefix: str, name: str) -> StorageKey:
        return StorageKey(
            access_key_id=name,
            secret_access_key="secret",
            session_token="session",
            expires_at=expires_at,
            prefix=prefix,
        )

    return StorageCredentials(
        endpoint="https://acct.r2.cloudflarestorage.com",
        bucket="tether",
        read=one("jobs/x/", key),
        write=one("jobs/x/g1/", key + "W"),
    )


def running_job(
    api: Any,
    *,
    usd_per_hour: float = 0.5,
    generation: int = 1,
    token: str = TOKEN,
    lease_expires_at: float = 0.0,
    creds: StorageCredentials | None = None,
    supervised_ago_s: float | None = 0.0,
    **spec_overrides: Any,
) -> str:
    """A job in RUNNING whose current generation holds `token` (what the lifecycle leaves:
    each earlier generation rented, then replaced), supervised by a monitor run
    `supervised_ago_s` ago (None: never)."""
    job_id = submit(api, **spec_overrides)
    api.clock.now += 1
    now = api.clock.now
    for n in range(1, generation + 1):
        if n > 1:
            replace(api, job_id, n - 1)
        recorded = api.store.record_generation(
            Generation(
                job_id=job_id,
                generation=n,
                status="running",
                token_hash=hash_token(token if n == generation else f"{token}-g{n}"),
                instance_id=1000 + n,
                machine_id=77,
                offer_id=555,
                usd_per_hour=usd_per_hour,
                created_at=now,
                lease_expires_at=lease_expires_at,
                credentials=creds,
                supervised_at=None if supervised_ago_s is None else now - supervised_ago_s,
            ),
            expected=[JobState.PENDING, JobState.REPLACING],
            now=now,
            event=TimelineEvent(job_id=job_id, at=now, kind="running", message="host up"),
        )
        assert recorded
    return job_id


def replace(api: Any, job_id: str, generation: int) -> None:
    """What the lifecycle's begin does to replace `generation`: REPLACING, and the generation
    superseded (its token gets `superseded` from then on)."""
    now = api.clock.now
    api.store.transition_job(
        job_id,
        JobState.REPLACING,
        expected=[JobState.RUNNING],
        now=now,
        event=TimelineEvent(job_id=job_id, at=now, kind="replacing", message="dead"),
    )
    api.store.supersede_generation(job_id, generation, host_blamed=False)


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
