"""The replacement policy (caps, host blame) and the hung rules on real heartbeats, through
the real monitor, heartbeat and lifecycle: per-cause caps end the job FAILED with the reason
and a job event; a host's blame is scoped to the job and decays; an image that cannot be pulled
is the job's fault; many jobs silent together while Vast says their hosts run are a fault of
ours, not theirs: the dead verdicts are held and counted for the alarm."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.job import JobState
from infra import names
from tests.integration.supervision_harness import Supervised

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")

PULL_DENIED = (
    "Error response from daemon: pull access denied for acme/private-trainer, repository does "
    "not exist or may require 'docker login': denied: requested access to the resource is denied"
)


def job_events(sup: Supervised) -> tuple[Any, str]:
    """An SQS queue subscribed to the stack's JobEvents topic (as a user would)."""
    sqs = sup.aws.client("sqs")
    url = str(sqs.create_queue(QueueName=f"events-{uuid.uuid4().hex[:8]}")["QueueUrl"])
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    topic = sup.deployed.outputs[names.OUTPUT_JOB_EVENTS_TOPIC_ARN]
    sup.aws.client("sns").subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    return sqs, url


def received(sqs: Any, url: str, job_id: str) -> list[dict[str, Any]]:
    events = []
    while reply := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        for message in reply:
            event = json.loads(json.loads(message["Body"])["Message"])
            if event["job_id"] == job_id:
                events.append(event)
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return sorted(events, key=lambda e: e["at"])


def test_a_job_whose_hosts_keep_dying_fails_at_its_cap_with_the_reason_and_an_event(
    sup: Supervised,
) -> None:
    """Reproduction: replacements were bounded only by the budget. With
    `max_replacements_dead: 1`, the first dead host is replaced and the second ends the job
    FAILED, with the reason on the job and in its event; both hosts are blamed (this job never
    goes back to either), neither is banned for other jobs by this one job's blame."""
    sqs, queue = job_events(sup)
    job, first = sup.provisioned(policy={"max_replacements_dead": 1})
    sup.vast.kill(first.instance_id or 0, "offline")
    sup.monitor()
    assert sup.wait_for(f"{job.job_id}-replace-g2-a1")["status"] == "SUCCEEDED"
    second = sup.store.get_generation(job.job_id, 2)
    assert second is not None
    sup.vast.kill(second.instance_id or 0, "offline")

    report = sup.monitor()
    stopped = sup.wait_for(f"{job.job_id}-stop-a1")

    assert report["verdicts"] == {"failed": 1} and stopped["status"] == "SUCCEEDED"
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.FAILED
    assert "policy.max_replacements_dead is 1" in found.state_reason
    failed = [e for e in received(sqs, queue, job.job_id) if e["to"] == "FAILED"]
    assert len(failed) == 1 and "max_replacements_dead" in failed[0]["reason"]
    machines = [first.machine_id or 0, second.machine_id or 0]
    reputations = sup.store.host_reputations(machines)
    assert [reputations[m].dead_failures for m in machines] == [1, 1]
    assert [reputations[m].blame for m in machines] == [1.0, 1.0]
    assert sup.vast.gpu_billing_instances() == []


def test_an_image_that_cannot_be_pulled_fails_the_job_and_blames_no_host(
    sup: Supervised,
) -> None:
    """Reproduction: Vast keeps an instance whose image cannot be pulled `loading`, with the
    pull error in its status message; tether waited out the startup timeout, called the host
    dead, blamed it and rented another, which failed the same way. The image is the job's
    fault: the job ends FAILED with Vast's message, and no host is blamed."""
    job, generation = sup.provisioned()
    instance_id = generation.instance_id or 0
    sup.vast.fail_pull(instance_id, PULL_DENIED)
    sup.clock.advance(60)

    report = sup.monitor()
    sup.wait_for(f"{job.job_id}-stop-a1")

    assert report["verdicts"] == {"failed": 1} and report["hosts_blamed"] == 0
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.FAILED
    assert "the image cannot be pulled" in found.state_reason
    assert "pull access denied" in found.state_reason
    assert sup.store.host_reputations([generation.machine_id or 0]) == {}
    assert sup.rents() == 1 and sup.vast.instance(instance_id) is None


