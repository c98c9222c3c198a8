"""The agent against the R2 front: a 401 (expired or revoked key) waits for the fresh key a
heartbeat reply brings; a 403 AccessDenied (out of scope) is reported and not retried with the
same credentials, and the agent neither hangs nor crash-loops on it."""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tether_agent.agent import ExitCode
from tether_agent.storage import AccessDenied, Storage
from tether_agent.storage_credentials import Credentials, CredentialStore

from functions.adapters.cloudflare import CloudflareAccount, CloudflareClient, mint_job_credentials
from functions.domain.heartbeat_contract import StorageKey
from tests.integration.agent.conftest import (
    ControlPlane,
    agent_env,
    fake_train,
    finish,
    start_agent,
)
from tests.integration.r2_harness import (
    API_TOKEN,
    BUCKET,
    PARENT,
    R2,
    Minted,
    refused,
    running_r2,
)

# Waits on the storage's own retries end well before this; past it the test failed (a hang).
HANG_S = 60.0
# Writes one marked checkpoint once `go` exists, then exits 0.
WAIT_THEN_SAVE = """
import json, os, pathlib, sys, time
go = pathlib.Path(sys.argv[1])
while not go.exists():
    time.sleep(0.02)
ckpt = pathlib.Path(os.environ["TETHER_CHECKPOINT_DIR"]) / "checkpoint-1"
ckpt.mkdir(parents=True)
(ckpt / "weights.bin").write_bytes(b"w" * 4096)
(ckpt / os.environ["TETHER_MARKER"]).write_text("done")
pathlib.Path(os.environ["TETHER_PROGRESS_FILE"]).write_text(json.dumps({"step": 1}))
print("saved 1", flush=True)
"""


@pytest.fixture(scope="module")
def r2_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[R2]:
    with running_r2(tmp_path_factory.mktemp("r2-agent")) as running:
        yield running


@pytest.fixture
def r2(r2_server: R2) -> R2:
    r2_server.clock.offset = 0.0
    r2_server.front.refusals.clear()
    return r2_server


def credentials(r2: R2, minted: Minted, *, expires_at: float | None = None) -> Credentials:
    return Credentials(
        minted.access_key_id,
        minted.secret_access_key,
        minted.session_token,
        expires_at,
        r2.url,
        BUCKET,
    )


def wire(
    r2: R2, read: Minted, write: Minted, job_id: str, expires_at: float, generation: int = 1
) -> dict[str, object]:
    """The generation's two keys as a heartbeat reply carries them."""

    def key(minted: Minted, prefix: str) -> dict[str, object]:
        return {
            "access_key_id": minted.access_key_id,
            "secret_access_key": minted.secret_access_key,
            "session_token": minted.session_token,
            "expires_at": expires_at,
            "prefix": prefix,
        }

    return {
        "endpoint": r2.url,
        "bucket": BUCKET,
        "read": key(read, f"jobs/{job_id}/"),
        "write": key(write, f"jobs/{job_id}/g{generation}/"),
    }


def env_for(
    tmp_path: Path,
    r2: R2,
    plane: ControlPlane,
    job_id: str,
    read: Minted,
    write: Minted | None = None,
    **extra: str,
) -> dict[str, str]:
    """The agent's environment with these keys (`write` defaults to `read`)."""
    write = write or read
    return agent_env(
        tmp_path, r2.s3, BUCKET, plane,
        TETHER_JOB_ID=job_id, TETHER_S3_PREFIX=f"jobs/{job_id}/", TETHER_S3_ENDPOINT=r2.url,
        TETHER_S3_ACCESS_KEY_ID=read.access_key_id,
        TETHER_S3_SECRET_ACCESS_KEY=read.secret_access_key,
        TETHER_S3_SESSION_TOKEN=read.session_token,
        TETHER_S3_CREDENTIALS_EXPIRE_AT=str(time.time() + 900),
        TETHER_S3_WRITE_ACCESS_KEY_ID=write.access_key_id,
        TETHER_S3_WRITE_SECRET_ACCESS_KEY=write.secret_access_key,
        TETHER_S3_WRITE_SESSION_TOKEN=write.session_token,
        TETHER_S3_WRITE_CREDENTIALS_EXPIRE_AT=str(time.time() + 900),
        **extra,
    )  # fmt: skip


