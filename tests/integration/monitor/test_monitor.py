"""The monitor function on the real stack: it judges each job, starts the lifecycle's
transitions, blames hosts, sweeps orphans and keeps its hands off when Vast cannot be read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from functions.domain.agent_env import RESTORE_CHECKPOINTS, S3_WRITE_ACCESS_KEY_ID
from functions.domain.heartbeat_contract import CheckpointRef, GpuProbe
from functions.domain.job import JobState
from functions.domain.job_bootstrap import job_bootstrap
from functions.domain.storage_layout import manifest_key
from tests.integration.supervision_harness import Supervised
from tether_local.vast_sim import BYTES_PER_GB


def test_the_monitor_marks_a_healthy_job_supervised_and_leaves_it_alone(sup: Supervised) -> None:
    job, generation = sup.provisioned()
    sup.clock.advance(60)
    sup.heartbeat(job.job_id, 1, step=5)

    report = sup.monitor()

    assert report["verdicts"] == {"healthy": 1} and report["transitions_started"] == 0
    assert (report["supervised"], report["unsupervised"]) == (1, 0)
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.RUNNING and sup.spent_usd(job.job_id) > 0
    observed = sup.store.get_generation(job.job_id, 1)
    assert observed is not None and observed.progress_step == 5
    assert observed.supervised_at == pytest.approx(sup.clock())
    assert sup.vast.gpu_billing_instances() == [generation.instance_id]


def test_dead_host_is_replaced_with_new_generation_and_credentials(sup: Supervised) -> None:
    job, first = sup.provisioned()
    sup.vast.kill(first.instance_id or 0, "offline")

    report = sup.monitor()
    result = sup.wait_for(f"{job.job_id}-replace-g2-a1")

    assert report["verdicts"] == {"dead": 1} and result["status"] == "SUCCEEDED"
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.RUNNING
    assert found.current_generation == 2
    second = sup.store.get_generation(job.job_id, 2)
    old = sup.store.get_generation(job.job_id, 1)
    assert second is not None and old is not None
    assert sup.vast.instance(first.instance_id or 0) is None  # the old host is destroyed
    assert sup.vast.gpu_billing_instances() == [second.instance_id]
    assert second.credentials is not None and first.credentials is not None
    assert second.credentials.write.access_key_id != first.credentials.write.access_key_id
    assert second.credentials.write.prefix == f"jobs/{job.job_id}/g2/"
    assert old.status == "superseded" and not old.is_current and old.host_blamed
    assert second.machine_id != first.machine_id


def test_hung_host_is_replaced_and_blocklisted(sup: Supervised) -> None:
    job, first = sup.provisioned()
    sup.clock.advance(120)
    sup.heartbeat(job.job_id, 1, gpu=GpuProbe(available=True, responsive=False, unresponsive_s=400))

    report = sup.monitor()
    result = sup.wait_for(f"{job.job_id}-replace-g2-a1")

    assert report["verdicts"] == {"hung": 1} and report["hosts_blamed"] == 1
    assert result["status"] == "SUCCEEDED"
    reputation = sup.store.host_reputations([first.machine_id or 0])
    assert reputation[first.machine_id or 0].hung_failures == 1
    assert reputation[first.machine_id or 0].blame == 1.0  # one job's blame: this job skips it
    second = sup.store.get_generation(job.job_id, 2)
    assert second is not None and second.machine_id != first.machine_id


def test_over_budget_stops_the_job_and_destroys_its_host(sup: Supervised) -> None:
    job, _ = sup.provisioned()
    sup.clock.advance(100 * 3600)  # a hundred hours at any price passes a $1 budget
    sup.heartbeat(job.job_id, 1)

    report = sup.monitor()
    result = sup.wait_for(f"{job.job_id}-stop-a1")

    assert report["verdicts"] == {"over_budget": 1} and result["status"] == "SUCCEEDED"
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.OVER_BUDGET
    assert sup.vast.gpu_billing_instances() == []


def test_overlapping_monitor_runs_rent_exactly_once(sup: Supervised) -> None:
    """Invariant 7: the second run starts the same execution name, so no second execution
    (Step Functions answers a running duplicate idempotently, a finished one with
    ExecutionAlreadyExists)."""
    job, first = sup.provisioned()
    sup.vast.kill(first.instance_id or 0, "exited")

    reports = [sup.monitor(), sup.monitor()]
    sup.wait_for(f"{job.job_id}-replace-g2-a1")
    sup.monitor()  # a third run after the replacement: the new host is starting, left alone

    # The second run sees the job dead again, or already REPLACING: either way no new rent.
    assert reports[0]["verdicts"] == {"dead": 1}
    executions = sup.sfn.list_executions(stateMachineArn=sup.state_machine_arn)["executions"]
    assert sorted(
        e["name"] for e in executions if e["name"].startswith(f"{job.job_id}-replace")
    ) == [f"{job.job_id}-replace-g2-a1"]
    assert sup.rents() == 2  # the first host and its one replacement
    assert len(sup.vast.gpu_billing_instances()) == 1


def rent_outside(sup: Supervised, label: str) -> int:
    """An instance rented on the account by someone other than tether's lifecycle."""
    offer = sup.vast.offers()[0]
    client = httpx.Client(transport=httpx.MockTransport(sup.vast.handle))
    reply = client.put(
        f"https://console.vast.ai/api/v0/asks/{offer['id']}/",
        headers={"Authorization": f"Bearer {sup.vast.api_key}"},
        json={"image": "x", "disk": 10, "label": label, "env": {}, "runtype": "args",
              "args": ["true"]},
    )  # fmt: skip
    instance_id: int = reply.json()["new_contract"]
    return instance_id


