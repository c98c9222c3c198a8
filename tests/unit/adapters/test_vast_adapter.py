"""The Vast adapter's offer search and rent, against canned answers in the real API's shapes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from functions.adapters.vast import (
    OfferGone,
    VastError,
    VastInvalidArgs,
    VastUnavailable,
    offer_query,
)
from functions.domain.jobspec import Resources
from tests.unit.adapters.vast_answers import (
    KEY,
    RATE_LIMIT_TEXT,
    Recorder,
    fixture,
    make_client,
    ok,
    rent_kwargs,
)

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


def test_a_job_that_may_bid_leaves_the_price_cap_to_the_planner() -> None:
    # The cap applies to the bid for interruptible hosts, which the search's dph_total is not.
    for market in ("interruptible", "auto"):
        query = offer_query(Resources(max_usd_per_hour=0.5, market=market), 40, 10)
        assert "dph_total" not in query
    assert offer_query(Resources(max_usd_per_hour=0.5), 40, 10)["dph_total"] == {"lte": 0.5}


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
        ({"label": ""}, 9, "label must be a non-empty"),
        ({"disk_gb": "8"}, 9, "disk_gb must be a number"),
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


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"label": "x" * 257}, "label"),
        ({"onstart": "x" * 4049, "runtype": "ssh"}, "onstart"),
        # args mode: `bash -c <script>` is 8 + 4089 = 4097 characters of args
        ({"onstart": "x" * 4089}, "args+args_str+onstart"),
        ({"disk_gb": 7.5}, "disk"),
        ({"image": "i" * 1025}, "image"),
        ({"env": {"TETHER_X": "v" * 257}}, "env.TETHER_X"),
        ({"env": {f"V{i:03d}": "v" * 250 for i in range(130)}}, "env"),
    ],
)
def test_rent_over_a_vast_bound_is_never_sent(overrides: dict[str, Any], field: str) -> None:
    recorder = Recorder(ok({"success": True, "new_contract": 1}))
    client, _ = make_client(recorder)
    with pytest.raises(VastInvalidArgs) as caught:
        client.rent(9, **rent_kwargs(**overrides))
    assert caught.value.field == field
    assert caught.value.status is None  # no answer: it was never sent
    assert field in str(caught.value)
    assert recorder.requests == []


def test_rent_limits_are_inclusive() -> None:
    recorder = Recorder(ok({"success": True, "new_contract": 1}))
    client, _ = make_client(recorder)
    client.rent(9, **rent_kwargs(label="x" * 256, onstart="y" * 4048, disk_gb=8))
    client.rent(9, **rent_kwargs(onstart="y" * 4088, image="i" * 1024))
    client.rent(9, **rent_kwargs(env={"TETHER_X": "v" * 256}), price=128)
    client.rent(9, **rent_kwargs(runtype="ssh", onstart="y" * 4048), price=0.001)
    assert len(recorder.requests) == 4


@pytest.mark.parametrize(
    ("status", "body", "field"),
    [
        (400, {"success": False, "error": "invalid_args",
               "msg": "env.TETHER_RUN: 300 characters; a value may have at most 256"},
         "env.TETHER_RUN"),
        (400, {"success": False, "error": "invalid_args",
               "msg": "error 400/3467: Invalid args: 'id' is required and must be a valid offer ID",
               "ask_id": 9},
         "id"),
        (400, {"success": False, "error": "invalid_args", "msg": "Invalid args"}, "request"),
        (200, {"success": False, "error": "invalid_args", "msg": "label: too long"}, "label"),
    ],
)  # fmt: skip
def test_rent_refused_with_invalid_args_is_typed_with_vasts_message(
    status: int, body: dict[str, Any], field: str
) -> None:
    recorder = Recorder(httpx.Response(status, json=body))
    client, sleeps = make_client(recorder)
    with pytest.raises(VastInvalidArgs) as caught:
        client.rent(9, **rent_kwargs())
    assert isinstance(caught.value, VastError)  # handlers of VastError still catch it
    assert (caught.value.status, caught.value.code, caught.value.field) == (
        status, "invalid_args", field,
    )  # fmt: skip
    assert caught.value.message == body["msg"]
    assert len(recorder.requests) == 1 and sleeps == []


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
