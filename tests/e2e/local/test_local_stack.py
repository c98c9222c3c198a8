"""The local stack end to end: the API over real HTTP, hosts running the real agent, the S3
stand-in honouring only minted keys, chaos controls, and a heartbeat storm."""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from functions.domain import agent_env
from tests.e2e.conftest import (
    api,
    example_code,
    provision_by_hand,
    s3_keys,
    stored_heartbeat,
    tiny_spec,
    wait_for,
)
from tether_local.stack import R2_BUCKET, LocalStack

pytestmark = pytest.mark.slow

TRAIN = "python tiny_train.py --steps 30 --checkpoint-every 10"  # in the example's code
HOLD = "sleep 600"  # a training command that just runs, for chaos tests
CONCURRENCY = 16


def _mint(
    stack: LocalStack, prefix: str, ttl_s: int, permission: str = "object-read-write"
) -> dict[str, str]:
    reply = httpx.post(
        f"{stack.cloudflare_url}/accounts/local-account/r2/temp-access-credentials",
        headers={"Authorization": "Bearer local-api-token"},
        json={
            "bucket": R2_BUCKET,
            "parentAccessKeyId": "local-parent-key",
            "permission": permission,
            "ttlSeconds": ttl_s,
            "prefixes": [prefix],
        },
    )
    assert reply.status_code == 200, reply.text
    result: dict[str, str] = reply.json()["result"]
    return result


def _s3(stack: LocalStack, key: dict[str, str]) -> object:
    return boto3.session.Session().client(
        "s3",
        endpoint_url=stack.s3_url,
        region_name="auto",
        aws_access_key_id=key["accessKeyId"],
        aws_secret_access_key=key["secretAccessKey"],
        aws_session_token=key["sessionToken"],
        config=Config(  # R2 refuses boto3's default request checksums on uploads
            retries={"max_attempts": 1}, request_checksum_calculation="when_required"
        ),
    )


def _error_code(call: object) -> str:
    with pytest.raises(ClientError) as caught:
        call()  # type: ignore[operator]
    return str(caught.value.response["Error"]["Code"])


# --- the API front ------------------------------------------------------------------------------


def test_post_jobs_over_http_reaches_the_handler(stack: LocalStack) -> None:
    spec = tiny_spec(name="over-http", code=example_code(stack.api_url))
    created = api(stack, "POST", "/jobs", json=spec)
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    assert created.json()["submitted_by"] == "arn:aws:iam::123456789012:user/AKIDLOCALTEST"

    fetched = api(stack, "GET", f"/jobs/{job_id}")  # a path parameter route
    assert fetched.status_code == 200, fetched.text
    assert fetched.json()["job_id"] == job_id


def test_front_refuses_unsigned_user_routes_and_names_bad_fields(stack: LocalStack) -> None:
    unsigned = httpx.post(stack.api_url + "/jobs", json=tiny_spec())
    assert unsigned.status_code == 403
    assert unsigned.json() == {"message": "Forbidden"}

    bad = api(stack, "POST", "/jobs", json=tiny_spec(budget_usd=-1))
    assert bad.status_code == 400
    assert any(d["path"] == "budget_usd" for d in bad.json()["details"]), bad.text

    unknown = api(stack, "DELETE", "/nothing-here")
    assert unknown.status_code in (404, 405)

    no_token = httpx.post(stack.api_url + "/agent/heartbeat", json={"job_id": "x"}, timeout=60)
    assert no_token.status_code == 401


# --- hosts: the real agent ------------------------------------------------------------------


def test_rented_host_runs_the_agent_which_heartbeats_and_uploads(stack: LocalStack) -> None:
    job = provision_by_hand(stack, TRAIN, code=example_code(stack.api_url))
    host = job.host(stack)
    assert host.state in ("booting", "running")

    finished = wait_for(
        "the agent's 'finished' heartbeat",
        lambda: (hb := stored_heartbeat(stack, job.job_id)) and hb.phase == "finished" and hb,
        timeout_s=45,
    )
    assert finished.exit_code == 0, host.log_text()[-3000:]
    assert finished.last_checkpoint is not None and finished.last_checkpoint.step == 30
    keys = s3_keys(stack, job.job_id)
    manifests = [k for k in keys if k.endswith("/manifest.json")]
    assert len(manifests) == 3, keys  # steps 10, 20, 30, each complete with its manifest
    assert all(k.startswith(f"jobs/{job.job_id}/g1/checkpoints/") for k in manifests)
    # everything the generation wrote is under its own prefix, its log segments too (the code
    # archive is the job's, placed before any generation)
    code = f"jobs/{job.job_id}/code/"
    written = [k for k in keys if not k.startswith(code)]
    assert written and all(k.startswith(f"jobs/{job.job_id}/g1/") for k in written), keys
    # The agent ran from the wheel-built venv, in the host's own disk directory.
    assert (host.disk / "workspace" / "checkpoints").is_dir()
    assert "tether-agent" in host.log_text() or host.log_text() == ""
    # The bytes it reported were billed to its instance: by the front once the heartbeat's
    # Lambda has answered, so just after the heartbeat is stored (a run this short may report
    # its first bytes in the final heartbeat).
    wait_for(
        "the reported bytes billed to the instance",
        lambda: stack.vast.ledger(job.instance_id).bytes_up > 0,
        timeout_s=10,
    )
    billed = stack.vast.ledger(job.instance_id)
    assert billed.bytes_down > 0  # the code archive, downloaded before training


