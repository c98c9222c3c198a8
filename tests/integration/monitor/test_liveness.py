"""Liveness that proves work was done (docs/architecture.md#lease): a lease is renewed only while a
monitor run completed that job's evaluation, so a monitor that fails after it starts — a Secrets
Manager error, a job item that no longer validates, one job's failing write — renews nothing for the
jobs it did not finish, and stops no other job's supervision.

Each test drives the real handlers (monitor, heartbeat, lifecycle) on the synthesized stack; the
agent's side is played by the test: it heartbeats through the heartbeat function while its lease
lasts and stops its own instance when the lease runs out (its dead-man switch)."""

from __future__ import annotations

import httpx
import pytest

from functions.adapters import factory
from functions.adapters.store import JobStore
from functions.adapters.transitions import TransitionStarter
from functions.domain.job import JobState
from functions.monitor.service import MonitorDeps, run_monitor
from infra import names
from tests.integration.supervision_harness import Supervised
from tether_local.aws.local_aws import LambdaInvocationError

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def test_a_monitor_failing_on_secrets_manager_renews_no_lease_and_the_money_stops_within_it(
    sup: Supervised,
) -> None:
    """Reproduction: the monitor cannot read the Vast key from Secrets Manager for 10 h. Before,
    it wrote its pulse and then failed every run: heartbeats kept renewing the lease, spend was
    never updated, and Vast billed past the $0.20 budget. Now no run completes the job's
    evaluation, so no heartbeat renews its lease, the host stops itself when the lease it had
    runs out, and spend stays within the budget."""
    job, generation = sup.provisioned(budget_usd=0.2)
    instance_id = generation.instance_id or 0
    sup.clock.advance(60)
    sup.monitor()  # a healthy run: supervised now
    first = sup.agent_beat(job.job_id, 1, step=10)
    lease = first["lease_expires_at"]
    price = generation.usd_per_hour
    stored = sup.store.get_job(job.job_id)
    assert stored is not None
    remaining_h = (0.2 - stored.spent_usd) / price
    assert lease == pytest.approx(sup.clock() + remaining_h * 3600)  # the budget's lease

    ssm = sup.aws.client("ssm")
    key = ssm.get_parameter(Name=names.VAST_KEY_PARAMETER, WithDecryption=True)["Parameter"]
    ssm.delete_parameter(Name=names.VAST_KEY_PARAMETER)
    sup.cold_start()  # new containers read the secret again, and cannot
    leases, failed_runs, stopped_at = set(), 0, None
    try:
        for _ in range(10 * 12):  # ten hours, a monitor run and a heartbeat every 5 minutes
            sup.clock.advance(300)
            with pytest.raises(LambdaInvocationError):
                sup.monitor()
            failed_runs += 1
            if stopped_at is None and sup.clock() < lease:
                leases.add(sup.agent_beat(job.job_id, 1, step=10)["lease_expires_at"])
            elif stopped_at is None:
                sup.stop_instance(instance_id)  # the dead-man switch: the lease ran out
                stopped_at = sup.clock()
    finally:
        ssm.put_parameter(Name=names.VAST_KEY_PARAMETER, Value=key["Value"], Type="SecureString")

    assert failed_runs == 120 and leases == {lease}  # never renewed while unsupervised
    assert stopped_at is not None and stopped_at - lease <= 300
    ledger = sup.vast.ledger(instance_id)
    assert ledger.gpu_seconds <= lease - ledger.opened_at + 300
    storage = ledger.storage_usd  # the stopped disk bills on until someone destroys it
    assert ledger.total_usd - storage <= 0.2 + price * 300 / 3600


def test_a_job_item_that_no_longer_validates_stops_no_other_jobs_supervision(
    sup: Supervised,
) -> None:
    """Reproduction: one active job item that no longer validates (written by another version,
    edited by hand) made every monitor run fail, so no job was judged, however far over its
    budget. Now that job alone is left unsupervised (and counted), the others are judged."""
    broken, _ = sup.provisioned()
    job, _ = sup.provisioned(budget_usd=0.05)
    sup.store.client.update_item(
        TableName=sup.table,
        Key={"pk": {"S": f"JOB#{broken.job_id}"}, "sk": {"S": "JOB"}},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":s": {"S": "SOMETHING_NEWER"}},
    )
    sup.clock.advance(10 * 3600)  # far past $0.05 at any price
    sup.heartbeat(job.job_id, 1)

    report = sup.monitor()
    result = sup.wait_for(f"{job.job_id}-stop-a1")

    assert (report["jobs"], report["supervised"], report["unsupervised"]) == (2, 1, 1)
    assert report["verdicts"] == {"over_budget": 1} and result["status"] == "SUCCEEDED"
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.OVER_BUDGET