def in_thread(fn: object) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(fn())  # type: ignore[operator]
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def new_job() -> str:
    return f"j{uuid.uuid4().hex[:10]}"


# --- the storage layer ----------------------------------------------------------------------


def test_access_denied_is_raised_at_once_not_waited_on(r2: R2) -> None:
    """Before: AccessDenied waited for new credentials (a minute on a host) and tried again.
    Now it waits only `stale_wait_s` once (R2 may say 403 for a stale key), never that minute."""
    minted = r2.mint(prefixes=["jobs/A/"])
    storage = Storage(
        CredentialStore(credentials(r2, minted)),
        "jobs/B/",
        credential_wait_s=3600,
        stale_wait_s=0.5,
        backoff_s=0.01,
    )
    try:
        thread, outcome = in_thread(lambda: storage.put_bytes("jobs/B/x.bin", b"x"))
        thread.join(HANG_S)
        assert not thread.is_alive(), "an out-of-scope write waited for new credentials"
    finally:
        storage.close()
    assert len(outcome) == 1 and isinstance(outcome[0], AccessDenied)
    assert minted.secret_access_key not in str(outcome[0])
    assert [(r.method, r.code) for r in r2.front.refusals] == [("PUT", "AccessDenied")]
    assert "jobs/B/x.bin" not in r2.on_disk()


def test_a_403_on_a_current_key_waits_once_for_newer_credentials_and_recovers(r2: R2) -> None:
    """Real R2 may answer 403 where the front answers 401 (a key revoked early): the first 403
    on a key the agent believes current waits for the next heartbeat's key and retries with it.
    Before: AccessDenied at once, and the upload was lost although a working key came a beat
    later."""
    store = CredentialStore(credentials(r2, r2.mint(prefixes=["jobs/A/"])))
    storage = Storage(store, "jobs/R/", credential_wait_s=HANG_S, stale_wait_s=HANG_S)
    try:
        thread, outcome = in_thread(lambda: storage.put_bytes("jobs/R/x.bin", b"x"))
        deadline = time.monotonic() + HANG_S
        while not r2.front.refusals and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [(r.status, r.code) for r in r2.front.refusals] == [(403, "AccessDenied")]
        time.sleep(0.2)
        assert thread.is_alive(), "a 403 on a current key was not doubted once"
        store.offer(credentials(r2, r2.mint(prefixes=["jobs/R/"]), expires_at=time.time() + 900))
        thread.join(HANG_S)
    finally:
        storage.close()
    assert outcome == [None]
    assert (r2.data / "jobs/R/x.bin").read_bytes() == b"x"
    assert len(r2.front.refusals) == 1


def test_a_403_is_doubted_once_per_key_then_refused_at_once(r2: R2) -> None:
    stale_wait_s = 2.0
    storage = Storage(
        CredentialStore(credentials(r2, r2.mint(prefixes=["jobs/A/"]))),
        "jobs/R/",
        credential_wait_s=HANG_S,
        stale_wait_s=stale_wait_s,
    )
    try:
        elapsed_s = []
        for name in ("first.bin", "second.bin"):
            started = time.monotonic()
            with pytest.raises(AccessDenied):
                storage.put_bytes(f"jobs/R/{name}", b"x")
            elapsed_s.append(time.monotonic() - started)
    finally:
        storage.close()
    assert elapsed_s[0] >= stale_wait_s, "the first 403 was not doubted"
    assert elapsed_s[1] < stale_wait_s, "the same key's second 403 waited again"
    assert [r.code for r in r2.front.refusals] == ["AccessDenied", "AccessDenied"]


def test_expired_key_waits_for_the_fresh_one_then_succeeds(r2: R2) -> None:
    old = r2.mint(prefixes=["jobs/E/"], ttl_s=60)
    store = CredentialStore(credentials(r2, old, expires_at=time.time() + 60))
    storage = Storage(store, "jobs/E/", credential_wait_s=HANG_S, backoff_s=0.01)
    try:
        storage.put_bytes("jobs/E/before.bin", b"b")
        r2.clock.advance(61)
        thread, outcome = in_thread(lambda: storage.put_bytes("jobs/E/after.bin", b"a"))
        deadline = time.monotonic() + HANG_S
        while not r2.front.refusals and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [(r.status, r.code) for r in r2.front.refusals] == [(401, "Unauthorized")]
        assert thread.is_alive(), "gave up instead of waiting for fresh credentials"
        fresh = r2.mint(prefixes=["jobs/E/"])
        store.offer(credentials(r2, fresh, expires_at=time.time() + 900))
        thread.join(HANG_S)
    finally:
        storage.close()
    assert outcome == [None]
    assert (r2.data / "jobs/E/after.bin").read_bytes() == b"a"