def test_orphan_instances_are_destroyed_after_the_grace(sup: Supervised) -> None:
    job, generation = sup.provisioned()
    orphan = rent_outside(sup, "tether:gone-job-0123abcd:g1")

    young = sup.monitor()
    sup.clock.advance(61)
    sup.heartbeat(job.job_id, 1)
    old = sup.monitor()

    assert young["orphans_destroyed"] == 0 and old["orphans_destroyed"] == 1
    assert sup.vast.instance(orphan) is None
    assert sup.vast.gpu_billing_instances() == [generation.instance_id]  # ours is untouched


def test_a_vast_429_storm_kills_no_job(sup: Supervised) -> None:
    job, generation = sup.provisioned()
    sup.vast.kill(generation.instance_id or 0, "offline")  # would be dead, if Vast could be read
    sup.clock.advance(30)
    sup.heartbeat(job.job_id, 1)
    sup.vast.inject("rate_limit", 10_000)

    report = sup.monitor()

    assert report["instances"] is None and report["transitions_started"] == 0
    assert report["verdicts"] == {"healthy": 1}
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.RUNNING


def test_spend_follows_vast_charges_that_name_the_instance_only_in_source(
    sup: Supervised,
) -> None:
    # Every host charges for downloads, so Vast's bill can exceed our estimate.
    sup.vast.add_offers([{**o, "inet_down_cost": 0.02} for o in sup.vast.offers()])
    job, generation = sup.provisioned()
    instance_id = generation.instance_id or 0
    sup.clock.advance(60)
    sup.heartbeat(job.job_id, 1)
    # The image pull: traffic the agent never reports, that only Vast's charges know.
    sup.vast.record_traffic(instance_id, down_bytes=10 * BYTES_PER_GB)

    report = sup.monitor()

    (charge,) = sup.vast.charges()
    assert charge["source"] == f"instance-{instance_id}"
    assert "instance_id" not in charge["metadata"]  # as on Vast: `source` is the only link
    found = sup.store.get_job(job.job_id)
    assert report["verdicts"] == {"healthy": 1} and found is not None
    billed = sup.vast.ledger(instance_id).total_usd
    assert billed > 0.2  # 10 GB at $0.02 and a minute of the host
    assert found.spent_usd == pytest.approx(billed)


def test_one_unreadable_record_neither_stops_the_run_nor_hides_an_orphan(sup: Supervised) -> None:
    """Odd values are read, the one record that cannot be read is skipped and counted, every
    job is still judged, and an orphan whose id arrives as text is still destroyed."""
    healthy_job, healthy = sup.provisioned()
    dying_job, dying = sup.provisioned()
    orphan = rent_outside(sup, "tether:gone-job-0123abcd:g1")
    stranger = rent_outside(sup, "someone else's")
    unreadable = rent_outside(sup, "tether:unread-job-0123abcd:g1")  # listed: in our range
    born = datetime.fromtimestamp(sup.clock(), UTC).isoformat()
    sup.vast.garble(healthy.instance_id or 0, gpu_util="n/a", start_date=born, end_date="")
    sup.vast.garble(orphan, id=str(orphan), dph_total="0.41")
    sup.vast.garble(stranger, label=12345)
    sup.vast.garble(unreadable, id="C.unreadable")
    sup.vast.kill(dying.instance_id or 0, "offline")
    sup.clock.advance(61)
    sup.heartbeat(healthy_job.job_id, 1)

    report = sup.monitor()
    replaced = sup.wait_for(f"{dying_job.job_id}-replace-g2-a1")

    assert report["verdicts"] == {"healthy": 1, "dead": 1}
    # Listed: our label ranges only (the stranger's label is not text in them).
    assert (report["instances"], report["vast_records_skipped"]) == (3, 1)
    assert report["orphans_destroyed"] == 1 and sup.vast.instance(orphan) is None
    assert report["errors"] == 0
    assert sup.vast.instance(stranger) is not None and sup.vast.instance(unreadable) is not None
    assert replaced["status"] == "SUCCEEDED"  # the lifecycle reads the same listing
    found = sup.store.get_job(healthy_job.job_id)
    assert found is not None and found.state == JobState.RUNNING and found.current_generation == 1