def test_host_env_holds_no_account_secret(stack: LocalStack) -> None:
    job = provision_by_hand(stack, HOLD)
    assert stack.hosts is not None
    envs = stack.hosts.received_envs()
    assert job.instance_id in envs
    env = envs[job.instance_id]
    # What the lifecycle passed (what bootstraps the agent: the storage keys come over its
    # heartbeat), plus the per-instance key Vast adds.
    assert env[agent_env.JOB_ID] == job.job_id
    assert agent_env.S3_ACCESS_KEY_ID not in env and agent_env.S3_WRITE_ACCESS_KEY_ID not in env
    assert job.credentials.read.secret_access_key not in json.dumps(env)
    assert env[agent_env.CONTAINER_ID] == str(job.instance_id)
    assert env[agent_env.CONTAINER_API_KEY] != stack.vast.api_key
    for instance_id, received in envs.items():
        for secret in stack.account_secrets():
            leaks = [name for name, value in received.items() if secret in value or secret in name]
            assert not leaks, f"host {instance_id}: account secret in {leaks}"
    stack.vast.instance(job.instance_id)  # still there; destroy it to free the test's host
    httpx.delete(
        f"{stack.vast_url}/api/v0/instances/{job.instance_id}/",
        headers={"Authorization": f"Bearer {stack.vast.api_key}"},
    ).raise_for_status()


# --- the S3 stand-in ------------------------------------------------------------------------


def test_s3_stand_in_honours_only_live_minted_keys_in_scope(stack: LocalStack) -> None:
    mine = _s3(stack, _mint(stack, "jobs/scope-a/", 900))
    other = _s3(stack, _mint(stack, "jobs/scope-b/", 900))
    mine.put_object(Bucket=R2_BUCKET, Key="jobs/scope-a/x.bin", Body=b"payload")  # type: ignore[attr-defined]
    body = mine.get_object(Bucket=R2_BUCKET, Key="jobs/scope-a/x.bin")["Body"].read()  # type: ignore[attr-defined]
    assert body == b"payload"
    assert (stack.root / "s3" / R2_BUCKET / "jobs" / "scope-a" / "x.bin").read_bytes() == body

    # Another job's key cannot read it (R2: 403 AccessDenied, not 404).
    assert _error_code(lambda: other.get_object(Bucket=R2_BUCKET, Key="jobs/scope-a/x.bin")) == (  # type: ignore[attr-defined]
        "AccessDenied"
    )
    # A key nobody minted is refused.
    forged = _s3(stack, {"accessKeyId": "f" * 32, "secretAccessKey": "x", "sessionToken": "t"})
    assert _error_code(lambda: forged.list_objects_v2(Bucket=R2_BUCKET)) == "Unauthorized"  # type: ignore[attr-defined]


@pytest.mark.parametrize("key", ["jobs/scope-b/stray.bin", "stray.txt"])
def test_out_of_scope_write_is_refused_and_lands_nowhere(stack: LocalStack, key: str) -> None:
    """Before: 200, and the object landed in the key's private view (readable back by it)."""
    mine = _s3(stack, _mint(stack, "jobs/scope-a/", 900))
    assert _error_code(lambda: mine.put_object(Bucket=R2_BUCKET, Key=key, Body=b"x")) == (  # type: ignore[attr-defined]
        "AccessDenied"
    )
    assert _error_code(lambda: mine.get_object(Bucket=R2_BUCKET, Key=key)) == "AccessDenied"  # type: ignore[attr-defined]
    assert not list(stack.root.rglob(key.rsplit("/", 1)[-1]))


def test_read_only_key_cannot_write_into_the_bucket(stack: LocalStack) -> None:
    reader = _s3(stack, _mint(stack, "jobs/ro/", 900, permission="object-read-only"))
    code = _error_code(
        lambda: reader.put_object(Bucket=R2_BUCKET, Key="jobs/ro/w.bin", Body=b"w")  # type: ignore[attr-defined]
    )
    assert code == "AccessDenied"
    assert not (stack.root / "s3" / R2_BUCKET / "jobs" / "ro" / "w.bin").exists()


