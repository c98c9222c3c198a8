"""User secrets through the real handlers on moto's SSM: checked at submit, delivered in the
heartbeat reply to the current generation only, never stored in the table or shown in a view."""

from __future__ import annotations

import json

import boto3
import pytest

from functions.domain.agent_token import hash_token
from functions.domain.job import Generation, JobState, TimelineEvent
from tests.integration.api.helpers import TOKEN, auth, heartbeat_body, replace, running_job, spec

URL = "/agent/heartbeat"
HF_VALUE = "hf_s3cr3tValueThatMustNeverBeStored123"
WANDB_VALUE = "wandb-value-0123456789"

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def store_secret(name: str, value: str) -> None:
    boto3.client("ssm").put_parameter(
        Name=f"/tether/secrets/{name}", Value=value, Type="SecureString", Overwrite=True
    )


def beat(api, job_id, token=TOKEN, **body):
    return api.heartbeat("POST", URL, body=heartbeat_body(job_id, **body), headers=auth(token))


def test_submit_refuses_unknown_secrets_naming_them_and_stores_nothing(api):
    store_secret("HF_TOKEN", HF_VALUE)
    before = api.items()
    reply = api.jobs("POST", "/jobs", body=spec(secrets=["HF_TOKEN", "WANDB_KEY", "OTHER"]))
    assert reply.status == 400
    assert "WANDB_KEY, OTHER" in reply.body["message"]
    paths = {d["path"]: d["reason"] for d in reply.body["details"]}
    assert paths == {"secrets[1]": "WANDB_KEY is not stored", "secrets[2]": "OTHER is not stored"}
    assert api.items() == before
    assert api.executions() == []


def test_submit_refuses_a_bad_secret_name(api):
    reply = api.jobs("POST", "/jobs", body=spec(secrets=["hf_token"]))
    assert reply.status == 400
    assert reply.body["details"][0]["path"].startswith("secrets")
    assert api.items() == []


def test_the_current_generation_gets_the_values_only_when_it_asks(api):
    store_secret("HF_TOKEN", HF_VALUE)
    store_secret("WANDB_KEY", WANDB_VALUE)
    job_id = running_job(api, secrets=["HF_TOKEN", "WANDB_KEY"])
    plain = beat(api, job_id)
    assert plain.status == 200 and plain.body["secrets"] is None
    asked = beat(api, job_id, wants_secrets=True)
    assert asked.status == 200
    assert asked.body["command"] == "continue"
    assert asked.body["secrets"] == {
        "values": {"HF_TOKEN": HF_VALUE, "WANDB_KEY": WANDB_VALUE},
        "missing": [],
    }
    # Neither the table nor the job view holds a value; the view names the secrets.
    assert HF_VALUE not in json.dumps(api.items())
    view = api.jobs("GET", f"/jobs/{job_id}")
    assert view.status == 200
    assert HF_VALUE not in json.dumps(view.body) and WANDB_VALUE not in json.dumps(view.body)
    assert view.body["spec"]["secrets"] == ["HF_TOKEN", "WANDB_KEY"]


def test_a_secret_deleted_after_submit_comes_back_as_missing(api):
    store_secret("HF_TOKEN", HF_VALUE)
    job_id = running_job(api, secrets=["HF_TOKEN"])
    boto3.client("ssm").delete_parameter(Name="/tether/secrets/HF_TOKEN")
    reply = beat(api, job_id, wants_secrets=True)
    assert reply.body["secrets"] == {"values": {}, "missing": ["HF_TOKEN"]}


def test_a_superseded_generation_gets_nothing(api):
    store_secret("HF_TOKEN", HF_VALUE)
    job_id = running_job(api, secrets=["HF_TOKEN"])
    replace(api, job_id, 1)
    assert api.store.record_generation(
        Generation(job_id=job_id, generation=2, token_hash=hash_token("new-token"), usd_per_hour=1),
        expected=[JobState.REPLACING],
        now=api.clock.now,
        event=TimelineEvent(job_id=job_id, at=api.clock.now, kind="rented", message="g2"),
    )
    old = beat(api, job_id, wants_secrets=True)
    assert old.status == 200
    assert old.body["command"] == "superseded"
    assert old.body["secrets"] is None
    assert HF_VALUE not in json.dumps(old.body)
    current = beat(api, job_id, token="new-token", generation=2, wants_secrets=True)
    assert current.body["secrets"]["values"] == {"HF_TOKEN": HF_VALUE}


def test_a_wrong_token_gets_401_and_no_values(api):
    store_secret("HF_TOKEN", HF_VALUE)
    job_id = running_job(api, secrets=["HF_TOKEN"])
    reply = beat(api, job_id, token="tok-" + "b" * 40, wants_secrets=True)
    assert reply.status == 401
    assert HF_VALUE not in json.dumps(reply.body)


def test_a_generation_told_to_stop_gets_no_values(api):
    store_secret("HF_TOKEN", HF_VALUE)
    job_id = running_job(api, secrets=["HF_TOKEN"])
    assert api.jobs("POST", f"/jobs/{job_id}/cancel").status == 202
    reply = beat(api, job_id, wants_secrets=True)
    assert reply.status == 200
    assert reply.body["command"] == "stop"
    assert reply.body["secrets"] is None
