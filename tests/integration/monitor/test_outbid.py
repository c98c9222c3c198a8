"""Interruptible hosts through the real lifecycle, monitor and state machine
(docs/architecture.md#interruptible-hosts): an interruptible job is rented with a bid and billed at
it; a refused bid moves to the next offer; an outbid host is waited for while that is worth it
(counted once, told on the timeline, nobody blamed), then replaced through the replace transition,
its stopped instance destroyed; one that wins its machine back goes on."""

from __future__ import annotations

import pytest

from functions.domain.job import JobState
from tests.integration.supervision_harness import Supervised

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")

INTERRUPTIBLE = {"resources": {"market": "interruptible"}}


def test_an_interruptible_job_is_rented_with_a_bid_and_billed_at_it(sup: Supervised) -> None:
    job, generation = sup.provisioned(**INTERRUPTIBLE)

    instance_id = generation.instance_id or 0
    record = sup.vast.instance(instance_id)
    assert record is not None and record["is_bid"] is True
    bid = generation.bid_usd_per_hour
    assert generation.interruptible and bid is not None
    offer_min_bid = record["min_bid"]
    assert bid == pytest.approx(offer_min_bid * 1.1)  # bid_margin 0.1 over min_bid
    assert generation.prices["gpu_usd_per_hour"] == pytest.approx(bid)
    assert sup.vast.ledger(instance_id).gpu_usd_per_hour == pytest.approx(bid)
    view = sup.store.get_job_view(job.job_id)
    assert view is not None
    assert any("interruptible (bid $" in e.message for e in view.events if e.kind == "rented")


def test_a_refused_bid_moves_to_the_next_offer(sup: Supervised) -> None:
    sup.vast.inject("bid_too_low")
    job, generation = sup.provisioned(**INTERRUPTIBLE)
    assert generation.interruptible and sup.rents() == 2
    assert "bid_too_low" in sup.events(job.job_id)


def test_an_outbid_host_is_waited_for_then_replaced_through_the_state_machine(
    sup: Supervised,
) -> None:
    job, first = sup.provisioned(**INTERRUPTIBLE)
    old = first.instance_id or 0
    sup.clock.advance(60)
    sup.heartbeat(job.job_id, 1, step=5)
    sup.vast.outbid(old)

    waiting = sup.monitor()
    sup.clock.advance(30)
    still = sup.monitor()

    assert waiting["verdicts"] == {"outbid": 1} and waiting["transitions_started"] == 0
    assert still["verdicts"] == {"outbid": 1} and still["transitions_started"] == 0
    counted = sup.store.get_generation(job.job_id, 1)
    assert counted is not None and counted.outbids == 1  # one outbid, however many runs
    assert sup.events(job.job_id).count("outbid_wait") == 1
    assert sup.store.host_reputations([first.machine_id or 0]) == {}

    sup.clock.advance(3600)  # past any bound: the job has 0.5 h of work
    replaced = sup.monitor()
    result = sup.wait_for(f"{job.job_id}-replace-g2-a1")

    assert replaced["verdicts"] == {"outbid": 1} and result["status"] == "SUCCEEDED"
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.RUNNING and found.current_generation == 2
    ended = sup.store.get_generation(job.job_id, 1)
    assert ended is not None and ended.replaced_for == "outbid" and not ended.host_blamed
    assert sup.vast.instance(old) is None  # the stopped instance is destroyed (storage ends)
    assert sup.store.host_reputations([first.machine_id or 0]) == {}
    second = sup.store.get_generation(job.job_id, 2)
    assert second is not None and sup.vast.gpu_billing_instances() == [second.instance_id]


def test_an_outbid_host_that_wins_its_machine_back_goes_on(sup: Supervised) -> None:
    job, first = sup.provisioned(**INTERRUPTIBLE)
    instance_id = first.instance_id or 0
    sup.clock.advance(60)
    sup.heartbeat(job.job_id, 1, step=5)
    sup.vast.outbid(instance_id)
    assert sup.monitor()["verdicts"] == {"outbid": 1}

    sup.clock.advance(30)
    sup.vast.win(instance_id)
    sup.clock.advance(400)  # running again; the agent's heartbeat is 430 s old (timeout 180)
    back = sup.monitor()

    assert back["verdicts"] != {"dead": 1} and back["transitions_started"] == 0
    sup.heartbeat(job.job_id, 1, step=6)  # the same generation's agent, restarted
    assert sup.monitor()["verdicts"] == {"healthy": 1}
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.current_generation == 1 and sup.rents() == 1


def test_a_job_cancelled_while_its_host_is_outbid_destroys_the_stopped_instance(
    sup: Supervised,
) -> None:
    """Invariant 3 for a stopped instance: it bills storage until destroyed, so a job that
    ends while its host waits, outbid, still destroys it."""
    job, first = sup.provisioned(**INTERRUPTIBLE)
    instance_id = first.instance_id or 0
    sup.clock.advance(60)
    sup.vast.outbid(instance_id)
    assert sup.monitor()["verdicts"] == {"outbid": 1}

    sup.cancel(job.job_id)
    stopped = sup.wait_for(f"{job.job_id}-stop-a1")

    assert stopped["status"] == "SUCCEEDED"
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.CANCELLED
    assert sup.vast.instance(instance_id) is None
    assert sup.vast.ledger(instance_id).closed_at is not None  # storage billing ended
