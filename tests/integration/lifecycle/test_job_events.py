"""The real stack publishes one event per job transition to its JobEvents topic (read here
through an SQS subscription, as a user would), and a replace records its incident: when it was
detected and the work the dead host lost."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from functions.domain.heartbeat_contract import CheckpointRef
from functions.domain.job import JobState
from infra import names
from tests.integration.supervision_harness import Supervised


@pytest.fixture
def queue(sup: Supervised) -> str:
    """A fresh SQS queue subscribed to the stack's JobEvents topic."""
    sqs = sup.aws.client("sqs")
    url = str(sqs.create_queue(QueueName=f"events-{uuid.uuid4().hex[:8]}")["QueueUrl"])
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    topic = sup.deployed.outputs[names.OUTPUT_JOB_EVENTS_TOPIC_ARN]
    sup.aws.client("sns").subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    return url


def transitions(sup: Supervised, queue_url: str, job_id: str) -> list[tuple[Any, ...]]:
    """(from, to, generation) of every event of `job_id` in the queue, in publishing order."""
    sqs = sup.aws.client("sqs")
    events: list[dict[str, Any]] = []
    while reply := sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages"):
        for message in reply:
            envelope = json.loads(message["Body"])
            event = json.loads(envelope["Message"])
            assert envelope["MessageAttributes"]["state"]["Value"] == event["to"]
            events.append(event)
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    mine = sorted((e for e in events if e["job_id"] == job_id), key=lambda e: e["at"])
    return [(e["from"], e["to"], e["generation"]) for e in mine]


def test_provision_and_replace_publish_each_move_and_record_the_incident(
    sup: Supervised, queue: str
) -> None:
    job, first = sup.provisioned()
    # Generation 1 trained from step 0 to 300 in 600 s and last uploaded step 200.
    sup.heartbeat(job.job_id, 1, at=sup.clock() - 600, step=0, training_start_step=0)
    sup.heartbeat(
        job.job_id,
        1,
        step=300,
        last_checkpoint=CheckpointRef(step=200, generation=1, manifest_key="m"),
    )
    sup.clock.advance(1)  # the replace happens at a later time than the rent
    sup.vast.kill(first.instance_id or 0, "offline")

    report = sup.monitor()
    assert sup.wait_for(f"{job.job_id}-replace-g2-a1")["status"] == "SUCCEEDED"

    assert report["work_lost_s"] == [pytest.approx(200)]  # 100 steps at 0.5 steps/s
    assert report["tether_instances"] == 1  # offline, but it exists (and bills storage)
    assert report["heartbeat_age_max_s"] == pytest.approx(1)
    assert 0 < report["budget_used_max_fraction"] < 1
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.RUNNING
    assert found.incident_at == pytest.approx(sup.clock()) and found.incident_generation == 1
    assert found.incident_reason.startswith("dead:")
    view = sup.store.get_job_view(job.job_id)
    assert view is not None
    (dead,) = [e for e in view.events if e.kind == "dead"]
    assert "≥ 100 steps lost since the last checkpoint" in dead.message
    assert dead.data["work_lost_steps"] == 100
    assert transitions(sup, queue, job.job_id) == [
        ("PENDING", "PROVISIONING", 0),
        ("PROVISIONING", "RUNNING", 1),
        ("RUNNING", "REPLACING", 1),
        ("REPLACING", "RUNNING", 2),
    ]


def test_a_stop_publishes_stopping_and_the_end(sup: Supervised, queue: str) -> None:
    job, _ = sup.provisioned()
    transitions(sup, queue, job.job_id)  # drain the provisioning events

    result = sup.run("stop", job.job_id, 1, "cancelled")

    assert result["status"] == "SUCCEEDED"
    assert transitions(sup, queue, job.job_id) == [
        ("RUNNING", "STOPPING", 1),
        ("STOPPING", "CANCELLED", 1),
    ]
