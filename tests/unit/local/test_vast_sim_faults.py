"""The Vast simulator's injected faults (ridden out or surfaced by the real adapter), its hooks,
and unknown endpoints."""

from __future__ import annotations

from typing import Any

import pytest

from functions.adapters.vast import OfferGone, RateLimited, VastUnavailable
from functions.domain.jobspec import Resources
from tests.unit.local.vast_sim_support import FakeClock, cheapest_offer, client_for, raw, rent_one
from tether_local.vast_sim import RATE_LIMIT_TEXT, SimInstance, VastSimulator
from tether_local.vast_sim.offers import generate_offers


def test_a_429_storm_is_plain_text_and_the_adapter_rides_it_out(sim: VastSimulator) -> None:
    sim.inject("rate_limit", 3)
    raw_answer = raw(sim, sim.api_key).get("/api/v1/instances/")
    assert raw_answer.status_code == 429 and raw_answer.text == RATE_LIMIT_TEXT
    sleeps: list[float] = []
    vast = client_for(sim, sleep=sleeps.append)
    assert vast.list_instances() == []
    assert len(sleeps) == 2
    assert sim.pending_faults() == {}


def test_a_storm_longer_than_the_deadline_surfaces(sim: VastSimulator) -> None:
    sim.inject("rate_limit", 1000)
    with pytest.raises(RateLimited):
        client_for(sim, deadline_s=2).list_instances()


def test_server_errors_and_dropped_connections_are_retried(sim: VastSimulator) -> None:
    sim.inject("server_error", 2)
    sim.inject("connection_error", 2)
    sleeps: list[float] = []
    assert client_for(sim, sleep=sleeps.append).search_offers(Resources(), limit=1)
    assert len(sleeps) == 4


def test_a_rent_during_an_outage_is_not_repeated(sim: VastSimulator) -> None:
    sim.inject("server_error", 1)
    with pytest.raises(VastUnavailable) as caught:
        rent_one(client_for(sim), cheapest_offer(sim)["id"])
    assert caught.value.maybe_applied
    assert sim.instances() == []


def test_an_outage_answers_502_to_everything_until_it_ends_and_billing_goes_on(
    sim: VastSimulator, clock: FakeClock
) -> None:
    instance = rent_one(client_for(sim), cheapest_offer(sim)["id"])
    sim.outage()
    assert raw(sim, sim.api_key).get("/api/v1/instances/").status_code == 502
    with pytest.raises(VastUnavailable):
        client_for(sim, deadline_s=2).destroy_instance(instance)
    clock.advance(3600)
    assert sim.instance(instance) is not None
    assert sim.ledger(instance).storage_seconds == 3600 and sim.ledger(instance).closed_at is None
    sim.outage(False)
    client_for(sim).destroy_instance(instance)
    assert sim.instance(instance) is None and sim.ledger(instance).closed_at == clock.now


def test_an_injected_offer_gone_takes_the_offer_away(sim: VastSimulator) -> None:
    offer_id = cheapest_offer(sim)["id"]
    sim.inject("offer_gone")
    with pytest.raises(OfferGone):
        rent_one(client_for(sim), offer_id)
    assert offer_id not in {o["id"] for o in sim.offers()}
    with pytest.raises(ValueError, match="kind"):
        sim.inject("meteor")  # type: ignore[arg-type]


def test_hooks_fire_once_per_transition(clock: FakeClock) -> None:
    events: list[tuple[str, int, str]] = []

    def hook(name: str) -> Any:
        return lambda instance: events.append((name, instance.id, instance.onstart))

    sim = VastSimulator(
        generate_offers(30, seed=5),
        clock=clock,
        on_rent=hook("rent"),
        on_start=hook("start"),
        on_stop=hook("stop"),
        on_destroy=hook("destroy"),
    )
    vast = client_for(sim)
    instance_id = rent_one(vast, cheapest_offer(sim)["id"])
    vast.stop_instance(instance_id)
    vast.stop_instance(instance_id)  # already stopped: no second event
    vast.start_instance(instance_id)
    vast.destroy_instance(instance_id)
    vast.destroy_instance(instance_id)
    assert events == [
        ("rent", instance_id, "echo start"),
        ("stop", instance_id, "echo start"),
        ("start", instance_id, "echo start"),
        ("destroy", instance_id, "echo start"),
    ]


def test_a_hook_may_call_back_into_the_simulator(clock: FakeClock) -> None:
    seen: list[dict[str, Any] | None] = []

    def on_rent(instance: SimInstance) -> None:
        seen.append(simulator.instance(instance.id))

    simulator = VastSimulator(generate_offers(30, seed=5), clock=clock, on_rent=on_rent)
    instance_id = rent_one(client_for(simulator), cheapest_offer(simulator)["id"])
    assert seen and seen[0] is not None and seen[0]["id"] == instance_id


def test_unknown_endpoints_and_methods(sim: VastSimulator) -> None:
    http = raw(sim, sim.api_key)
    assert http.get("/api/v0/nothing/").status_code == 404
    assert http.post("/api/v0/instances/1/").status_code == 405
    assert http.get("/api/v0/asks/1/").status_code == 405
