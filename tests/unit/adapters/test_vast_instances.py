"""The Vast adapter's instance calls (list, show, manage, destroy) and billing (charges)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.adapters.vast import (
    InstanceGone,
    VastError,
)
from tests.unit.adapters.vast_answers import (
    Recorder,
    fixture,
    make_client,
    ok,
)

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


def test_list_instances_filters_on_a_label_range_or_one_label() -> None:
    recorder = Recorder(*[ok(page) for page in _pages(3, 25)], *[ok(p) for p in _pages(1, 25)])
    client, _ = make_client(recorder)

    client.list_instances(label_range=("tether.4", "tether.8"))
    client.list_instances(label="tether.4:j-0123abcd:g2")

    filters = [json.loads(r.url.params["select_filters"]) for r in recorder.requests]
    assert filters == [
        {"label": {"gte": "tether.4", "lt": "tether.8"}},
        {"label": {"eq": "tether.4:j-0123abcd:g2"}},
    ]
