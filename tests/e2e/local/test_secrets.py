"""A job with a user secret on the local stack, submitted through the API and run by the real
lifecycle and agent: the training command has the value; DynamoDB, the job view, the Vast
instance's environment and the uploaded logs do not."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.e2e.conftest import api, s3_keys, tiny_spec, wait_for
from tether_local.demo.evidence import host_received
from tether_local.stack import R2_BUCKET, LocalStack

pytestmark = pytest.mark.slow

VALUE = "hf_LocalStackSecretValue0123456789"
# A careless script prints its token; the digest line proves what the process had (the disk
# is gone once the lifecycle destroys the host, the shipped log stays).
RUN = 'echo "token is $HF_TOKEN" && echo "digest $(printf %s "$HF_TOKEN" | sha256sum)"'
DIGEST = hashlib.sha256(VALUE.encode()).hexdigest()


def test_a_secret_reaches_the_training_process_and_nothing_else(stack: LocalStack) -> None:
    stack.aws.client("ssm").put_parameter(
        Name="/tether/secrets/HF_TOKEN", Value=VALUE, Type="SecureString", Overwrite=True
    )
    created = api(
        stack, "POST", "/jobs", json=tiny_spec(name="with-secret", run=RUN, secrets=["HF_TOKEN"])
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]

    def ended() -> dict[str, Any] | None:
        stack.tick()
        job: dict[str, Any] = api(stack, "GET", f"/jobs/{job_id}").json()
        return job if job["state"] in ("FINISHED", "FAILED", "CANCELLED") else None

    job = wait_for("the job to end", ended, timeout_s=60)
    assert stack.hosts is not None
    (host,) = stack.hosts.for_job(job_id)
    assert job["state"] == "FINISHED", host.log_text()[-2000:]
    assert job["spec"]["secrets"] == ["HF_TOKEN"]
    assert VALUE not in json.dumps(job)

    # Not in DynamoDB.
    items = stack.aws.client("dynamodb").scan(TableName=stack.table_name())["Items"]
    assert items and VALUE not in json.dumps(items)
    # Not in the Vast instance's environment, nor in the job its agent got over the heartbeat
    # (the names are).
    envs = stack.hosts.received_envs()
    assert envs and all(VALUE not in json.dumps(env) for env in envs.values())
    received = host_received(stack, host)
    assert VALUE not in json.dumps(received)
    assert received.get("TETHER_SECRETS") == "HF_TOKEN"
    # Not in the uploaded logs, where the training command's line arrives scrubbed.
    logs = [k for k in s3_keys(stack, job_id) if "/logs/" in k]
    assert logs
    shipped = "".join((stack.root / "s3" / R2_BUCKET / k).read_text() for k in logs)
    assert "token is [redacted]" in shipped
    assert f"digest {DIGEST}" in shipped  # the training process had the value
    assert VALUE not in shipped


def test_an_unknown_secret_is_refused_at_submit_naming_it(stack: LocalStack) -> None:
    before = stack.aws.client("dynamodb").scan(TableName=stack.table_name())["Count"]
    refused = api(
        stack, "POST", "/jobs", json=tiny_spec(name="no-secret", secrets=["NOT_STORED_ANYWHERE"])
    )
    assert refused.status_code == 400, refused.text
    assert "NOT_STORED_ANYWHERE" in refused.json()["message"]
    assert stack.aws.client("dynamodb").scan(TableName=stack.table_name())["Count"] == before
