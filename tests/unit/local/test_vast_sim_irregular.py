"""The Vast simulator is as irregular as Vast: charges in the real shape (the instance named only
in `source`), numbers as text in search filters, 200 `{"instances": null}` for a missing
instance, starts refused with `resources_unavailable` once the machine is taken, rent replies
without `instance_api_key`, and records made odd on demand (`garble`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.adapters.vast import ResourcesUnavailable
from functions.domain.spend import charges_by_instance
from tests.unit.local.vast_sim_support import (
    T0,
    FakeClock,
    cheapest_offer,
    client_for,
    raw,
    rent_one,
)
from tether_local.vast_sim import VastSimulator

# Every level of a charge carries these: the official client reads them all
# (vastai/cli/commands/billing.py, format_invoices_charges_results and the table and tree).
CHARGE_KEYS = {"start", "end", "type", "source", "description", "amount", "metadata", "items"}


def charges_raw(sim: VastSimulator, **params: Any) -> dict[str, Any]:
    query = {"select_filters": json.dumps({"day": {"gte": T0 - 86_400, "lte": T0 + 86_400}})}
    query.update({k: str(v) for k, v in params.items()})
    answer = raw(sim, sim.api_key).get("/api/v0/charges/", params=query)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


# -- charges --------------------------------------------------------------------------------


def test_charges_look_like_the_real_ones(sim: VastSimulator, clock: FakeClock) -> None:
    vast = client_for(sim)
    instance_id = rent_one(vast, cheapest_offer(sim)["id"], label="tether:job-7:g1")
    clock.advance(3600)

    (item,) = charges_raw(sim)["results"]

    assert set(item) == CHARGE_KEYS
    assert (item["type"], item["source"]) == ("instance", f"instance-{instance_id}")
    assert (item["start"], item["end"]) == (T0, T0 + 3600)
    assert item["description"].startswith(f"Instance {instance_id} ")
    assert item["metadata"] == {"label": "tether:job-7:g1", "template_id": None}  # no id there
    assert [line["type"] for line in item["items"]] == ["gpu", "disk", "bwd", "bwu"]
    for line in item["items"]:
        assert set(line) == CHARGE_KEYS and line["items"] == []
        assert (line["start"], line["end"]) == (T0, T0 + 3600)
    assert item["amount"] == pytest.approx(sum(line["amount"] for line in item["items"]))
    assert charges_by_instance([item]) == {instance_id: pytest.approx(item["amount"])}


def test_charges_come_in_pages_newest_first_on_request_and_by_type(sim: VastSimulator) -> None:
    vast = client_for(sim)
    offers = sorted(sim.offers(), key=lambda o: o["id"])[:3]
    ids = sorted(rent_one(vast, o["id"], label=f"tether:job-{n}:g1") for n, o in enumerate(offers))

    first = charges_raw(sim, limit=2)
    second = charges_raw(sim, limit=2, after_token=first["next_token"])
    newest = charges_raw(sim, latest_first="true")

    assert [c["source"] for c in first["results"]] == [f"instance-{i}" for i in ids[:2]]
    assert (first["count"], first["total"]) == (2, 3)
    assert [c["source"] for c in second["results"]] == [f"instance-{ids[2]}"]
    assert second["next_token"] is None
    assert [c["source"] for c in newest["results"]] == [f"instance-{i}" for i in reversed(ids)]
    volumes_only = json.dumps({"day": {"gte": T0 - 60, "lte": T0 + 60}, "type": {"in": ["volume"]}})
    answer = raw(sim, sim.api_key).get("/api/v0/charges/", params={"select_filters": volumes_only})
    assert answer.json()["results"] == []


# -- search ---------------------------------------------------------------------------------


def search(sim: VastSimulator, **filters: Any) -> list[int]:
    body = {"limit": 1000, "allocated_storage": 10, **filters}
    answer = raw(sim, sim.api_key).post("/api/v0/bundles/", json=body)
    assert answer.status_code == 200, answer.text
    return sorted(o["id"] for o in answer.json()["offers"])


@pytest.mark.parametrize(
    ("as_numbers", "as_text"),
    [
        ({"num_gpus": {"eq": 1}}, {"num_gpus": {"eq": "1"}}),
        ({"num_gpus": {"neq": 1}}, {"num_gpus": {"neq": "1"}}),
        ({"reliability2": {"gte": 0.97}}, {"reliability2": {"gte": "0.97"}}),
        ({"gpu_ram": {"gt": 24000.0}}, {"gpu_ram": {"gt": "24000.0"}}),
        ({"dph_total": {"lt": 0.5}}, {"dph_total": {"lt": ".5"}}),
        ({"num_gpus": {"in": [2, 4]}}, {"num_gpus": {"in": ["2", "4"]}}),
        ({"num_gpus": {"notin": [1]}}, {"num_gpus": {"notin": ["1"]}}),
        ({"static_ip": {"eq": True}}, {"static_ip": {"eq": "true"}}),
    ],
)
def test_filters_take_numbers_as_text_as_the_official_client_sends_them(
    sim: VastSimulator, as_numbers: dict[str, Any], as_text: dict[str, Any]
) -> None:
    expected = search(sim, **as_numbers)
    assert expected, "the filter matches something in the seeded book"
    assert len(expected) < len(sim.offers())  # and excludes something
    assert search(sim, **as_text) == expected


def test_limit_and_storage_may_be_text_too(sim: VastSimulator) -> None:
    assert len(search(sim, limit="3", allocated_storage="20")) == 3


# -- instances ------------------------------------------------------------------------------


def test_a_missing_instance_is_200_null_and_the_adapter_calls_it_gone(sim: VastSimulator) -> None:
    vast = client_for(sim)
    instance_id = rent_one(vast, cheapest_offer(sim)["id"])
    vast.destroy_instance(instance_id)

    answer = raw(sim, sim.api_key).get(f"/api/v0/instances/{instance_id}/")

    assert (answer.status_code, answer.json()) == (200, {"instances": None})
    assert vast.show_instance(instance_id) is None
    vast.destroy_instance(instance_id)  # still idempotent


def test_a_stopped_instance_frees_its_machine_and_cannot_start_once_it_is_taken(
    sim: VastSimulator, clock: FakeClock
) -> None:
    vast = client_for(sim)
    offer = cheapest_offer(sim)
    ours = rent_one(vast, offer["id"])
    clock.advance(120)
    vast.stop_instance(ours)
    assert offer["id"] in {o["id"] for o in sim.offers()}  # its GPUs are on the market again
    theirs = rent_one(vast, offer["id"], label="someone else")
    clock.advance(60)

    with pytest.raises(ResourcesUnavailable, match="unavailable"):
        vast.start_instance(ours)

    stopped = sim.instance(ours)
    assert stopped is not None and stopped["actual_status"] == "stopped"
    assert sim.gpu_billing_instances() == [theirs]
    vast.destroy_instance(theirs)
    vast.start_instance(ours)  # the machine is free again
    assert sim.gpu_billing_instances() == [ours]
    assert offer["id"] not in {o["id"] for o in sim.offers()}


def test_a_start_fails_while_the_machine_is_taken_by_someone_outside(sim: VastSimulator) -> None:
    vast = client_for(sim)
    offer = cheapest_offer(sim)
    ours = rent_one(vast, offer["id"])
    vast.stop_instance(ours)
    sim.remove_offer(offer["id"])

    answer = raw(sim, sim.api_key).put(f"/api/v0/instances/{ours}/", json={"state": "running"})

    assert answer.status_code == 400
    assert answer.json()["error"] == "resources_unavailable"


def test_an_injected_resources_unavailable_refuses_one_start(sim: VastSimulator) -> None:
    vast = client_for(sim)
    ours = rent_one(vast, cheapest_offer(sim)["id"])
    vast.stop_instance(ours)
    sim.inject("resources_unavailable")

    with pytest.raises(ResourcesUnavailable):
        vast.start_instance(ours)
    assert sim.gpu_billing_instances() == []
    vast.start_instance(ours)
    assert sim.gpu_billing_instances() == [ours]


def test_a_rent_reply_may_lack_the_instance_api_key(sim: VastSimulator) -> None:
    vast = client_for(sim)
    sim.inject("no_instance_api_key")

    rented = vast.rent(cheapest_offer(sim)["id"], image="python:3.12-slim", disk_gb=20,
                       label="tether:job-1:g1", env={}, onstart="true")  # fmt: skip

    assert rented.instance_api_key is None
    env = sim.sim_instance(rented.instance_id).container_env()
    assert env["CONTAINER_API_KEY"]  # the container still gets its key
    assert (
        client_for(sim)
        .rent(
            cheapest_offer(sim)["id"],
            image="python:3.12-slim",
            disk_gb=20,
            label="tether:job-2:g1",
            env={},
            onstart="true",
        )
        .instance_api_key
    )


def test_garbled_records_are_odd_over_http_only(sim: VastSimulator) -> None:
    vast = client_for(sim)
    instance_id = rent_one(vast, cheapest_offer(sim)["id"])
    sim.garble(instance_id, id=str(instance_id), gpu_util="n/a", label=12345,
               start_date="2026-09-09T08:53:08+00:00")  # fmt: skip

    listed = raw(sim, sim.api_key).get("/api/v1/instances/").json()["instances"]
    shown = raw(sim, sim.api_key).get(f"/api/v0/instances/{instance_id}/").json()["instances"]

    for record in (listed[0], shown):
        assert (record["id"], record["gpu_util"]) == (str(instance_id), "n/a")
        assert record["label"] == 12345
        assert record["start_date"] == "2026-09-09T08:53:08+00:00"
    truth = sim.instance(instance_id)
    assert truth is not None and truth["id"] == instance_id and truth["start_date"] == T0
    (parsed,) = vast.list_instances()
    assert (parsed.id, parsed.label, parsed.start_date) == (instance_id, "12345", 1_788_943_988.0)
