"""The Vast simulator's bids: bid searches priced at `min_bid`, a bid below it refused with
400 `invalid_price`, interruptible instances billed at their bid, and outbid / win: stopped by
the marketplace (intended_status still running), storage only, then running again."""

from __future__ import annotations

from typing import Any

import pytest

from functions.adapters.vast import BidTooLow
from tests.unit.local.vast_sim_support import FakeClock, cheapest_offer, client_for, raw
from tether_local.vast_sim import SimInstance, VastSimulator

BODY: dict[str, Any] = {
    "client_id": "me", "image": "pytorch/pytorch:latest", "disk": 20,
    "label": "tether:job-1:g1", "env": {}, "runtype": "args", "args": ["bash", "-c", "true"],
}  # fmt: skip


def rent_bid(sim: VastSimulator, offer: dict[str, Any], price: float) -> int:
    return client_for(sim).rent(
        offer["id"], image="pytorch/pytorch:latest", disk_gb=20, label="tether:job-1:g1",
        env={}, onstart="true", price=price,
    ).instance_id  # fmt: skip


def test_a_bid_search_prices_offers_at_their_min_bid(sim: VastSimulator) -> None:
    query = {"type": "bid", "allocated_storage": 0, "limit": 500}
    found = raw(sim, sim.api_key).post("/api/v0/bundles/", json=query).json()["offers"]
    book = {o["id"]: o for o in sim.offers()}
    assert found and all(o["dph_base"] == book[o["id"]]["min_bid"] for o in found)
    assert all(o["dph_total"] == pytest.approx(o["min_bid"]) for o in found)


def test_a_bid_below_min_bid_is_refused_with_invalid_price(sim: VastSimulator) -> None:
    offer = cheapest_offer(sim)
    low = offer["min_bid"] * 0.9
    reply = raw(sim, sim.api_key).put(f"/api/v0/asks/{offer['id']}/", json={**BODY, "price": low})
    assert reply.status_code == 400
    assert reply.json()["error"] == "invalid_price" and reply.json()["success"] is False
    with pytest.raises(BidTooLow):
        rent_bid(sim, offer, low)
    assert sim.instances() == [] and offer["id"] in {o["id"] for o in sim.offers()}


def test_a_bid_instance_is_billed_at_its_bid_and_says_it_is_one(
    sim: VastSimulator, clock: FakeClock
) -> None:
    offer = cheapest_offer(sim)
    bid = round(offer["min_bid"] * 1.1, 6)
    instance_id = rent_bid(sim, offer, bid)
    clock.advance(3600)
    record = sim.instance(instance_id)
    assert record is not None and record["is_bid"] is True and record["dph_base"] == bid
    assert sim.ledger(instance_id).gpu_usd == pytest.approx(bid)


def test_outbid_stops_it_as_vast_does_and_win_starts_it_again(
    sim: VastSimulator, clock: FakeClock
) -> None:
    stops: list[SimInstance] = []
    starts: list[SimInstance] = []
    sim.on_stop, sim.on_start = stops.append, starts.append
    offer = cheapest_offer(sim)
    bid = round(offer["min_bid"] * 1.1, 6)
    instance_id = rent_bid(sim, offer, bid)
    clock.advance(100)  # running

    sim.outbid(instance_id)
    clock.advance(1000)  # outbid: storage only

    record = sim.instance(instance_id)
    assert record is not None
    assert (record["actual_status"], record["intended_status"]) == ("stopped", "running")
    assert record["min_bid"] == pytest.approx(bid * 1.1)  # the winning bid
    assert [i.id for i in stops] == [instance_id] and sim.gpu_billing_instances() == []
    assert offer["id"] not in {o["id"] for o in sim.offers()}  # the other renter has it

    sim.win(instance_id)
    assert [i.id for i in starts] == [instance_id]
    assert sim.instance(instance_id)["actual_status"] == "loading"  # type: ignore[index]
    clock.advance(10)  # restart_s
    assert sim.instance(instance_id)["actual_status"] == "running"  # type: ignore[index]
    clock.advance(90)

    ledger = sim.ledger(instance_id)
    assert ledger.gpu_seconds == pytest.approx(200)
    assert ledger.storage_seconds == pytest.approx(1200)


def test_only_a_running_bid_instance_can_be_outbid(sim: VastSimulator) -> None:
    offers = sorted(sim.offers(), key=lambda o: o["dph_base"])
    vast = client_for(sim)
    on_demand = vast.rent(
        offers[0]["id"], image="pytorch/pytorch:latest", disk_gb=8, label="tether:job-2:g1",
        env={}, onstart="true",
    ).instance_id  # fmt: skip
    with pytest.raises(ValueError, match="on-demand"):
        sim.outbid(on_demand)
    with pytest.raises(ValueError, match="not outbid"):
        sim.win(on_demand)


def test_the_bid_too_low_fault_refuses_the_next_bid(sim: VastSimulator) -> None:
    offer = cheapest_offer(sim)
    sim.inject("bid_too_low")
    with pytest.raises(BidTooLow):
        rent_bid(sim, offer, offer["min_bid"] * 1.1)
    assert rent_bid(sim, offer, offer["min_bid"] * 1.1) > 0