def test_many_jobs_silent_together_while_vast_says_they_run_are_held_not_replaced(
    sup: Supervised,
) -> None:
    """Reproduction: heartbeats of every job stop at once (the API is unreachable, or flooded)
    while Vast says every host runs. Each job was judged dead on its own: every host replaced,
    every machine blamed. Now the dead verdicts are held and counted for the alarm; nothing is
    rented or blamed. When heartbeats come back, the jobs are healthy again."""
    jobs = [sup.provisioned()[0] for _ in range(3)]
    sup.clock.advance(60)
    for job in jobs:
        sup.heartbeat(job.job_id, 1)
    sup.monitor()
    sup.clock.advance(240)  # past every job's heartbeat timeout (180 s)

    report = sup.monitor()

    assert report["transitions_started"] == 0 and report["hosts_blamed"] == 0
    assert sup.rents() == 3
    assert report["verdicts"] == {"dead": 3} and report["held"] == 3
    for job in jobs:
        found = sup.store.get_job(job.job_id)
        assert found is not None and found.state == JobState.RUNNING
    sup.clock.advance(30)
    for job in jobs:
        sup.heartbeat(job.job_id, 1)
    assert sup.monitor()["verdicts"] == {"healthy": 3}


def test_one_dead_job_among_running_ones_is_still_replaced(sup: Supervised) -> None:
    """The hold needs many silent jobs: one silent host among healthy ones is a dead host."""
    jobs = [sup.provisioned()[0] for _ in range(3)]
    sup.clock.advance(60)
    for job in jobs:
        sup.heartbeat(job.job_id, 1)
    sup.clock.advance(240)
    for job in jobs[1:]:
        sup.heartbeat(job.job_id, 1)

    report = sup.monitor()

    assert report["verdicts"] == {"dead": 1, "healthy": 2} and report["held"] == 0
    assert sup.wait_for(f"{jobs[0].job_id}-replace-g2-a1")["status"] == "SUCCEEDED"


def test_a_gpu_busy_through_the_window_is_not_hung_by_one_idle_sample(sup: Supervised) -> None:
    """Reproduction: "GPU idle" was judged from the last heartbeat only, so a job that
    made no step for 30 min while its GPU was busy (a long evaluation, a slow first step) was
    replaced as hung by one idle sample. Idleness is judged over the whole window now."""
    job, _ = sup.provisioned()
    busy = GpuProbe(available=True, utilization_pct=95.0)
    idle = GpuProbe(available=True, utilization_pct=1.0)
    sup.clock.advance(60)
    sup.heartbeat(job.job_id, 1, step=7, training_start_step=7, gpu=busy)
    sup.monitor()
    for _ in range(25):  # 25 min at step 7, GPU busy
        sup.clock.advance(60)
        sup.heartbeat(job.job_id, 1, step=7, gpu=busy)
        sup.monitor()
    for _ in range(6):  # then idle: 31 min without a step, 6 of them idle
        sup.clock.advance(60)
        sup.heartbeat(job.job_id, 1, step=7, gpu=idle)
        report = sup.monitor()
        assert report["verdicts"] == {"healthy": 1}
    for _ in range(25):  # idle through the whole 30 min window: hung
        sup.clock.advance(60)
        sup.heartbeat(job.job_id, 1, step=7, gpu=idle)
        report = sup.monitor()
        if report["verdicts"] != {"healthy": 1}:
            break
    assert report["verdicts"] == {"hung": 1}


def test_the_no_progress_clock_starts_with_training_not_with_the_rent(sup: Supervised) -> None:
    """Reproduction: a job that restored for 15 min and then trained with an idle GPU
    and no progress file (no step) was hung 15 minutes into training: the no-progress clock
    (30 min) started at rent time. It starts at the first training heartbeat."""
    job, _ = sup.provisioned()
    idle = GpuProbe(available=True, utilization_pct=0.0)
    for _ in range(15):
        sup.clock.advance(60)
        sup.heartbeat(job.job_id, 1, phase="restoring", step=None, gpu=idle)
        sup.monitor()
    sup.clock.advance(60)
    sup.heartbeat(job.job_id, 1, step=None, training_start_step=0, gpu=idle)
    verdicts = []
    for _ in range(30):
        sup.clock.advance(60)
        sup.heartbeat(job.job_id, 1, step=None, gpu=idle)
        verdicts.append(sup.monitor()["verdicts"])
    assert verdicts[:29] == [{"healthy": 1}] * 29  # not before 30 min after training began…
    assert verdicts[29] == {"hung": 1}  # …but then


def test_a_hosts_blame_counts_each_failure_once_and_decays(sup: Supervised) -> None:
    """Overlapping monitor runs blame one failure once; a later blame adds to what is left of
    the earlier one after a day (half)."""
    day = 86_400.0
    now = sup.clock()
    assert sup.store.record_host_failure(77, failure="a-0123abcd:g1", kind="dead", now=now)
    again = sup.store.record_host_failure(77, failure="a-0123abcd:g1", kind="dead", now=now + 5)
    assert not again
    assert sup.store.record_host_failure(77, failure="b-0123abcd:g3", kind="hung", now=now + day)
    reputation = sup.store.host_reputations([77])[77]
    assert (reputation.failures, reputation.dead_failures, reputation.hung_failures) == (2, 1, 1)
    assert (reputation.blame, reputation.blame_at) == (1.5, now + day)