# --- the agent process ------------------------------------------------------------------------


def test_refused_uploads_are_reported_and_not_retried_forever(
    tmp_path: Path, r2: R2, control_plane: ControlPlane
) -> None:
    """A read-only write key (a control-plane bug would look like this): every upload and log
    segment is refused; the agent reports it, finishes training, and exits."""
    job_id = new_job()
    minted = r2.mint(prefixes=[f"jobs/{job_id}/"], permission="object-read-only")
    env = env_for(tmp_path, r2, control_plane, job_id, minted)
    code, out = finish(start_agent(env, fake_train("--steps", "3")), timeout=HANG_S)
    assert code == 0, out
    assert "AccessDenied" in out and "checkpoint 1 not uploaded" in out
    assert "log shipping stopped" in out
    for secret in (minted.secret_access_key, minted.session_token):
        assert secret not in out
    puts = [r for r in r2.front.refusals if r.method in ("PUT", "POST")]
    assert all(r.code == "AccessDenied" for r in puts)
    # Each checkpoint (three files, marker included) tried once with these credentials, and
    # one log segment: refusals are not retried.
    assert 0 < len(puts) <= 3 * 3 + 1, puts
    assert not [k for k in r2.on_disk() if k.startswith(f"jobs/{job_id}/")]
    last = control_plane.last()
    assert last is not None and last["phase"] == "finished" and last["last_checkpoint"] is None


def test_refused_restore_fails_the_generation_once(
    tmp_path: Path, r2: R2, control_plane: ControlPlane
) -> None:
    """The read key cannot read the recorded checkpoint (a control-plane bug would look like
    this): storage, not the candidate, is at fault, so the agent fails the generation once
    with the reason in its heartbeat instead of throwing the recorded work away."""
    job_id = new_job()
    writer = r2.mint(prefixes=[f"jobs/{job_id}/g1/"])
    client = r2.client(writer)
    manifest = b'{"step": 1, "generation": 1, "created_at": "2026-01-01T00:00:00Z", "files": []}'
    key = f"jobs/{job_id}/g1/checkpoints/000000000001/manifest.json"
    client.put_object(Bucket=BUCKET, Key=key, Body=manifest)
    recorded = {
        "step": 1, "generation": 1, "manifest_key": key,
        "manifest_sha256": hashlib.sha256(manifest).hexdigest(),
    }  # fmt: skip
    reader = r2.mint(prefixes=[f"jobs/{job_id}/g9/"], permission="object-read-only")
    env = env_for(
        tmp_path, r2, control_plane, job_id, reader, r2.mint(prefixes=[f"jobs/{job_id}/g2/"]),
        TETHER_GENERATION="2", TETHER_RESTORE_CHECKPOINTS=json.dumps([recorded]),
    )  # fmt: skip
    code, out = finish(start_agent(env, fake_train("--steps", "1")), timeout=HANG_S)
    assert code == ExitCode.STORAGE_FAILED, out
    assert "restore failed" in out and "AccessDenied" in out
    lists = [r for r in r2.front.refusals if r.method == "GET"]
    assert len(lists) == 1 and lists[0].code == "AccessDenied"
    last = control_plane.last()
    assert last is not None and last["phase"] == "failed"
    assert last["restore"]["outcome"] == "unreadable"
    assert "AccessDenied" in last["restore"]["skipped"][0]["reason"]