def test_one_jobs_failing_write_renews_nothing_for_it_and_everything_for_the_others(
    sup: Supervised, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reproduction: an error while applying one job's decision was logged and swallowed, and
    that job's lease went on being renewed. Now its evaluation is not complete, so its
    heartbeat keeps the old lease; the other job's is renewed."""
    failing, _ = sup.provisioned()
    healthy, _ = sup.provisioned()
    sup.clock.advance(60)
    sup.monitor()
    before = sup.agent_beat(failing.job_id, 1)["lease_expires_at"]
    real = JobStore.record_spend

    def record_spend(self: JobStore, job_id: str, spent_usd: float) -> bool:
        if job_id == failing.job_id:
            raise RuntimeError("item too large")  # any write of this job's evaluation
        return real(self, job_id, spent_usd)

    monkeypatch.setattr(JobStore, "record_spend", record_spend)
    sup.clock.advance(300)  # past the supervision's freshness (180 s)
    report = sup.monitor()
    sup.clock.advance(30)

    assert sup.agent_beat(failing.job_id, 1)["lease_expires_at"] == before
    renewed = sup.agent_beat(healthy.job_id, 1)
    assert renewed["lease_expires_at"] > before + 300 and renewed["reason"] is None
    assert (report["supervised"], report["unsupervised"], report["errors"]) == (1, 1, 1)


def monitor_deps(sup: Supervised) -> MonitorDeps:
    """The monitor's dependencies as its handler builds them, on this test's stack."""
    return MonitorDeps(
        store=sup.store,
        transitions=TransitionStarter(sup.state_machine_arn, client=sup.sfn),
        vast=lambda: factory.vast(sup.secret_arn("vast"), "https://console.vast.ai"),
        cloudflare=lambda: factory.cloudflare(
            sup.secret_arn("cloudflare"), "https://api.cloudflare.com/client/v4"
        ),
        clock=sup.clock,
    )


def test_a_run_that_runs_out_of_time_marks_only_the_jobs_it_finished(sup: Supervised) -> None:
    """The monitor's Lambda ends at its timeout, half way or not: a job whose evaluation did
    not start in time is not marked supervised (its lease is not renewed), the others are."""
    jobs = [sup.provisioned()[0] for _ in range(3)]
    sup.clock.advance(60)
    for job in jobs:
        sup.heartbeat(job.job_id, 1)
    left = iter([60.0, 40.0, 20.0, 0.5])  # the run's Vast calls, then each job's evaluation

    report = run_monitor(monitor_deps(sup), remaining_s=lambda: next(left))

    assert (report.supervised, report.unsupervised) == (2, 1)
    marks = [sup.store.get_generation(j.job_id, 1) for j in jobs]
    assert sorted(str(m.supervised_at if m else None) for m in marks) == sorted(
        [str(sup.clock()), str(sup.clock()), "None"]
    )


def test_a_slow_vast_is_given_up_on_in_time_and_the_jobs_are_still_supervised(
    sup: Supervised, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Vast answers every request too late: the run gives up on it within its budget (no
    instance rule, no orphan swept this run), judges what it can, and finishes every job.
    (A budget the unread charges' traffic bound cannot reach in a minute: a $1 job on a fast,
    traffic-priced host is stopped on that bound, docs/architecture.md#traffic-spend.)"""
    job, generation = sup.provisioned(budget_usd=100)
    sup.clock.advance(60)
    sup.heartbeat(job.job_id, 1)
    sup.vast.kill(generation.instance_id or 0, "offline")  # would be dead, were Vast readable

    def too_late(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("Vast is slow", request=request)

    monkeypatch.setattr(sup.vast, "handle", too_late)
    sup.cold_start()
    report = run_monitor(monitor_deps(sup), remaining_s=lambda: 25.0)  # 5 s for Vast

    assert report.instances is None and report.verdicts == {"healthy": 1}
    assert (report.supervised, report.unsupervised, report.transitions_started) == (1, 0, 0)
