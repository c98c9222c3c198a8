"""The Vast adapter against canned HTTP answers in the real API's shapes (tests/fixtures/vast)."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from functions.adapters.vast import (
    AuthFailed,
    InstanceGone,
    OfferGone,
    RateLimited,
    VastClient,
    VastError,
    VastUnavailable,
    offer_query,
)
from functions.domain.jobspec import Resources
from tests.paths import FIXTURES as TEST_FIXTURES

FIXTURES = TEST_FIXTURES / "vast"
KEY = "acct-key-5f2c9e7b"
RATE_LIMIT_TEXT = "API requests too frequent: endpoint threshold=4.5*1.0"

Handler = Callable[[httpx.Request], httpx.Response]


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


class Recorder:
    """Answers requests from a script of responses (or exceptions) and records them."""

    def __init__(self, *answers: httpx.Response | Exception | Handler) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if callable(answer) and not isinstance(answer, httpx.Response):
            return answer(request)
        return answer

    def body(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


def make_client(
    handler: Handler, *, deadline_s: float = 60, seed: int = 1
) -> tuple[VastClient, list[float]]:
    sleeps: list[float] = []
    client = VastClient(
        KEY,
        base_url="https://console.vast.ai",
        client=httpx.Client(transport=httpx.MockTransport(handler)),
        deadline_s=deadline_s,
        sleep=sleeps.append,
        rng=random.Random(seed),
    )
    return client, sleeps


def ok(body: Any) -> httpx.Response:
    return httpx.Response(200, json=body)


def rent_kwargs(**overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "image": "pytorch/pytorch:2.4.1-cuda12.4-cudnn9-runtime",
        "disk_gb": 40,
        "label": "tether:job-7:g1",
        "env": {"TETHER_JOB_ID": "job-7"},
        "onstart": "curl -fsS $URL | bash",
    }
    kwargs.update(overrides)
    return kwargs


# -- search ---------------------------------------------------------------------------------


def test_offer_query_has_the_official_filters_and_the_resources() -> None:
    resources = Resources(
        gpu_names=["RTX 4090", "RTX 3090"],
        gpu_count=2,
        min_gpu_ram_gb=24,
        min_disk_gb=60,
        min_reliability=0.97,
        min_download_mbps=200,
        max_usd_per_hour=1.5,
    )
    query = offer_query(resources, 60, 100)
    assert query == {
        "verified": {"eq": True},
        "external": {"eq": False},
        "rentable": {"eq": True},
        "rented": {"eq": False},
        "gpu_name": {"in": ["RTX 4090", "RTX 3090"]},
        "num_gpus": {"eq": 2},
        "gpu_ram": {"gte": 24000},
        "disk_space": {"gte": 60},
        "reliability2": {"gte": 0.97},
        "inet_down": {"gte": 200},
        "dph_total": {"lte": 1.5},
        "type": "on-demand",
        "allocated_storage": 60,
        "order": [["dph_total", "asc"]],
        "limit": 100,
    }


def test_offer_query_leaves_out_filters_the_job_does_not_set() -> None:
    query = offer_query(Resources(), 40, 10)
    assert "gpu_name" not in query
    assert "gpu_ram" not in query
    assert "dph_total" not in query
    assert query["num_gpus"] == {"eq": 1}


def test_search_posts_the_query_and_parses_odd_real_values() -> None:
    recorder = Recorder(ok(fixture("bundles_search.json")))
    client, _ = make_client(recorder)
    resources = Resources(gpu_names=["RTX 4090"], min_disk_gb=40)

    offers = client.search_offers(resources)

    request = recorder.requests[0]
    assert (request.method, request.url.path) == ("POST", "/api/v0/bundles/")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert recorder.body() == offer_query(resources, 40, 256)
    # The record without an id is skipped; the others parse, extra fields kept.
    assert [o.gpu_name for o in offers] == ["RTX 4090", "RTX 3090", "RTX 5090"]
    assert offers[0].model_extra is not None and offers[0].model_extra["driver_vers"] is None
    assert offers[0].storage_cost == pytest.approx(0.2)
    farm = offers[2]  # an export row without dph_total: the GPU price stands in
    assert farm.dph_total == farm.dph_base
    assert offers[1].usd_per_hour(40) == pytest.approx(offers[1].dph_total)


def test_search_uses_the_disk_size_it_is_given() -> None:
    recorder = Recorder(ok({"offers": []}))
    client, _ = make_client(recorder)
    assert client.search_offers(Resources(), disk_gb=120, limit=5) == []
    assert recorder.body()["allocated_storage"] == 120
    assert recorder.body()["disk_space"] == {"gte": 120}
    assert recorder.body()["limit"] == 5


def test_search_rejects_a_disk_below_vasts_minimum_before_calling() -> None:
    recorder = Recorder(ok({"offers": []}))
    client, _ = make_client(recorder)
    with pytest.raises(ValueError, match="disk_gb must be at least 8"):
        client.search_offers(Resources(), disk_gb=4)
    assert recorder.requests == []


def test_search_without_an_offers_list_is_an_error() -> None:
    client, _ = make_client(Recorder(ok({"success": True})))
    with pytest.raises(VastError, match="offers"):
        client.search_offers(Resources())


# -- rent -----------------------------------------------------------------------------------


def test_rent_sends_the_real_body_and_returns_the_instance_key() -> None:
    recorder = Recorder(ok(fixture("rent_success.json")))
    client, _ = make_client(recorder)

    result = client.rent(123, **rent_kwargs())

    request = recorder.requests[0]
    assert (request.method, request.url.path) == ("PUT", "/api/v0/asks/123/")
    assert recorder.body() == {
        "client_id": "me",
        "image": "pytorch/pytorch:2.4.1-cuda12.4-cudnn9-runtime",
        "disk": 40,
        "label": "tether:job-7:g1",
        "env": {"TETHER_JOB_ID": "job-7"},
        "runtype": "args",
        "cancel_unavail": True,
        "args": ["bash", "-c", "curl -fsS $URL | bash"],
    }
    assert result.instance_id == fixture("rent_success.json")["new_contract"]
    assert result.instance_api_key == fixture("rent_success.json")["instance_api_key"]


def test_rent_with_ssh_runtype_sends_onstart() -> None:
    recorder = Recorder(ok({"success": True, "new_contract": 50364501}))
    client, _ = make_client(recorder)
    result = client.rent(50363390, **rent_kwargs(runtype="ssh"))
    assert recorder.body()["onstart"] == "curl -fsS $URL | bash"
    assert "args" not in recorder.body()
    # Recorded real answers sometimes carry no instance key.
    assert (result.instance_id, result.instance_api_key) == (50364501, None)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (404, {"success": False, "error": "invalid_args",
               "msg": "error 404/3603: no_such_ask Instance type by id 9 is not available.",
               "ask_id": 9}),
        (410, {"error": True, "status_code": 410,
               "msg": "error 410/3907: no_such_ask  Instance type 9 is no longer available."}),
        (400, {"msg": "error 404/3603: no_such_ask Instance type by id 9 is not available."}),
        (400, "error 404/3603: no_such_ask Instance type by id 9 is not available."),
        (410, "Gone"),
        (404, "Not Found"),
    ],
)  # fmt: skip
def test_rent_of_a_taken_offer_raises_offer_gone(status: int, body: Any) -> None:
    answer = (
        httpx.Response(status, json=body)
        if isinstance(body, dict)
        else httpx.Response(status, text=body)
    )
    recorder = Recorder(answer)
    client, sleeps = make_client(recorder)
    with pytest.raises(OfferGone) as caught:
        client.rent(9, **rent_kwargs())
    assert caught.value.status == status
    assert caught.value.code == "no_such_ask"
    assert len(recorder.requests) == 1 and sleeps == []


def test_rent_invalid_args_is_not_offer_gone() -> None:
    body = {"success": False, "error": "invalid_price", "msg": "error 400/3467: bid too low"}
    client, _ = make_client(Recorder(httpx.Response(400, json=body)))
    with pytest.raises(VastError) as caught:
        client.rent(9, **rent_kwargs())
    assert not isinstance(caught.value, OfferGone)
    assert (caught.value.status, caught.value.code) == (400, "invalid_price")
    assert "bid too low" in str(caught.value)


def test_rent_answer_without_a_contract_is_an_error() -> None:
    client, _ = make_client(Recorder(ok({"success": False, "msg": "Your account lacks credit"})))
    with pytest.raises(VastError, match="lacks credit"):
        client.rent(9, **rent_kwargs())


@pytest.mark.parametrize(
    ("overrides", "offer_id", "message"),
    [
        ({"label": "x" * 257}, 9, "label must be at most 256"),
        ({"label": ""}, 9, "label must be a non-empty"),
        ({"onstart": "x" * 4049}, 9, "onstart must be at most 4048"),
        ({"disk_gb": 7.5}, 9, "disk_gb must be at least 8"),
        ({"image": ""}, 9, "image must be"),
        ({"image": "a b"}, 9, "image must be"),
        ({"runtype": "vm"}, 9, "runtype must be"),
        ({"env": {"A": 1}}, 9, "env must map"),
        ({}, 0, "offer_id must be a positive integer"),
    ],
)
def test_rent_checks_arguments_before_any_call(
    overrides: dict[str, Any], offer_id: int, message: str
) -> None:
    recorder = Recorder(ok({"success": True, "new_contract": 1}))
    client, _ = make_client(recorder)
    with pytest.raises(ValueError, match=message):
        client.rent(offer_id, **rent_kwargs(**overrides))
    assert recorder.requests == []


def test_rent_limits_are_inclusive() -> None:
    recorder = Recorder(ok({"success": True, "new_contract": 1}))
    client, _ = make_client(recorder)
    client.rent(9, **rent_kwargs(label="x" * 256, onstart="y" * 4048, disk_gb=8))
    assert len(recorder.requests) == 1


def test_rent_is_retried_when_the_request_surely_did_not_arrive() -> None:
    recorder = Recorder(
        httpx.Response(429, text=RATE_LIMIT_TEXT),
        httpx.ConnectError("refused"),
        ok({"success": True, "new_contract": 77}),
    )
    client, sleeps = make_client(recorder)
    assert client.rent(9, **rent_kwargs()).instance_id == 77
    assert len(recorder.requests) == 3 and len(sleeps) == 2


@pytest.mark.parametrize(
    "answer", [httpx.Response(502, text="Bad Gateway"), httpx.ReadTimeout("slow")]
)
def test_rent_is_not_retried_when_it_may_have_happened(answer: Any) -> None:
    recorder = Recorder(answer, ok({"success": True, "new_contract": 77}))
    client, sleeps = make_client(recorder)
    with pytest.raises(VastUnavailable) as caught:
        client.rent(9, **rent_kwargs())
    assert caught.value.maybe_applied is True
    assert len(recorder.requests) == 1 and sleeps == []


# -- errors, retries, deadline ---------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
def test_refused_key_raises_auth_failed_without_retrying(status: int) -> None:
    body = {"success": False, "error": "auth_error", "msg": "Invalid API key"}
    recorder = Recorder(httpx.Response(status, json=body))
    client, sleeps = make_client(recorder)
    with pytest.raises(AuthFailed) as caught:
        client.list_instances()
    assert caught.value.status == status
    assert "Invalid API key" in caught.value.message
    assert len(recorder.requests) == 1 and sleeps == []


def test_429_is_retried_with_growing_jittered_backoff() -> None:
    recorder = Recorder(*[httpx.Response(429, text=RATE_LIMIT_TEXT)] * 5, ok({"offers": []}))
    client, sleeps = make_client(recorder, seed=1)

    client.search_offers(Resources())

    assert len(recorder.requests) == 6
    assert len(sleeps) == 5
    assert 0.15 <= sleeps[0] <= 0.225
    ratios = [b / a for a, b in itertools.pairwise(sleeps)]
    assert all(1.5 <= r <= 2.0 for r in ratios), ratios
    assert len({round(r, 6) for r in ratios}) > 1  # jittered, not a fixed factor
    other, other_sleeps = make_client(
        Recorder(*[httpx.Response(429, text=RATE_LIMIT_TEXT)] * 5, ok({"offers": []})), seed=2
    )
    other.search_offers(Resources())
    assert other_sleeps != sleeps  # another seed, other delays


def test_5xx_and_connection_errors_are_retried() -> None:
    recorder = Recorder(
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        httpx.Response(502, text="<html>Bad Gateway</html>"),
        httpx.Response(503, json={"success": False, "error": "unavailable", "msg": "busy"}),
        ok({"instances": {"id": 5, "actual_status": "running"}}),
    )
    client, sleeps = make_client(recorder)
    instance = client.show_instance(5)
    assert instance is not None and instance.actual_status == "running"
    assert len(sleeps) == 4


def test_a_429_storm_past_the_deadline_raises_rate_limited() -> None:
    recorder = Recorder(httpx.Response(429, text=RATE_LIMIT_TEXT))
    client, sleeps = make_client(recorder, deadline_s=3)
    with pytest.raises(RateLimited) as caught:
        client.list_instances()
    assert caught.value.status == 429
    assert "too frequent" in caught.value.message
    assert sum(sleeps) <= 3
    assert len(sleeps) >= 4  # it did retry, and gave up only at the deadline
    assert len(recorder.requests) == len(sleeps) + 1


@pytest.mark.parametrize(
    ("answer", "status"),
    [(httpx.Response(500, text="Internal Server Error"), 500), (httpx.ConnectError("down"), None)],
)
def test_an_outage_past_the_deadline_raises_unavailable(answer: Any, status: int | None) -> None:
    client, sleeps = make_client(Recorder(answer), deadline_s=2)
    with pytest.raises(VastUnavailable) as caught:
        client.stop_instance(5)
    assert caught.value.status == status
    assert 0 < sum(sleeps) <= 2


def test_backoff_is_capped() -> None:
    client, sleeps = make_client(Recorder(httpx.Response(503, text="busy")), deadline_s=120)
    with pytest.raises(VastUnavailable):
        client.list_instances()
    assert max(sleeps) <= 8.0
    assert sum(sleeps) <= 120


def test_the_key_never_appears_in_a_url() -> None:
    page = {"instances": [{"id": 1}], "next_token": None}
    answers: dict[tuple[str, str], httpx.Response] = {
        ("POST", "/api/v0/bundles/"): ok({"offers": []}),
        ("PUT", "/api/v0/asks/9/"): ok({"success": True, "new_contract": 1}),
        ("GET", "/api/v1/instances/"): ok(page),
        ("GET", "/api/v0/instances/1/"): ok({"instances": {"id": 1}}),
        ("PUT", "/api/v0/instances/1/"): ok({"success": True}),
        ("DELETE", "/api/v0/instances/1/"): ok({"success": True}),
        ("GET", "/api/v0/charges/"): ok({"results": [], "next_token": None}),
    }
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[(request.method, request.url.path)]

    client, _ = make_client(handler)
    client.search_offers(Resources())
    client.rent(9, **rent_kwargs())
    client.list_instances()
    client.show_instance(1)
    client.stop_instance(1)
    client.start_instance(1)
    client.set_label(1, "tether:job-7:g1")
    client.destroy_instance(1)
    client.charges()
    assert len(seen) == 9
    for request in seen:
        assert KEY not in str(request.url)
        assert "api_key" not in str(request.url)
        assert request.headers["authorization"] == f"Bearer {KEY}"


def test_a_non_json_success_is_an_error() -> None:
    client, _ = make_client(Recorder(httpx.Response(200, text="<html>maintenance</html>")))
    with pytest.raises(VastError, match="non-JSON"):
        client.list_instances()


def test_client_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="api_key"):
        VastClient("  ")
    with pytest.raises(ValueError, match="deadline_s"):
        VastClient("k", deadline_s=0)


# -- instances ------------------------------------------------------------------------------


def _pages(total: int, size: int) -> Iterator[dict[str, Any]]:
    ids = list(range(1000, 1000 + total))
    for start in range(0, total, size):
        chunk = ids[start : start + size]
        more = start + size < total
        yield {
            "success": True,
            "instances": [
                {"id": i, "actual_status": "running", "label": f"tether:j{i}:g1"} for i in chunk
            ],
            "next_token": f"tok-{chunk[-1]}" if more else None,
            "total_instances": total,
        }


def test_list_instances_follows_every_page() -> None:
    recorder = Recorder(*[ok(page) for page in _pages(57, 25)])
    client, _ = make_client(recorder)

    instances = client.list_instances()

    assert [i.id for i in instances] == list(range(1000, 1057))
    assert [r.url.path for r in recorder.requests] == ["/api/v1/instances/"] * 3
    assert [r.url.params.get("after_token") for r in recorder.requests] == [
        None,
        "tok-1024",
        "tok-1049",
    ]
    assert all(r.url.params["limit"] == "25" for r in recorder.requests)


def test_list_instances_refuses_a_looping_server() -> None:
    looping = {"instances": [{"id": 1}], "next_token": "same"}
    client, _ = make_client(Recorder(ok(looping)))
    with pytest.raises(VastError, match="same next_token"):
        client.list_instances()


def test_show_instance_parses_a_running_record() -> None:
    record = fixture("instance_show_running.json")["instances"]
    recorder = Recorder(ok(fixture("instance_show_running.json")))
    client, _ = make_client(recorder)

    instance = client.show_instance(record["id"])

    assert recorder.requests[0].url.path == f"/api/v0/instances/{record['id']}/"
    assert instance is not None
    assert instance.actual_status == "running"
    assert instance.label == "tether:job-7:g2"
    assert instance.gpu_util == 97.0
    assert instance.dph_total == pytest.approx(record["dph_base"] + record["storage_total_cost"])
    assert instance.model_extra is not None and instance.model_extra["gpu_temp"] == 61.0


def test_show_instance_right_after_a_rent_has_null_status() -> None:
    client, _ = make_client(Recorder(ok(fixture("instance_show_just_created.json"))))
    instance = client.show_instance(41877203)
    assert instance is not None
    assert instance.actual_status is None
    assert instance.intended_status == "running"
    assert instance.gpu_util is None


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(404, json={"success": False, "error": "no_such_instance", "msg": "gone"}),
        httpx.Response(410, text="Gone"),
        ok({"instances": None}),
        ok({"instances": {}}),
        ok({"instances": []}),
    ],
)
def test_show_instance_is_none_when_vast_says_it_does_not_exist(answer: httpx.Response) -> None:
    client, _ = make_client(Recorder(answer))
    assert client.show_instance(5) is None


def test_state_and_label_changes_use_the_manage_endpoint() -> None:
    recorder = Recorder(ok({"success": True}))
    client, _ = make_client(recorder)
    client.stop_instance(5)
    client.start_instance(5)
    client.set_label(5, "tether:job-7:g2")
    assert [(r.method, r.url.path) for r in recorder.requests] == [
        ("PUT", "/api/v0/instances/5/")
    ] * 3
    assert [json.loads(r.content) for r in recorder.requests] == [
        {"state": "stopped"},
        {"state": "running"},
        {"label": "tether:job-7:g2"},
    ]


def test_stopping_a_missing_instance_raises_instance_gone() -> None:
    body = {"success": False, "error": "no_such_instance", "msg": "Instance 5 not found."}
    client, _ = make_client(Recorder(httpx.Response(404, json=body)))
    with pytest.raises(InstanceGone):
        client.stop_instance(5)


def test_set_label_checks_the_length_first() -> None:
    recorder = Recorder(ok({"success": True}))
    client, _ = make_client(recorder)
    with pytest.raises(ValueError, match="256"):
        client.set_label(5, "x" * 300)
    assert recorder.requests == []


@pytest.mark.parametrize(
    "answers",
    [
        [ok({"success": True})],
        [httpx.Response(404, json={"success": False, "error": "no_such_instance", "msg": "x"})],
        [httpx.Response(410, text="Gone")],
        [ok({"success": False, "error": "no_such_instance", "msg": "x"})],
        [httpx.Response(502, text="Bad Gateway"), ok({"success": True})],
    ],
)
def test_destroy_is_idempotent(answers: list[httpx.Response]) -> None:
    recorder = Recorder(*answers)
    client, _ = make_client(recorder)
    client.destroy_instance(5)
    assert recorder.requests[-1].method == "DELETE"
    assert recorder.requests[-1].url.path == "/api/v0/instances/5/"


def test_destroy_refused_for_another_reason_raises() -> None:
    refused = ok({"success": False, "error": "locked", "msg": "instance is locked"})
    client, _ = make_client(Recorder(refused))
    with pytest.raises(VastError, match="locked"):
        client.destroy_instance(5)


# -- charges --------------------------------------------------------------------------------


def test_charges_sends_the_day_range_and_follows_pages() -> None:
    first = {
        "success": True,
        "results": [{"source": "instance-1", "amount": 0.5}],
        "next_token": "t1",
    }
    second = {
        "success": True,
        "results": [{"source": "instance-2", "amount": 0.25}],
        "next_token": None,
    }
    recorder = Recorder(ok(first), ok(second))
    client, _ = make_client(recorder)

    items = client.charges(since=1_790_000_000, until=1_790_086_400)

    assert [i["source"] for i in items] == ["instance-1", "instance-2"]
    params = recorder.requests[0].url.params
    assert json.loads(params["select_filters"]) == {
        "day": {"gte": 1_790_000_000, "lte": 1_790_086_401}
    }
    assert recorder.requests[1].url.params["after_token"] == "t1"


def test_charges_rejects_an_inverted_range() -> None:
    client, _ = make_client(Recorder(ok({"results": []})))
    with pytest.raises(ValueError, match="since"):
        client.charges(since=10, until=5)