def test_wrong_session_token_is_refused(stack: LocalStack) -> None:
    key = _mint(stack, "jobs/token/", 900)
    wrong = _s3(stack, {**key, "sessionToken": _mint(stack, "jobs/token/", 900)["sessionToken"]})
    code = _error_code(
        lambda: wrong.put_object(Bucket=R2_BUCKET, Key="jobs/token/x", Body=b"x")  # type: ignore[attr-defined]
    )
    assert code == "Unauthorized"


def test_expired_key_is_refused_by_the_s3_stand_in(stack: LocalStack) -> None:
    """Refused at once, though it was in use (rclone's auth cache kept such a key for ~5 min)."""
    expiring = _mint(stack, "jobs/expiring/", ttl_s=2)
    client = _s3(stack, expiring)
    client.put_object(Bucket=R2_BUCKET, Key="jobs/expiring/early", Body=b"x")  # type: ignore[attr-defined]
    time.sleep(2.2)  # past its expiry (the simulator's clock is real time)
    code = _error_code(
        lambda: client.put_object(Bucket=R2_BUCKET, Key="jobs/expiring/late", Body=b"x")  # type: ignore[attr-defined]
    )
    assert code == "Unauthorized"
    assert not (stack.root / "s3" / R2_BUCKET / "jobs" / "expiring" / "late").exists()


# --- chaos ----------------------------------------------------------------------------------


def test_cut_heartbeats_are_dropped_and_restored(stack: LocalStack) -> None:
    assert stack.front is not None
    job = provision_by_hand(stack, HOLD)
    first = wait_for("a heartbeat", lambda: stored_heartbeat(stack, job.job_id), timeout_s=30)
    stack.front.cut_heartbeats(job.job_id, job.generation)
    time.sleep(0.5)  # let an in-flight heartbeat land
    cut_at = stored_heartbeat(stack, job.job_id).at
    time.sleep(1.5)  # five heartbeat intervals
    assert stored_heartbeat(stack, job.job_id).at == cut_at
    stack.front.restore_heartbeats(job.job_id, job.generation)
    wait_for(
        "heartbeats after the cut is restored",
        lambda: stored_heartbeat(stack, job.job_id).at > cut_at,
        timeout_s=30,
    )
    assert first.at <= cut_at


def test_destroy_kills_every_process_and_zombie_comes_back_superseded_free(
    stack: LocalStack,
) -> None:
    assert stack.hosts is not None
    job = provision_by_hand(stack, HOLD)
    host = job.host(stack)
    wait_for("the host's agent and training", lambda: len(stack.hosts.processes()) >= 2)  # type: ignore[union-attr]
    wait_for("a heartbeat", lambda: stored_heartbeat(stack, job.job_id), timeout_s=30)

    stack.hosts.freeze(job.instance_id)
    assert host.frozen
    stack.hosts.thaw(job.instance_id)

    stack.hosts.destroy(job.instance_id)
    assert host.state == "destroyed"
    from tether_local.hosts.local_hosts import describe_marked, marked_processes

    assert describe_marked(host.marker) == []  # the training process (own group) too
    record = stack.vast.instance(job.instance_id)
    assert record is not None and record["actual_status"] == "offline"

    stack.hosts.zombie(job.instance_id)  # the dead host comes back with its old agent
    assert host.starts == 2
    wait_for("the zombie's processes", lambda: marked_processes(host.marker))
    stack.hosts.destroy(job.instance_id)
    assert describe_marked(host.marker) == []


def test_hung_gpu_is_what_the_agent_reports(stack: LocalStack) -> None:
    assert stack.hosts is not None
    job = provision_by_hand(stack, HOLD)
    wait_for("a heartbeat", lambda: stored_heartbeat(stack, job.job_id), timeout_s=30)
    stack.hosts.idle_gpu(job.instance_id)
    hb = wait_for(
        "an idle GPU reading",
        lambda: (h := stored_heartbeat(stack, job.job_id)) and h.gpu.utilization_pct == 0 and h,
        timeout_s=30,
    )
    assert hb.gpu.responsive
    stack.hosts.destroy(job.instance_id)


def test_vast_api_faults_reach_clients(stack: LocalStack) -> None:
    stack.vast.inject("rate_limit", 1)
    headers = {"Authorization": f"Bearer {stack.vast.api_key}"}
    limited = httpx.get(f"{stack.vast_url}/api/v0/instances/", headers=headers)
    assert limited.status_code == 429
    stack.vast.inject("connection_error", 1)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{stack.vast_url}/api/v0/instances/", headers=headers)
    assert httpx.get(f"{stack.vast_url}/api/v0/instances/", headers=headers).status_code == 200


# --- load -----------------------------------------------------------------------------------