def test_the_replacement_host_is_given_the_recorded_checkpoints_newest_first(
    sup: Supervised,
) -> None:
    """What generation 1 recorded reaches generation 2's environment at rent, and nothing g1
    could record after it was superseded does."""
    job, first = sup.provisioned()
    refs = [
        CheckpointRef(
            step=step,
            generation=1,
            manifest_key=manifest_key(job.job_id, step, 1),
            manifest_sha256=f"{step:064x}",
        )
        for step in (200, 100)
    ]
    assert sup.store.record_checkpoints(
        job.job_id, 1, token_hash=first.token_hash, checkpoints=refs, previous_version=0
    )
    sup.vast.kill(first.instance_id or 0, "offline")
    sup.clock.advance(1)
    sup.monitor()
    result = sup.wait_for(f"{job.job_id}-replace-g2-a1")
    assert result["status"] == "SUCCEEDED"
    # superseded now: a late record of g1's is refused
    late = [refs[0].model_copy(update={"step": 300}), *refs]
    assert not sup.store.record_checkpoints(
        job.job_id, 1, token_hash=first.token_hash, checkpoints=late, previous_version=1
    )
    second = sup.store.get_generation(job.job_id, 2)
    assert second is not None and second.instance_id is not None
    # The list and the keys reach the host in its first heartbeat's reply, never its env.
    env = sup.vast.sim_instance(second.instance_id).env
    assert RESTORE_CHECKPOINTS not in env and S3_WRITE_ACCESS_KEY_ID not in env
    stored = sup.store.get_job(job.job_id)
    assert stored is not None
    given = job_bootstrap(stored, second)
    assert given is not None and given.restore == refs
    assert second.credentials is not None
    assert given.storage.write.access_key_id == second.credentials.write.access_key_id


def test_a_job_with_outputs_ends_finished_only_once_its_outputs_are_recorded(
    sup: Supervised,
) -> None:
    job, _ = sup.provisioned(outputs={})
    sup.clock.advance(60)
    finished: dict[str, Any] = {"phase": "finished", "exit_code": 0, "step": 9}
    sup.agent_beat(job.job_id, 1, **finished)  # exit 0, outputs not uploaded (yet)
    assert sup.monitor()["verdicts"] == {"healthy": 1}
    elsewhere = {
        "generation": 1,
        "manifest_key": f"jobs/{job.job_id}/g1/checkpoints/manifest.json",
        "manifest_sha256": "c" * 64,
        "files": 1,
        "bytes": 3,
    }
    sup.agent_beat(job.job_id, 1, **finished, outputs=elsewhere)  # not where the layout says
    assert sup.monitor()["verdicts"] == {"healthy": 1}
    stored = sup.store.get_generation(job.job_id, 1)
    assert stored is not None and stored.heartbeat is not None
    assert stored.heartbeat.outputs is None
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.RUNNING

    outputs = {**elsewhere, "manifest_key": f"jobs/{job.job_id}/g1/outputs/manifest.json"}
    sup.agent_beat(job.job_id, 1, **finished, outputs=outputs)
    report = sup.monitor()
    result = sup.wait_for(f"{job.job_id}-stop-a1")

    assert report["verdicts"] == {"finished": 1} and result["status"] == "SUCCEEDED"
    stored = sup.store.get_generation(job.job_id, 1)
    assert stored is not None and stored.heartbeat is not None
    assert stored.heartbeat.outputs is not None
    assert stored.heartbeat.outputs.manifest_key == f"jobs/{job.job_id}/g1/outputs/manifest.json"
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.FINISHED


def test_a_job_without_outputs_ends_finished_at_exit_0(sup: Supervised) -> None:
    job, _ = sup.provisioned()
    sup.clock.advance(60)
    sup.agent_beat(job.job_id, 1, phase="finished", exit_code=0, step=9)
    report = sup.monitor()
    result = sup.wait_for(f"{job.job_id}-stop-a1")
    assert report["verdicts"] == {"finished": 1} and result["status"] == "SUCCEEDED"
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.FINISHED