def test_expired_key_is_replaced_by_the_heartbeat_and_the_upload_succeeds(
    tmp_path: Path, r2: R2, control_plane: ControlPlane
) -> None:
    job_id = new_job()
    prefix = f"jobs/{job_id}/"
    old = r2.mint(prefixes=[prefix + "g1/"], ttl_s=300)
    go = tmp_path / "go"
    script = tmp_path / "wait_then_save.py"
    script.write_text(WAIT_THEN_SAVE)
    env = env_for(tmp_path, r2, control_plane, job_id, old)
    agent = start_agent(env, [sys.executable, str(script), str(go)])
    try:
        control_plane.wait_for(lambda hb: hb["phase"] == "training")
        r2.clock.advance(301)  # the key the agent holds has expired
        go.touch()

        def checkpoint_refused() -> bool:
            return any(r.status == 401 and "/checkpoints/" in r.path for r in r2.front.refusals)

        deadline = time.monotonic() + HANG_S
        while time.monotonic() < deadline and not checkpoint_refused():
            time.sleep(0.02)
        assert checkpoint_refused(), list(r2.front.refusals)
        # what the monitor's renewal mints
        fresh_read = r2.mint(prefixes=[prefix], permission="object-read-only")
        fresh = r2.mint(prefixes=[prefix + "g1/"])
        control_plane.credentials = wire(r2, fresh_read, fresh, job_id, time.time() + 1800)
        code, out = finish(agent, timeout=HANG_S)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert code == 0, out
    assert "storage credentials rotated" in out
    manifest = f"jobs/{job_id}/g1/checkpoints/000000000001/manifest.json"
    assert manifest in r2.on_disk()
    assert not [r for r in r2.front.refusals if r.status == 403]
    last = control_plane.last()
    assert last is not None and last["last_checkpoint"]["step"] == 1


# --- storage isolation per generation -----------------------------------------------------------


def test_a_replaced_generations_keys_cannot_write_outside_its_own_prefix(r2: R2) -> None:
    """Keys minted as the control plane mints them (read-only on the job, read-write on the
    generation's own prefix): a generation-1 zombie still holding its keys gets 403 for
    anything in generation 2's prefix, the job root or another generation's name that starts
    like its own; its read key writes nothing at all."""
    job_id = new_job()
    cloudflare = CloudflareClient(
        r2.sim.account_id, API_TOKEN, base_url="https://api.invalid/client/v4",
        client=httpx.Client(transport=r2.sim.transport()), min_ttl_s=1,
    )  # fmt: skip
    account = CloudflareAccount(r2.sim.account_id, API_TOKEN, PARENT, BUCKET)
    g1 = mint_job_credentials(cloudflare, account, job_id, 1, ttl_s=900, endpoint=r2.url)
    g2 = mint_job_credentials(cloudflare, account, job_id, 2, ttl_s=900, endpoint=r2.url)

    def client(key: StorageKey) -> Any:
        return r2.client(Minted(key.access_key_id, key.secret_access_key, key.session_token))

    g2_manifest = f"jobs/{job_id}/g2/checkpoints/000000000500/manifest.json"
    client(g2.write).put_object(Bucket=BUCKET, Key=g2_manifest, Body=b"g2's")
    zombie = client(g1.write)
    zombie.put_object(Bucket=BUCKET, Key=f"jobs/{job_id}/g1/checkpoints/x", Body=b"own")
    for key in (
        f"jobs/{job_id}/g2/checkpoints/000000000900/manifest.json",
        g2_manifest,  # overwrite what g2 wrote
        f"jobs/{job_id}/manifest.json",  # the job root
        f"jobs/{job_id}/g12/checkpoints/000000000900/manifest.json",  # g12 starts like g1
        f"jobs/{job_id}x/g1/anything",
    ):
        assert refused(zombie.put_object, Bucket=BUCKET, Key=key, Body=b"z") == (
            403,
            "AccessDenied",
        ), key
    assert refused(zombie.delete_object, Bucket=BUCKET, Key=g2_manifest) == (403, "AccessDenied")
    reader = client(g1.read)
    assert refused(reader.put_object, Bucket=BUCKET, Key=f"jobs/{job_id}/g1/y", Body=b"r") == (
        403,
        "AccessDenied",
    )
    assert reader.get_object(Bucket=BUCKET, Key=g2_manifest)["Body"].read() == b"g2's"
    assert (r2.data / g2_manifest).read_bytes() == b"g2's"
    assert not (r2.data / f"jobs/{job_id}/manifest.json").exists()
