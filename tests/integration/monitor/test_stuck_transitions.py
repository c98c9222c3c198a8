"""Transitions that always end, on the real stack: a stop that fails during a Vast outage is
retried as a new attempt, and a stopping job's host is destroyed within a bounded number of
monitor intervals once Vast answers again, even while the stop's executions keep failing.

Reproduction: a Vast 502 outage during a stop failed the execution; an hour after
Vast recovered the job was still STOPPING and its instance billing ($0.27 of a $0.20 budget).
"""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.job import JobState
from functions.lifecycle import service as lifecycle_service
from tests.integration.supervision_harness import Supervised

INTERVAL_S = 60  # the monitor's interval (its default; the stack sets the same)
BUDGET_USD = 0.2
HEARTBEAT_TIMEOUT_S = 180  # the job spec's default


def interval(sup: Supervised, job_id: str) -> dict[str, Any]:
    """One monitor interval passes and the monitor runs; whatever it started runs to its end."""
    sup.clock.advance(INTERVAL_S)
    report = sup.monitor()
    sup.settle(job_id)
    return report


def test_a_stop_failed_by_a_vast_outage_is_retried_and_the_host_destroyed_after_recovery(
    sup: Supervised,
) -> None:
    job, generation = sup.provisioned(budget_usd=BUDGET_USD)
    instance = generation.instance_id or 0
    sup.clock.advance(INTERVAL_S)
    sup.heartbeat(job.job_id, 1, step=5)

    sup.vast.outage()
    sup.cancel(job.job_id)
    first = sup.wait_for(f"{job.job_id}-stop-a1")

    assert first["status"] == "FAILED"
    view = sup.store.get_job_view(job.job_id)
    assert view is not None and view.job.state == JobState.STOPPING
    (failed,) = [e for e in view.events if e.kind == "transition_failed"]
    assert failed.message.startswith(f"{job.job_id}-stop-a1 failed in DestroyAll: VastUnavailable")
    assert failed.data["state"] == "DestroyAll" and failed.data["error"] == "VastUnavailable"

    # Vast stays down for three intervals: each run starts the next attempt, which fails too.
    for _ in range(3):
        report = interval(sup, job.job_id)
        assert report["instances"] is None and report["transitions_retried"] == 1
    assert sup.executions(job.job_id) == {
        f"{job.job_id}-provision-g1-a1": "SUCCEEDED",
        f"{job.job_id}-stop-a1": "FAILED",
        f"{job.job_id}-stop-a2": "FAILED",
        f"{job.job_id}-stop-a3": "FAILED",
        f"{job.job_id}-stop-a4": "FAILED",
    }
    assert sup.vast.ledger(instance).closed_at is None  # still billing, storage at least

    recovered_at = sup.clock()
    sup.vast.outage(False)
    report = interval(sup, job.job_id)

    assert report["orphans_destroyed"] == 1  # the sweep: stopping for longer than its grace
    assert report["transitions_retried"] == 1
    assert sup.executions(job.job_id)[f"{job.job_id}-stop-a5"] == "SUCCEEDED"
    closed_at = sup.vast.ledger(instance).closed_at
    assert closed_at is not None and closed_at - recovered_at <= 2 * INTERVAL_S
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.CANCELLED
    assert sup.vast.gpu_billing_instances() == [] and sup.vast.instances() == []
    assert sup.events(job.job_id).count("transition_retried") == 4
    assert interval(sup, job.job_id)["transitions_retried"] == 0  # ended: nothing more


def test_a_stopping_jobs_host_is_destroyed_even_while_every_attempt_fails(
    sup: Supervised, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop whose destroy step fails every time (Vast answers the monitor): the orphan sweep
    destroys the host one interval after the job began stopping; attempts go on meanwhile."""
    job, generation = sup.provisioned(budget_usd=BUDGET_USD)
    instance = generation.instance_id or 0

    def broken(*_args: object) -> None:
        raise RuntimeError("destroy step broken")

    monkeypatch.setattr(lifecycle_service, "destroy", broken)
    stopping_at = sup.clock()
    sup.cancel(job.job_id)
    assert sup.wait_for(f"{job.job_id}-stop-a1")["status"] == "FAILED"

    report = interval(sup, job.job_id)

    assert report["orphans_destroyed"] == 1 and report["transitions_retried"] == 1
    closed_at = sup.vast.ledger(instance).closed_at
    assert closed_at is not None and closed_at - stopping_at <= INTERVAL_S
    assert sup.executions(job.job_id)[f"{job.job_id}-stop-a2"] == "FAILED"
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.STOPPING
    assert sup.vast.gpu_billing_instances() == []

    monkeypatch.undo()  # repaired: the next attempt ends the job
    interval(sup, job.job_id)
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.CANCELLED
    assert sup.executions(job.job_id)[f"{job.job_id}-stop-a3"] == "SUCCEEDED"


def test_a_replaced_host_is_destroyed_even_while_every_replace_attempt_fails(
    sup: Supervised, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's agent died; the replace's DestroyPrevious fails every time: the sweep
    destroys the old host one interval after the replace began; the next attempt that works
    rents the new one."""
    job, first = sup.provisioned(budget_usd=BUDGET_USD)
    old = first.instance_id or 0
    sup.heartbeat(job.job_id, 1, step=5)
    sup.clock.advance(HEARTBEAT_TIMEOUT_S + INTERVAL_S)  # no heartbeat since

    def broken(*_args: object) -> None:
        raise RuntimeError("destroy step broken")

    monkeypatch.setattr(lifecycle_service, "destroy", broken)
    replacing_at = sup.clock()
    assert sup.monitor()["verdicts"] == {"dead": 1}
    assert sup.wait_for(f"{job.job_id}-replace-g2-a1")["status"] == "FAILED"

    report = interval(sup, job.job_id)

    assert report["orphans_destroyed"] == 1 and report["transitions_retried"] == 1
    closed_at = sup.vast.ledger(old).closed_at
    assert closed_at is not None and closed_at - replacing_at <= INTERVAL_S
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.REPLACING
    assert sup.vast.gpu_billing_instances() == []

    monkeypatch.undo()
    interval(sup, job.job_id)
    assert sup.executions(job.job_id)[f"{job.job_id}-replace-g2-a3"] == "SUCCEEDED"
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.RUNNING and found.current_generation == 2
    assert len(sup.vast.gpu_billing_instances()) == 1
