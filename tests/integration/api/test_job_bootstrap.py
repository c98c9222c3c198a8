"""The job over the heartbeat, through the real handler on moto (functions/domain/job_bootstrap.py):
the current generation's token gets its job (command, env, restore list, its own storage keys)
when it asks; a superseded or stopped generation, a wrong token, or a token of another job gets
none of it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.domain.agent_token import hash_token
from functions.domain.heartbeat_contract import StorageCredentials, StorageKey
from functions.domain.job import Generation, JobState, TimelineEvent
from functions.domain.storage_layout import manifest_key
from tests.integration.api.helpers import SPEC, TOKEN, auth, heartbeat_body, replace, running_job

URL = "/agent/heartbeat"
NEW_TOKEN = "tok-" + "n" * 40
R2_TOKEN = "and" + "Q" * 680  # R2-sized: base64("jwt/" + JWT)

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def keys(job_id: str, generation: int, secret: str) -> StorageCredentials:
    def key(prefix: str, key_id: str) -> StorageKey:
        return StorageKey(
            access_key_id=key_id, secret_access_key=secret, session_token=R2_TOKEN,
            expires_at=1_800_100_000.0, prefix=prefix,
        )  # fmt: skip

    return StorageCredentials(
        endpoint="https://acct.r2.cloudflarestorage.com",
        bucket="tether",
        read=key(f"jobs/{job_id}/", f"read-{generation}"),
        write=key(f"jobs/{job_id}/g{generation}/", f"write-{generation}"),
    )


def beat(api: Any, job_id: str, token: str = TOKEN, **body: Any) -> Any:
    return api.heartbeat("POST", URL, body=heartbeat_body(job_id, **body), headers=auth(token))


def checkpoint(job_id: str, step: int) -> dict[str, Any]:
    return {
        "step": step,
        "generation": 1,
        "manifest_key": manifest_key(job_id, step, 1),
        "manifest_sha256": f"{step:064x}",
    }


def second_generation(api: Any, job_id: str) -> None:
    """Generation 1 replaced by generation 2 (token NEW_TOKEN), keys scoped to it."""
    replace(api, job_id, 1)
    assert api.store.record_generation(
        Generation(
            job_id=job_id, generation=2, token_hash=hash_token(NEW_TOKEN), usd_per_hour=0.5,
            credentials=keys(job_id, 2, "g2-secret-" + "x" * 30), supervised_at=api.clock.now,
            lease_expires_at=api.clock.now + 600,
        ),
        expected=[JobState.REPLACING], now=api.clock.now,
        event=TimelineEvent(job_id=job_id, at=api.clock.now, kind="rented", message="g2"),
    )  # fmt: skip


def test_the_current_generation_gets_its_job_when_it_asks(api) -> None:
    job_id = running_job(api, env={"JOB_GREETING": "hello"})
    assert api.store.store_credentials(job_id, 1, keys(job_id, 1, "g1-secret-" + "y" * 30))
    for step in (100, 200):  # generation 1 records two checkpoints
        assert beat(api, job_id, last_checkpoint=checkpoint(job_id, step)).status == 200
    second_generation(api, job_id)
    plain = beat(api, job_id, token=NEW_TOKEN, generation=2, last_checkpoint=None)
    assert plain.status == 200 and plain.body["job"] is None
    asked = beat(
        api, job_id, token=NEW_TOKEN, generation=2, last_checkpoint=None, phase="starting",
        wants_job=True,
    )  # fmt: skip
    assert asked.status == 200 and asked.body["command"] == "continue"
    job = asked.body["job"]
    assert job["run"] == SPEC["run"]
    assert job["env"] == {"JOB_GREETING": "hello"}
    assert [(c["step"], c["generation"]) for c in job["restore"]] == [(200, 1), (100, 1)]
    assert job["storage"] == keys(job_id, 2, "g2-secret-" + "x" * 30).model_dump(mode="json")
    assert job["checkpoint_dir"] == SPEC["checkpoint"]["dir"]


def test_a_superseded_generation_gets_no_job(api) -> None:
    job_id = running_job(api, env={"JOB_GREETING": "hello"})
    assert api.store.store_credentials(job_id, 1, keys(job_id, 1, "g1-secret-" + "y" * 30))
    second_generation(api, job_id)
    old = beat(api, job_id, wants_job=True, phase="starting")
    assert old.status == 200 and old.body["command"] == "superseded"
    assert old.body["job"] is None
    assert R2_TOKEN not in json.dumps(old.body) and "hello" not in json.dumps(old.body)


def test_a_stopped_job_gets_no_job(api) -> None:
    job_id = running_job(api)
    assert api.store.store_credentials(job_id, 1, keys(job_id, 1, "g1-secret-" + "y" * 30))
    assert api.jobs("POST", f"/jobs/{job_id}/cancel").status == 202
    reply = beat(api, job_id, wants_job=True, phase="starting")
    assert reply.status == 200 and reply.body["command"] == "stop"
    assert reply.body["job"] is None


def test_a_wrong_token_or_another_jobs_token_gets_401_and_nothing(api) -> None:
    mine = running_job(api, env={"MINE": "a"})
    theirs = running_job(api, token=NEW_TOKEN, env={"THEIRS": "their-value-123"})
    assert api.store.store_credentials(theirs, 1, keys(theirs, 1, "their-secret-" + "z" * 30))
    wrong = beat(api, theirs, token="tok-" + "b" * 40, wants_job=True)
    assert wrong.status == 401
    # My token, naming their job: their values never come back.
    crossed = beat(api, theirs, token=TOKEN, wants_job=True)
    assert crossed.status == 401
    assert "their-value-123" not in json.dumps(crossed.body)
    assert "their-secret" not in json.dumps(crossed.body)
    assert mine != theirs