def test_heartbeat_storm_from_a_thousand_agents_gets_no_5xx(stack: LocalStack) -> None:
    """1000 fake agents (each its own job id and token, most unknown to the API) plus a real
    generation's token, 16 at a time over loopback: every answer is a 2xx or a 4xx. All at
    once is past the heartbeat route's bucket (the template's 100, refilled at 50 a second):
    the front answers the rest 429, as API Gateway would, and runs no function for them."""
    job = provision_by_hand(stack, HOLD)

    def beat(i: int) -> tuple[bool, int]:
        real = i % 10 == 0
        body = {
            "job_id": job.job_id if real else f"storm-{i}",
            "generation": 1,
            "phase": "training",
            "step": i,
            "gpu": {"available": True, "responsive": True, "utilization_pct": 90.0},
            "agent_time": time.time(),
        }
        token = job.token if real else f"token-{i}"
        reply = clients[i % len(clients)].post(
            stack.api_url + "/agent/heartbeat",
            content=json.dumps(body),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        return real, reply.status_code

    assert stack.front is not None
    throttled_before = stack.front.throttled.get("POST /agent/heartbeat", 0)
    clients = [httpx.Client(timeout=120) for _ in range(CONCURRENCY)]
    try:
        with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
            answers = list(pool.map(beat, range(1000)))
    finally:
        for client in clients:
            client.close()
    statuses = [status for _, status in answers]
    assert len(statuses) == 1000
    assert not [s for s in statuses if s >= 500]
    assert {s for s in statuses if s != 200} <= {401, 404, 409, 429}
    assert len(statuses) - statuses.count(429) >= 100  # the bucket's burst was served
    real = [status for is_real, status in answers if is_real]
    assert set(real) <= {200, 429}  # the real generation's beats: through, or throttled
    assert real.count(200) >= 10
    # The front counted each of those 429s (and any the stack's running agents got meanwhile).
    throttled = stack.front.throttled.get("POST /agent/heartbeat", 0) - throttled_before
    assert throttled >= statuses.count(429)
    assert stack.hosts is not None
    stack.hosts.destroy(job.instance_id)


def test_signed_header_is_required_shape_not_signature(stack: LocalStack) -> None:
    wrong_scheme = httpx.get(stack.api_url + "/jobs", headers={"Authorization": "Bearer x"})
    assert wrong_scheme.status_code == 403
    listed = api(stack, "GET", "/jobs")
    assert listed.status_code == 200, listed.text


# --- outputs: the job's result outlives its host ---------------------------------------------

WRITE_RESULT = (
    "python -c \"import os, pathlib; d = pathlib.Path(os.environ['TETHER_OUTPUTS_DIR']); "
    "(d / 'adapter').mkdir(parents=True, exist_ok=True); "
    "(d / 'adapter' / 'weights.bin').write_bytes(bytes(range(256)) * 300)\""
)


def test_outputs_are_uploaded_and_outlive_the_destroyed_host(stack: LocalStack) -> None:
    assert stack.hosts is not None
    code = example_code(stack.api_url)
    job = provision_by_hand(stack, f"{TRAIN} && {WRITE_RESULT}", outputs={}, code=code)
    host = job.host(stack)
    finished = wait_for(
        "the agent's 'finished' heartbeat with outputs",
        lambda: (
            (hb := stored_heartbeat(stack, job.job_id))
            and hb.phase == "finished"
            and hb.outputs is not None
            and hb
        ),
        timeout_s=45,
    )
    assert finished.exit_code == 0, host.log_text()[-3000:]
    assert finished.outputs.manifest_key == f"jobs/{job.job_id}/g1/outputs/manifest.json"
    assert (finished.outputs.files, finished.outputs.bytes) == (1, 76_800)
    # The result was written outside the checkpoint folder, on the host's own disk.
    assert (host.disk / "workspace" / "outputs" / "adapter" / "weights.bin").is_file()

    stack.hosts.destroy(job.instance_id)  # its disk is wiped
    assert not host.disk.exists()
    base = stack.root / "s3" / R2_BUCKET / "jobs" / job.job_id / "g1" / "outputs"
    raw = (base / "manifest.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == finished.outputs.manifest_sha256
    manifest = json.loads(raw)
    assert [(f["path"], f["size"]) for f in manifest["files"]] == [("adapter/weights.bin", 76_800)]
    kept = (base / "files" / "adapter" / "weights.bin").read_bytes()
    assert kept == bytes(range(256)) * 300
    assert hashlib.sha256(kept).hexdigest() == manifest["files"][0]["sha256"]
    # …and the jobs API hands it back through a presigned URL, bit for bit.
    listing = api(stack, "GET", f"/jobs/{job.job_id}/files", params={"outputs": "true"})
    assert listing.status_code == 200, listing.text
    (entry,) = listing.json()["files"]
    assert (entry["path"], entry["size"]) == ("adapter/weights.bin", 76_800)
    assert httpx.get(entry["url"]).content == bytes(range(256)) * 300
