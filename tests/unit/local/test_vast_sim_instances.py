"""The Vast simulator's instances: renting (checked like Vast), the status lifecycle on its
clock, stop and start, kills that never heal, labels and the paged list."""

from __future__ import annotations

import threading

import pytest

from functions.adapters.vast import OfferGone
from tests.unit.local.vast_sim_support import FakeClock, cheapest_offer, client_for, raw, rent_one
from tether_local.vast_sim import VastSimulator
from tether_local.vast_sim.offers import generate_offers


def test_an_instance_goes_created_loading_running(sim: VastSimulator, clock: FakeClock) -> None:
    vast = client_for(sim)
    offer = cheapest_offer(sim)
    instance_id = rent_one(vast, offer["id"])

    def status() -> str | None:
        instance = vast.show_instance(instance_id)
        assert instance is not None
        return instance.actual_status

    assert status() == "created"
    clock.advance(5)
    assert status() == "loading"
    clock.advance(54)
    assert status() == "loading"
    clock.advance(1)
    assert status() == "running"
    shown = vast.show_instance(instance_id)
    assert shown is not None
    assert shown.label == "tether:job-1:g1"
    assert shown.machine_id == offer["machine_id"]
    assert shown.dph_total == pytest.approx(offer["dph_base"] + offer["storage_cost"] * 20 / 720)
    assert shown.model_extra is not None
    assert shown.model_extra["extra_env"] == [["TETHER_JOB_ID", "job-1"]]
    assert shown.model_extra["onstart"] == "echo start"


def test_first_status_can_be_null_like_real_records(clock: FakeClock) -> None:
    sim = VastSimulator(generate_offers(20, seed=1), clock=clock, first_status=None)
    vast = client_for(sim)
    instance_id = rent_one(vast, cheapest_offer(sim)["id"])
    instance = vast.show_instance(instance_id)
    assert instance is not None and instance.actual_status is None


def test_stop_and_start(sim: VastSimulator, clock: FakeClock) -> None:
    vast = client_for(sim)
    instance_id = rent_one(vast, cheapest_offer(sim)["id"])
    clock.advance(120)
    vast.stop_instance(instance_id)
    stopped = vast.show_instance(instance_id)
    assert stopped is not None
    assert (stopped.actual_status, stopped.intended_status) == ("stopped", "stopped")
    vast.start_instance(instance_id)
    restarting = vast.show_instance(instance_id)
    assert restarting is not None and restarting.actual_status == "loading"
    clock.advance(10)
    running = vast.show_instance(instance_id)
    assert running is not None and running.actual_status == "running"


def test_killed_instances_do_not_heal(sim: VastSimulator, clock: FakeClock) -> None:
    vast = client_for(sim)
    exited = rent_one(vast, cheapest_offer(sim)["id"])
    offline = rent_one(vast, cheapest_offer(sim)["id"], label="tether:job-2:g1")
    clock.advance(100)
    sim.kill(exited, "exited")
    sim.kill(offline, "offline")
    clock.advance(3600)
    statuses = {i.id: i.actual_status for i in vast.list_instances()}
    assert statuses == {exited: "exited", offline: "offline"}
    with pytest.raises(ValueError, match="exited"):
        sim.kill(exited, "frozen")  # type: ignore[arg-type]


def test_a_rented_offer_leaves_the_book_until_destroyed(sim: VastSimulator) -> None:
    vast = client_for(sim)
    offer_id = cheapest_offer(sim)["id"]
    instance_id = rent_one(vast, offer_id)

    assert offer_id not in {o["id"] for o in sim.offers()}
    with pytest.raises(OfferGone) as caught:
        rent_one(vast, offer_id)
    assert (caught.value.status, caught.value.code) == (404, "no_such_ask")

    vast.destroy_instance(instance_id)
    vast.destroy_instance(instance_id)  # idempotent
    assert vast.show_instance(instance_id) is None
    assert offer_id in {o["id"] for o in sim.offers()}


