"""Job transition events from the jobs API (SNS → an SQS queue, as a subscriber would read them)
and the measures the heartbeat API emits as EMF metrics."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from functions.api import jobs
from functions.domain.job import JobState
from functions.settings import JOB_EVENTS_TOPIC_ARN_ENV
from tests.integration.api.helpers import auth, heartbeat_body, running_job, spec, submit

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def subscribed_queue(topic_arn: str) -> str:
    sqs = boto3.client("sqs")
    queue_url = sqs.create_queue(QueueName="job-events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    boto3.client("sns").subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn)
    return str(queue_url)


def received(queue_url: str) -> list[dict[str, Any]]:
    """Every event in the queue: the SNS envelope's message, with its attributes."""
    sqs = boto3.client("sqs")
    events: list[dict[str, Any]] = []
    while True:
        reply = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
        if not reply.get("Messages"):
            return events
        for message in reply["Messages"]:
            envelope = json.loads(message["Body"])
            event = json.loads(envelope["Message"])
            event["_attributes"] = {
                k: v["Value"] for k, v in envelope.get("MessageAttributes", {}).items()
            }
            events.append(event)
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


@pytest.fixture
def events_topic(api, monkeypatch) -> str:
    arn = str(boto3.client("sns").create_topic(Name="tether-job-events")["TopicArn"])
    monkeypatch.setenv(JOB_EVENTS_TOPIC_ARN_ENV, arn)
    jobs.dependencies.cache_clear()  # a new environment: a new container
    return arn


def test_submit_and_cancel_each_publish_one_transition_event(api, events_topic):
    queue = subscribed_queue(events_topic)
    job_id = submit(api)
    api.clock.now += 5
    assert api.jobs("POST", f"/jobs/{job_id}/cancel").status == 202
    assert api.jobs("POST", f"/jobs/{job_id}/cancel").status == 202  # repeated: no new move

    submitted, cancelled = received(queue)
    assert submitted["type"] == "tether.job.transition"
    assert (submitted["from"], submitted["to"], submitted["generation"]) == (None, "PENDING", 0)
    assert submitted["job_id"] == job_id and submitted["at"] == api.clock.now - 5
    assert cancelled["from"] == "PENDING" and cancelled["to"] == "STOPPING"
    assert cancelled["reason"].startswith("cancelled by ") and cancelled["at"] == api.clock.now
    assert cancelled["_attributes"] == {
        "type": "tether.job.transition",
        "state": "STOPPING",
        "job_id": job_id,
    }


def test_an_idempotent_replay_publishes_nothing_new(api, events_topic):
    queue = subscribed_queue(events_topic)
    headers = {"Idempotency-Key": "retry-1"}
    first = api.jobs("POST", "/jobs", body=spec(), headers=headers)
    again = api.jobs("POST", "/jobs", body=spec(), headers=headers)
    assert first.status == 201 and again.body["job_id"] == first.body["job_id"]
    assert [e["to"] for e in received(queue)] == ["PENDING"]


def test_a_failed_publish_never_fails_the_transition(api, monkeypatch, capsys):
    missing = "arn:aws:sns:us-east-1:123456789012:no-such-topic"
    monkeypatch.setenv(JOB_EVENTS_TOPIC_ARN_ENV, missing)
    jobs.dependencies.cache_clear()  # a new environment: a new container
    job_id = submit(api)
    reply = api.jobs("POST", f"/jobs/{job_id}/cancel")
    assert reply.status == 202 and reply.body["state"] == "STOPPING"
    assert api.store.get_job(job_id).state == JobState.STOPPING
    assert emitted(capsys)["JobEventsPublishFailed"] == [1, 1]  # submit's and cancel's


# --- heartbeat measures ---------------------------------------------------------------------


def emitted(capsys) -> dict[str, list[float]]:
    """Metric name → values, from the EMF documents the handlers printed."""
    found: dict[str, list[float]] = {}
    for line in capsys.readouterr().out.splitlines():
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if not isinstance(document, dict) or "_aws" not in document:
            continue
        for directive in document["_aws"]["CloudWatchMetrics"]:
            assert directive["Dimensions"] == [["service"]]  # bounded: never a job id
            for metric in directive["Metrics"]:
                value = document[metric["Name"]]
                found.setdefault(metric["Name"], []).extend(
                    value if isinstance(value, list) else [value]
                )
    return found


def test_a_replacement_reports_recovery_once_then_its_checkpoint_lag(api, capsys):
    job_id = running_job(api, generation=2, usd_per_hour=0.01)
    # The monitor started the replace of generation 1 at this time (functions/monitor/service).
    api.store.record_incident(
        job_id, at=api.clock.now - 200, reason="dead: no heartbeat", generation=1
    )
    restored = {"step": 400, "generation": 1, "manifest_key": "m-400.json"}
    capsys.readouterr()

    def beat(**body):
        reply = api.heartbeat(
            "POST", "/agent/heartbeat", body=heartbeat_body(job_id, 2, **body), headers=auth()
        )
        assert reply.status == 200, reply.body
        return emitted(capsys)

    # the agent's clock equals ours here: the process started 30 s ago, its first step came 5 s ago
    resumed = {"step": 400, "started_at": api.clock.now - 30, "first_step_at": api.clock.now - 5}
    first = beat(
        step=400, last_checkpoint=restored, restored_checkpoint=restored, resumed=resumed,
        agent_time=api.clock.now,
    )  # fmt: skip
    assert first["RecoveryToTrainingS"] == [195]  # to the first step, not to the process start
    assert "CheckpointUploadLagS" not in first  # the restored checkpoint was not uploaded here
    stored = api.store.get_generation(job_id, 2)
    assert stored.training_started_at == api.clock.now and stored.training_start_step == 400

    api.clock.now += 100  # 200 steps in 100 s; checkpoint 500 reported while at step 600
    uploaded = {"step": 500, "generation": 2, "manifest_key": "m-500.json"}
    second = beat(step=600, last_checkpoint=uploaded, restored_checkpoint=restored)
    assert "RecoveryToTrainingS" not in second
    assert second["CheckpointUploadLagS"] == [pytest.approx(50)]

    api.clock.now += 15
    third = beat(step=630, last_checkpoint=uploaded, restored_checkpoint=restored)
    assert "CheckpointUploadLagS" not in third  # measured once per checkpoint


def test_a_first_generation_reports_no_recovery(api, capsys):
    job_id = running_job(api)
    capsys.readouterr()
    reply = api.heartbeat(
        "POST", "/agent/heartbeat", body=heartbeat_body(job_id, 1), headers=auth()
    )
    assert reply.status == 200
    assert "RecoveryToTrainingS" not in emitted(capsys)
