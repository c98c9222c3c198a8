"""The Vast simulator's keys: the account key, and the per-instance key a container gets that
may only start, stop or destroy its own instance."""

from __future__ import annotations

import pytest

from functions.adapters.vast import AuthFailed
from functions.domain.jobspec import Resources
from tests.unit.local.vast_sim_support import cheapest_offer, client_for, raw, rent_one
from tether_local.vast_sim import VastSimulator


def test_an_instance_key_only_starts_stops_and_destroys_its_own_instance(
    sim: VastSimulator,
) -> None:
    vast = client_for(sim)
    first = vast.rent(
        cheapest_offer(sim)["id"], image="img", disk_gb=20, label="a", env={}, onstart="x"
    )
    second = rent_one(vast, cheapest_offer(sim)["id"], label="b")
    assert first.instance_api_key
    inside = client_for(sim, first.instance_api_key)

    inside.stop_instance(first.instance_id)
    inside.start_instance(first.instance_id)
    for forbidden in (
        lambda: inside.stop_instance(second),
        lambda: inside.destroy_instance(second),
        lambda: inside.set_label(first.instance_id, "mine now"),
        lambda: inside.show_instance(first.instance_id),
        lambda: inside.list_instances(),
        lambda: inside.search_offers(Resources()),
    ):
        with pytest.raises(AuthFailed) as caught:
            forbidden()
        assert caught.value.status == 403
    inside.destroy_instance(first.instance_id)
    assert vast.show_instance(first.instance_id) is None
    with pytest.raises(AuthFailed) as revoked:
        inside.stop_instance(first.instance_id)  # the key died with its instance
    assert revoked.value.status == 401
    assert vast.show_instance(second) is not None


def test_unknown_or_missing_keys_get_401(sim: VastSimulator) -> None:
    with pytest.raises(AuthFailed) as caught:
        client_for(sim, "not-a-key").list_instances()
    assert caught.value.status == 401
    anonymous = raw(sim).get("/api/v1/instances/")
    assert anonymous.status_code == 401
    assert anonymous.json()["success"] is False


def test_container_env_carries_the_instance_key_and_id(sim: VastSimulator) -> None:
    result = client_for(sim).rent(
        cheapest_offer(sim)["id"],
        image="img",
        disk_gb=20,
        label="tether:job-1:g1",
        env={"TETHER_JOB_ID": "job-1"},
        onstart="echo start",
    )
    env = sim.sim_instance(result.instance_id).container_env()
    assert env["CONTAINER_ID"] == str(result.instance_id)
    assert env["CONTAINER_API_KEY"] == result.instance_api_key
    assert env["TETHER_JOB_ID"] == "job-1"
    assert sim.api_key not in env.values()  # no account key on the host
