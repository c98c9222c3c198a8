"""The Vast simulator, driven through the real adapter (and raw HTTP where the adapter
would refuse to send the request)."""

from __future__ import annotations

import random
import threading
from typing import Any

import httpx
import pytest

from functions.adapters.vast import (
    AuthFailed,
    OfferGone,
    RateLimited,
    VastClient,
    VastUnavailable,
)
from functions.domain.jobspec import Resources
from tether_local.offers import generate_offers
from tether_local.vast_sim import BYTES_PER_GB, RATE_LIMIT_TEXT, SimInstance, VastSimulator

T0 = 1_790_000_000.0


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sim(clock: FakeClock) -> VastSimulator:
    return VastSimulator(
        generate_offers(120, seed=11), clock=clock, startup_s=60, created_s=5, restart_s=10
    )


def client_for(sim: VastSimulator, key: str | None = None, **kwargs: Any) -> VastClient:
    return VastClient(
        key or sim.api_key,
        base_url="http://vast.sim",
        client=httpx.Client(transport=httpx.MockTransport(sim.handle)),
        sleep=kwargs.pop("sleep", lambda _s: None),
        rng=random.Random(0),
        **kwargs,
    )


def raw(sim: VastSimulator, key: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(
        transport=httpx.MockTransport(sim.handle), base_url="http://vast.sim", headers=headers
    )


def rent_one(vast: VastClient, offer_id: int, label: str = "tether:job-1:g1") -> int:
    return vast.rent(
        offer_id,
        image="pytorch/pytorch:latest",
        disk_gb=20,
        label=label,
        env={"TETHER_JOB_ID": "job-1"},
        onstart="echo start",
    ).instance_id


def cheapest_offer(sim: VastSimulator) -> dict[str, Any]:
    return min(
        (o for o in sim.offers() if o["disk_space"] >= 20), key=lambda o: float(o["dph_base"])
    )


# -- search ---------------------------------------------------------------------------------


def test_search_applies_every_filter_and_orders_by_total_price(sim: VastSimulator) -> None:
    resources = Resources(
        gpu_names=["RTX 4090", "RTX 3090", "RTX 5090"],
        min_reliability=0.95,
        min_download_mbps=200,
        max_usd_per_hour=1.0,
        min_gpu_ram_gb=24,
    )
    offers = client_for(sim).search_offers(resources, disk_gb=50)

    assert offers, "the seeded book has matching offers"
    prices = [o.dph_total or 0.0 for o in offers]
    assert prices == sorted(prices)
    for offer in offers:
        assert offer.gpu_name in resources.gpu_names
        assert offer.num_gpus == 1
        assert offer.reliability_score >= 0.95
        assert offer.inet_down >= 200
        assert offer.disk_space >= 50
        assert offer.verification == "verified"
        assert offer.dph_total is not None and offer.dph_total <= 1.0
        # priced for the searched disk size
        assert offer.dph_total == pytest.approx(offer.usd_per_hour(50))
    book = [o for o in sim.offers() if o["gpu_name"] in resources.gpu_names]
    assert len(offers) < len(book)  # the filters did exclude something


def test_search_limit_and_empty_result(sim: VastSimulator) -> None:
    vast = client_for(sim)
    assert len(vast.search_offers(Resources(min_reliability=0, min_download_mbps=0), limit=3)) == 3
    assert vast.search_offers(Resources(gpu_names=["Voodoo 2"])) == []


# -- renting and the instance lifecycle -----------------------------------------------------


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


# -- keys -----------------------------------------------------------------------------------


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


# -- pagination -----------------------------------------------------------------------------


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


# -- billing --------------------------------------------------------------------------------


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


# -- faults and hooks -----------------------------------------------------------------------


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
