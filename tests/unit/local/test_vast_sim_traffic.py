"""The Vast simulator's traffic knobs: an instance billing traffic at a steady rate whatever its
host reports, and charges that cannot be read while the rest of the API answers."""

from __future__ import annotations

import pytest

from functions.adapters.vast import VastUnavailable
from tests.unit.local.vast_sim_support import FakeClock, cheapest_offer, client_for, rent_one
from tether_local.vast_sim import BYTES_PER_GB, VastSimulator


def test_a_traffic_rate_bills_bytes_both_ways_as_time_passes(
    sim: VastSimulator, clock: FakeClock
) -> None:
    offer = cheapest_offer(sim)
    instance_id = rent_one(client_for(sim), offer["id"])
    sim.set_traffic_rate(
        instance_id, down_bytes_per_s=BYTES_PER_GB, up_bytes_per_s=BYTES_PER_GB / 2
    )
    clock.advance(10)
    ledger = sim.ledger(instance_id)
    assert (ledger.bytes_down, ledger.bytes_up) == (10 * BYTES_PER_GB, 5 * BYTES_PER_GB)
    assert ledger.download_usd == pytest.approx(10 * float(offer["inet_down_cost"]))
    (charge,) = [c for c in sim.charges() if c["source"] == f"instance-{instance_id}"]
    bwd = [i for i in charge["items"] if i["type"] == "bwd"]
    assert bwd[0]["amount"] == pytest.approx(ledger.download_usd)
    with pytest.raises(ValueError):
        sim.set_traffic_rate(instance_id, down_bytes_per_s=-1)


def test_a_charges_outage_fails_the_charges_only(sim: VastSimulator, clock: FakeClock) -> None:
    vast = client_for(sim)
    instance_id = rent_one(vast, cheapest_offer(sim)["id"])
    sim.charges_outage()
    with pytest.raises(VastUnavailable):
        vast.charges(since=clock() - 3600, until=clock())
    assert [i.id for i in vast.list_instances()] == [instance_id]
    sim.charges_outage(False)
    assert len(vast.charges(since=clock() - 3600, until=clock())) == 1
