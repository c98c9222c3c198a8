"""The lifecycle state machine as synthesized, executed by moto with the task function in
process and Vast/Cloudflare simulated: provision, offer gone, no capacity, cancel, lost race."""

from __future__ import annotations

from typing import Any, cast

import httpx

from functions.adapters.transitions import TransitionStarter
from functions.api import job_service
from functions.domain.job import JobState, TimelineEvent, TransitionRequest
from functions.domain.labels import instance_label
from functions.domain.reconcile import Observation
from functions.settings import JobsApiSettings
from tests.integration.supervision_harness import Supervised


def test_provision_rents_the_best_offer_and_records_generation_one(sup: Supervised) -> None:
    job, generation = sup.provisioned()

    assert job.state == JobState.RUNNING and job.current_generation == 1
    instance = sup.vast.instance(generation.instance_id or 0)
    assert instance is not None and instance["label"] == instance_label(job.job_id, 1)
    assert sup.vast.gpu_billing_instances() == [generation.instance_id]
    env = sup.vast.sim_instance(generation.instance_id or 0).env
    assert env["TETHER_JOB_ID"] == job.job_id
    assert sup.vast.api_key not in str(env)  # invariant 6: no account key on the host
    creds = generation.credentials
    assert creds is not None
    assert creds.read.prefix == f"jobs/{job.job_id}/"
    read = sup.cloudflare.scope_for(creds.read.access_key_id)
    assert read is not None and read.prefixes == (f"jobs/{job.job_id}/",)
    assert read.permission == "object-read-only"
    write = sup.cloudflare.scope_for(creds.write.access_key_id)
    assert write is not None and write.prefixes == (f"jobs/{job.job_id}/g1/",)
    assert write.permission == "object-read-write"
    # The rent's env fits Vast's limits (each value at most 256 characters, 32 KB in all): the
    # keys (R2-sized session tokens) are not in it; the agent gets them over its heartbeat.
    assert len(creds.read.session_token) >= 550
    assert max(len(value) for value in env.values()) <= 256
    assert sum(len(k) + len(v) + 2 for k, v in env.items()) <= 32 * 1024
    assert creds.read.access_key_id not in str(env) and creds.write.session_token not in str(env)
    assert generation.prices["gpu_usd_per_hour"] > 0 and generation.usd_per_hour > 0
    assert {"submitted", "provisioning", "rented"} <= set(sup.events(job.job_id))


def test_a_job_that_asks_for_ssh_is_rented_in_vasts_ssh_launch_mode(sup: Supervised) -> None:
    """`ssh: true`: Vast's entrypoint (sshd with the account's keys, then the onstart script);
    otherwise the image's own entrypoint runs the script as its command (`tether ssh` says
    there is no SSH server there)."""
    _, plain = sup.provisioned()
    _, reachable = sup.provisioned(name="reachable", ssh=True)

    rented = sup.vast.sim_instance(plain.instance_id or 0)
    assert rented.runtype == "args" and rented.args[:2] == ["bash", "-c"]
    rented = sup.vast.sim_instance(reachable.instance_id or 0)
    assert rented.runtype == "ssh_direc ssh_proxy" and rented.args == []
    assert rented.onstart.startswith("#!/bin/sh")  # Vast runs the script itself
    record = sup.vast.instance(reachable.instance_id or 0)
    assert record is not None and record["image_runtype"] == "ssh_direc ssh_proxy"


def test_offer_gone_moves_on_to_the_next_offer(sup: Supervised) -> None:
    sup.vast.inject("offer_gone", 2)
    job, generation = sup.provisioned()

    assert job.state == JobState.RUNNING
    assert sup.events(job.job_id).count("offer_gone") == 2
    assert sup.rents() == 3
    assert sup.vast.gpu_billing_instances() == [generation.instance_id]


def test_no_capacity_waits_with_backoff_then_fails_at_the_provision_timeout(
    sup: Supervised,
) -> None:
    job = sup.submit(resources={"gpu_names": ["NoSuchGPU"]})
    result = sup.run("provision", job.job_id, 1, "submitted")

    assert result["status"] == "SUCCEEDED"
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.FAILED
    assert "provision timeout" in found.state_reason
    assert "no offer" in found.state_reason
    waits = [
        e
        for e in sup.aws.execution_history(result["executionArn"])
        if e["type"] == "WaitStateEntered"
    ]
    assert len(waits) >= 4  # 60 + 120 + 240 + 480 + 600 + … s of back-off before an hour
    assert sup.events(job.job_id).count("no_capacity") == len(waits) + 1
    assert sup.rents() == 0