def test_an_offline_host_does_not_come_back_to_the_book(sim: VastSimulator) -> None:
    vast = client_for(sim)
    offer_id = cheapest_offer(sim)["id"]
    instance_id = rent_one(vast, offer_id)
    sim.kill(instance_id, "offline")
    vast.destroy_instance(instance_id)
    assert offer_id not in {o["id"] for o in sim.offers()}


def test_labels_can_be_changed_and_listed(sim: VastSimulator) -> None:
    vast = client_for(sim)
    instance_id = rent_one(vast, cheapest_offer(sim)["id"])
    vast.set_label(instance_id, "tether:job-1:g2")
    assert [i.label for i in vast.list_instances()] == ["tether:job-1:g2"]


def test_rent_checks_like_vast(sim: VastSimulator) -> None:
    http = raw(sim, sim.api_key)
    offer = cheapest_offer(sim)
    no_image = http.put(f"/api/v0/asks/{offer['id']}/", json={"disk": 20})
    assert no_image.status_code == 400
    assert no_image.json()["error"] == "invalid_args"
    too_long = http.put(
        f"/api/v0/asks/{offer['id']}/", json={"image": "x", "disk": 20, "onstart": "y" * 4049}
    )
    assert too_long.status_code == 400
    too_big = http.put(
        f"/api/v0/asks/{offer['id']}/", json={"image": "x", "disk": offer["disk_space"] + 1}
    )
    assert too_big.status_code == 400 and "exceeds" in too_big.json()["msg"]
    not_json = http.put(f"/api/v0/asks/{offer['id']}/", content=b"{nope")
    assert not_json.status_code == 400
    assert offer["id"] in {o["id"] for o in sim.offers()}  # nothing was rented


def test_only_one_of_many_concurrent_rents_of_an_offer_wins(sim: VastSimulator) -> None:
    offer_id = cheapest_offer(sim)["id"]
    outcomes: list[str] = []
    lock = threading.Lock()

    def attempt(n: int) -> None:
        try:
            rent_one(client_for(sim), offer_id, label=f"tether:job-{n}:g1")
            result = "rented"
        except OfferGone:
            result = "gone"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["gone"] * 7 + ["rented"]
    assert len(sim.instances()) == 1


def test_instances_come_in_pages_of_at_most_25(clock: FakeClock) -> None:
    sim = VastSimulator(generate_offers(200, seed=3), clock=clock)
    vast = client_for(sim)
    rentable = [o for o in sim.offers() if o["disk_space"] >= 20][:60]
    ids = [rent_one(vast, o["id"], label=f"tether:job-{n}:g1") for n, o in enumerate(rentable)]

    sim.request_log.clear()
    listed = vast.list_instances()

    assert sorted(i.id for i in listed) == sorted(ids)
    pages = [url for method, url in sim.request_log if "/api/v1/instances/" in url]
    assert len(pages) == 3

    http = raw(sim, sim.api_key)
    big = http.get("/api/v1/instances/", params={"limit": 100}).json()
    assert len(big["instances"]) == 25 and big["total_instances"] == 60
    assert big["next_token"]
    bad = http.get("/api/v1/instances/", params={"after_token": "!!"})
    assert bad.status_code == 400
    only = http.get(
        "/api/v1/instances/", params={"select_filters": '{"label": {"eq": "tether:job-7:g1"}}'}
    ).json()
    assert [r["label"] for r in only["instances"]] == ["tether:job-7:g1"]
    assert only["next_token"] is None


def test_label_filters_compare_text_in_byte_order() -> None:
    """A C collation: label ranges cut by `functions/domain/labels.py` select exactly."""
    from tether_local.vast_sim.search import matches

    def inside(label: str) -> bool:
        return matches({"label": label}, {"label": {"gte": "tether.4", "lt": "tether.8"}})

    assert inside("tether.4:job-0123abcd:g1") and inside("tether.7:x:g2")
    assert not inside("tether.8:job:g1") and not inside("tether:job:g1")
    assert not inside("Tether.5:job:g1")  # upper case sorts before: no folding
    assert not matches({"label": None}, {"label": {"gte": "tether."}})
