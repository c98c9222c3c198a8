"""Submit → provision → training → finished, with the real lifecycle and monitor."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from functions.domain import agent_env
from tests.e2e.conftest import api, example_code, s3_keys, tiny_spec, wait_for
from tether_local.demo.evidence import host_received
from tether_local.stack import LocalStack

pytestmark = pytest.mark.slow

TERMINAL = {"FINISHED", "FAILED", "CANCELLED", "OVER_BUDGET"}


def test_submitted_job_is_provisioned_trains_and_finishes(stack: LocalStack) -> None:
    run = "python tiny_train.py --steps 30 --checkpoint-every 10"
    spec = tiny_spec(name="end-to-end", run=run, code=example_code(stack.api_url))
    created = api(stack, "POST", "/jobs", json=spec)
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]

    rented_env: dict[str, str] = {}  # the create-instance `env`, as the Vast simulator holds it

    def terminal() -> dict[str, Any] | None:
        stack.tick()  # the monitor, as EventBridge would run it
        assert stack.hosts is not None
        for host in stack.hosts.for_job(job_id):
            if not rented_env and host.state == "running":
                rented_env.update(stack.vast.sim_instance(host.instance_id).env)
        job: dict[str, Any] = api(stack, "GET", f"/jobs/{job_id}").json()
        return job if job["state"] in TERMINAL else None

    job = wait_for("the job to end", terminal, timeout_s=50)
    assert stack.hosts is not None
    hosts = stack.hosts.for_job(job_id)
    logs = "\n".join(h.log_text()[-2000:] for h in hosts)
    assert job["state"] == "FINISHED", (job, logs)
    assert len(hosts) == 1
    manifests = [k for k in s3_keys(stack, job_id) if k.endswith("manifest.json")]
    assert len(manifests) == 3, manifests
    # The rent's env fits Vast's limits (each value at most 256 characters, 32 KB in all): it
    # carries what bootstraps the agent, and the job (R2-sized keys among it) came over the
    # agent's heartbeat.
    assert rented_env[agent_env.JOB_ID] == job_id
    assert max(len(value) for value in rented_env.values()) <= 256
    assert sum(len(k) + len(v) + 2 for k, v in rented_env.items()) <= 32 * 1024
    assert not set(rented_env) & set(agent_env.FROM_HEARTBEAT)
    sent = stack.front.job_sent(job_id, 1) if stack.front else None
    assert sent is not None and sent["run"] == run
    assert 550 <= len(sent["storage"]["write"]["session_token"]) <= 800
    # The lifecycle's rent env and the job over the heartbeat: no account-wide secret reached
    # the host (invariant 6).
    env = host_received(stack, hosts[0])
    for secret in stack.account_secrets():
        assert not [name for name, value in env.items() if secret in value]
    # The storage key the lifecycle minted for the host reaches its job and nothing else: the
    # R2 front refuses the rest as R2 would (invariant 6, tested, not only asserted).
    assert env[agent_env.S3_ENDPOINT] == stack.s3_url
    assert stack.r2 is not None and list(stack.r2.refusals) == []  # the agent stayed in scope
    s3 = boto3.session.Session().client(
        "s3",
        endpoint_url=env[agent_env.S3_ENDPOINT],
        region_name="auto",
        aws_access_key_id=env[agent_env.S3_ACCESS_KEY_ID],
        aws_secret_access_key=env[agent_env.S3_SECRET_ACCESS_KEY],
        aws_session_token=env[agent_env.S3_SESSION_TOKEN],
        config=Config(  # R2 refuses boto3's default request checksums on uploads
            retries={"max_attempts": 1}, request_checksum_calculation="when_required"
        ),
    )
    bucket, prefix = env[agent_env.S3_BUCKET], env[agent_env.S3_PREFIX]
    assert prefix == f"jobs/{job_id}/"
    assert s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["KeyCount"] > 0
    for outside in ("jobs/another-job/x.bin", "x.bin", f"jobs/{job_id}x/x.bin"):
        with pytest.raises(ClientError) as refused:
            s3.put_object(Bucket=bucket, Key=outside, Body=b"stray")
        assert refused.value.response["Error"]["Code"] == "AccessDenied", outside
    with pytest.raises(ClientError) as refused:
        s3.list_objects_v2(Bucket=bucket, Prefix="jobs/")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    # Finished: the host was destroyed and no instance of the job bills any more.
    wait_for("the host destroyed", lambda: hosts[0].state == "destroyed", timeout_s=20)
    assert hosts[0].instance_id not in stack.vast.gpu_billing_instances()