def test_cancel_during_provisioning_ends_cancelled_and_nothing_bills(sup: Supervised) -> None:
    job = sup.submit(resources={"gpu_names": ["NoSuchGPU"]})
    provision_arn = sup.start("provision", job.job_id, 1, "submitted")
    deps = job_service.JobsDeps(
        settings=cast(JobsApiSettings, None),  # cancel reads no setting
        store=sup.store,
        transitions=TransitionStarter(sup.state_machine_arn, client=sup.sfn),
        clock=sup.clock,
    )
    job_service.cancel_job(deps, job.job_id, identity="tester")
    stopped = sup.wait_for(f"{job.job_id}-stop-a1")
    provisioned = sup.aws.wait_execution(provision_arn, timeout_s=60)

    assert stopped["status"] == "SUCCEEDED" and provisioned["status"] == "SUCCEEDED"
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.CANCELLED
    assert sup.vast.gpu_billing_instances() == []


def test_a_rent_that_loses_the_race_destroys_what_it_rented(sup: Supervised) -> None:
    """A cancel lands while the rent is in flight: the conditional record fails, and the
    instance just rented is destroyed (invariant 1)."""
    job = sup.submit()
    rented: list[int] = []

    def cancel_meanwhile(instance: Any) -> None:
        rented.append(instance.id)
        sup.store.transition_job(
            job.job_id,
            JobState.STOPPING,
            expected=[JobState.PROVISIONING],
            now=sup.clock(),
            event=TimelineEvent(
                job_id=job.job_id, at=sup.clock(), kind="cancel_requested", message="test"
            ),
            stop_reason="cancelled",
        )

    sup.vast.on_rent = cancel_meanwhile
    result = sup.run("provision", job.job_id, 1, "submitted")

    assert result["status"] == "SUCCEEDED"
    assert len(rented) == 1 and sup.vast.instance(rented[0]) is None
    assert sup.vast.gpu_billing_instances() == []
    assert "lost_race" in sup.events(job.job_id)
    assert sup.store.get_generation(job.job_id, 1) is None


def test_a_repeated_provision_never_rents_twice(sup: Supervised) -> None:
    job, generation = sup.provisioned()
    again = sup.aws.wait_execution(
        sup.aws.start_execution(
            sup.state_machine_arn,
            {"action": "provision", "job_id": job.job_id, "generation": 1, "reason": "again"},
            name="provision-again",
        )
    )
    assert again["status"] == "SUCCEEDED"
    assert sup.rents() == 1
    assert sup.vast.gpu_billing_instances() == [generation.instance_id]


def test_provision_reads_around_odd_records_and_needs_no_instance_api_key(
    sup: Supervised,
) -> None:
    """Vast's answers as they really come: an instance on the account whose record cannot be
    read, one with odd values, an offer without a price, and a rent reply without
    `instance_api_key`. The provision (and a stop's destroy) still goes through."""
    client = httpx.Client(transport=httpx.MockTransport(sup.vast.handle))
    rent_body = {"image": "x", "disk": 10, "label": "someone else's", "env": {}}
    headers = {"Authorization": f"Bearer {sup.vast.api_key}"}
    for offer in sup.vast.offers()[:2]:
        client.put(f"https://vast.sim/api/v0/asks/{offer['id']}/", headers=headers, json=rent_body)
    first, second = sorted(i["id"] for i in sup.vast.instances())
    sup.vast.garble(first, id="C.unreadable")
    sup.vast.garble(second, gpu_util="n/a", label=12345, start_date="2026-09-09T08:53:08Z")
    unpriced = {**sup.vast.offers()[-1], "id": 99_999_999, "dph_base": "n/a", "storage_cost": 0}
    sup.vast.add_offers([unpriced])
    sup.vast.inject("no_instance_api_key")

    job, generation = sup.provisioned()
    stopped = sup.run("stop", job.job_id, 1, "cancelled")

    assert generation.instance_id is not None and generation.offer_id != 99_999_999
    assert stopped["status"] == "SUCCEEDED"
    assert sup.vast.instance(generation.instance_id) is None
    assert sup.vast.instance(first) is not None and sup.vast.instance(second) is not None


