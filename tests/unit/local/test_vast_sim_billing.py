"""The Vast simulator's billing ledger and the charges it lists."""

from __future__ import annotations

import pytest

from tests.unit.local.vast_sim_support import (
    T0,
    FakeClock,
    cheapest_offer,
    client_for,
    raw,
    rent_one,
)
from tether_local.vast_sim import BYTES_PER_GB, VastSimulator


def test_the_ledger_bills_gpu_while_it_should_run_and_storage_while_it_exists(
    sim: VastSimulator, clock: FakeClock
) -> None:
    vast = client_for(sim)
    offer = cheapest_offer(sim)
    instance_id = rent_one(vast, offer["id"])
    clock.advance(1000)  # created → loading → running: all billed
    vast.stop_instance(instance_id)
    clock.advance(500)  # stopped: storage only
    vast.start_instance(instance_id)
    clock.advance(200)
    sim.kill(instance_id, "exited")
    clock.advance(100)  # exited: the GPU stays reserved
    sim.kill(instance_id, "offline")
    clock.advance(300)  # offline: storage only
    sim.record_traffic(instance_id, down_bytes=3 * BYTES_PER_GB, up_bytes=BYTES_PER_GB // 2)
    vast.destroy_instance(instance_id)
    clock.advance(999)  # destroyed: nothing

    ledger = sim.ledger(instance_id)
    assert ledger.gpu_seconds == pytest.approx(1300)
    assert ledger.storage_seconds == pytest.approx(2100)
    assert ledger.gpu_usd == pytest.approx(1300 / 3600 * offer["dph_base"])
    assert ledger.storage_usd == pytest.approx(2100 / 3600 * offer["storage_cost"] * 20 / 720)
    assert ledger.download_usd == pytest.approx(3 * offer["inet_down_cost"])
    assert ledger.upload_usd == pytest.approx(0.5 * offer["inet_up_cost"])
    assert sim.total_spend_usd() == pytest.approx(ledger.total_usd)

    charges = vast.charges(since=T0 - 60, until=clock.now)
    assert len(charges) == 1
    charge = charges[0]
    assert charge["source"] == f"instance-{instance_id}"
    assert charge["amount"] == pytest.approx(ledger.total_usd)
    assert {i["type"]: i["amount"] for i in charge["items"]} == pytest.approx(
        {
            "gpu": ledger.gpu_usd,
            "disk": ledger.storage_usd,
            "bwd": ledger.download_usd,
            "bwu": ledger.upload_usd,
        }
    )
    assert vast.charges(since=clock.now + 10, until=clock.now + 20) == []


def test_gpu_billing_instances_follow_state(sim: VastSimulator) -> None:
    vast = client_for(sim)
    a = rent_one(vast, cheapest_offer(sim)["id"])
    b = rent_one(vast, cheapest_offer(sim)["id"], label="tether:job-2:g1")
    assert sim.gpu_billing_instances() == sorted([a, b])
    vast.stop_instance(a)
    sim.kill(b, "offline")
    assert sim.gpu_billing_instances() == []


def test_charges_need_a_day_range(sim: VastSimulator) -> None:
    answer = raw(sim, sim.api_key).get("/api/v0/charges/")
    assert answer.status_code == 400
    assert "day" in answer.json()["msg"]


def test_traffic_on_a_destroyed_instance_is_refused(sim: VastSimulator) -> None:
    vast = client_for(sim)
    instance_id = rent_one(vast, cheapest_offer(sim)["id"])
    vast.destroy_instance(instance_id)
    with pytest.raises(KeyError):
        sim.record_traffic(instance_id, down_bytes=1)