def test_an_ended_jobs_item_gets_the_spend_as_last_measured(sup: Supervised) -> None:
    """The monitor writes the job item's spend only in steps (the exact figure goes on the
    generation): the stop's `finish` writes the last measured figure onto the ended job, which
    is what lists show from then on."""
    job, _ = sup.provisioned()
    seen = Observation(spend_usd=0.31, job_spent_usd=0.31)
    assert sup.store.record_supervised(job.job_id, 1, seen, at=sup.clock())

    stopped = sup.run("stop", job.job_id, 1, "cancelled")

    found = sup.store.get_job(job.job_id)
    assert stopped["status"] == "SUCCEEDED" and found is not None
    assert (found.state, found.spent_usd) == (JobState.CANCELLED, 0.31)


def test_a_transition_started_twice_is_started_once(sup: Supervised) -> None:
    """Step Functions answers a start with the name and input of a RUNNING execution with
    that execution: two overlapping monitor runs must not both count (and record) it."""
    job = sup.submit(resources={"gpu_names": ["NoSuchGPU"]})  # waits for capacity: RUNNING
    starter = TransitionStarter(sup.state_machine_arn, client=sup.sfn)
    request = TransitionRequest(action="provision", job_id=job.job_id, generation=1, reason="x")

    assert starter.start(request) is True
    assert starter.start(request) is False
    assert sup.wait_for(request.execution_name)["status"] == "SUCCEEDED"


def test_each_host_gets_its_checkpoint_interval_recomputed_from_the_jobs_measurements(
    sup: Supervised,
) -> None:
    """Generation 1 starts with the planner's interval; its agent reports a 300 s upload and
    its host dies; generation 2 starts with the interval recomputed from both (tiny-cpu: one
    start-up is ~2 min, under the 5 min a save now takes, so the interval is the save: 300 s)."""
    job, first = sup.provisioned()
    first_env = sup.vast.sim_instance(first.instance_id or 0).env
    assert 60 <= int(first_env["TETHER_CHECKPOINT_INTERVAL_S"]) < 300
    sup.clock.advance(60)
    sup.agent_beat(job.job_id, 1, last_upload_s=300.0)  # through the real heartbeat API
    stored = sup.store.get_generation(job.job_id, 1)
    assert stored is not None and stored.heartbeat is not None
    assert stored.heartbeat.last_upload_s == 300.0
    sup.clock.advance(240)  # silent: dead

    assert sup.monitor()["verdicts"] == {"dead": 1}
    assert sup.wait_for(f"{job.job_id}-replace-g2-a1")["status"] == "SUCCEEDED"

    second = sup.store.get_generation(job.job_id, 2)
    assert second is not None and second.instance_id is not None
    assert sup.vast.sim_instance(second.instance_id).env["TETHER_CHECKPOINT_INTERVAL_S"] == "300"
    view = sup.store.get_job_view(job.job_id)
    assert view is not None
    rented = [e.message for e in view.events if e.kind == "rented"]
    assert len(rented) == 2
    assert "Young/Daly from the offer" in rented[0]
    assert "checkpoint every 5.0 min" in rented[1] and "upload 300 s measured" in rented[1]
    assert "1 host failure(s)" in rented[1]


def test_the_lifecycle_lists_only_the_jobs_own_labels_never_the_whole_account(
    sup: Supervised,
) -> None:
    """Rent and stop on an account with other hosts: each Vast listing the lifecycle makes is
    filtered to the job's labels (at 10,000 hosts a whole-account listing is 400 pages), and the
    job's host is destroyed all the same."""
    job, generation = sup.provisioned()
    deps = job_service.JobsDeps(
        settings=cast(JobsApiSettings, None), store=sup.store,
        transitions=TransitionStarter(sup.state_machine_arn, client=sup.sfn), clock=sup.clock,
    )  # fmt: skip
    job_service.cancel_job(deps, job.job_id, identity="tester")
    stopped = sup.wait_for(f"{job.job_id}-stop-a1")

    assert stopped["status"] == "SUCCEEDED"
    assert sup.vast.instance(generation.instance_id or 0) is None
    listings = [url for method, url in sup.vast.request_log if "/v1/instances" in url]
    assert listings and all("select_filters" in url and "label" in url for url in listings)
