"""The Vast adapter reads listings one record at a time: odd values are normalised, a record that
still cannot be read is left out and named (`Listing.issues`), and the rest of the listing is
used. The real records in ../shared/fixtures/vast all parse with no issue."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from functions.adapters.vast import (
    RecordIssue,
    ResourcesUnavailable,
    VastError,
    describe_issues,
)
from functions.domain.jobspec import Resources
from tests.paths import SHARED
from tests.unit.adapters.vast_answers import Recorder, make_client, ok

REAL = SHARED / "fixtures" / "vast"


def listing(*records: Any) -> httpx.Response:
    return ok({"success": True, "instances": list(records), "next_token": None})


def offers(*records: Any) -> httpx.Response:
    return ok({"offers": list(records)})


def priced(offer_id: Any, **fields: Any) -> dict[str, Any]:
    return {"id": offer_id, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_base": 0.3, **fields}


# -- instances ------------------------------------------------------------------------------


def test_odd_instance_values_are_normalised_and_the_record_kept() -> None:
    odd = {
        "id": 4242,
        "actual_status": "running",
        "label": "tether:job-7:g1",
        "gpu_util": "n/a",
        "start_date": "2026-09-09T08:53:08+00:00",
        "end_date": "",
        "dph_total": "0.35",
        "inet_down": "N/A",
    }
    client, _ = make_client(Recorder(listing(odd)))

    found = client.list_instances()

    assert found.issues == ()
    (instance,) = found
    assert instance.gpu_util is None and instance.end_date is None and instance.inet_down is None
    assert instance.start_date == 1_788_943_988.0
    assert instance.dph_total == 0.35


def test_an_id_as_text_and_a_numeric_label_are_read_not_dropped() -> None:
    orphan = {"id": "31051696", "label": "tether:gone-job:g1"}
    client, _ = make_client(Recorder(listing(orphan, {"id": 7, "label": 12345})))

    found = client.list_instances()

    assert [(i.id, i.label) for i in found] == [(31051696, "tether:gone-job:g1"), (7, "12345")]
    assert found.issues == ()


@pytest.mark.parametrize(
    ("record", "named", "fields"),
    [
        ({"id": "abc", "actual_status": "running"}, '"abc"', ("id",)),
        ({"actual_status": "running", "label": "x"}, "?", ("id",)),
        ({"id": None}, "?", ("id",)),
        ({"id": 9, "actual_status": {"state": "running"}}, "9", ("actual_status",)),
        ({"id": 9, "label": ["tether:job-7:g1"]}, "9", ("label",)),
        ({"id": True}, "true", ("id",)),
        ("not a record", "?", ()),
    ],
)
def test_an_instance_without_a_readable_id_label_or_status_is_skipped_and_named(
    record: Any, named: str, fields: tuple[str, ...]
) -> None:
    good = {"id": 1, "actual_status": "running", "label": "tether:job-1:g1"}
    also_good = {"id": 3, "actual_status": "exited", "label": None}
    client, _ = make_client(Recorder(listing(good, record, also_good)))

    found = client.list_instances()

    assert [i.id for i in found] == [1, 3]
    assert found.issues == (RecordIssue("instance", named, fields, "skipped"),)
    assert found.skipped == found.issues and found.trimmed == ()


def test_an_unreadable_field_nothing_decides_on_is_dropped_not_the_instance() -> None:
    record = {"id": 77, "actual_status": "running", "label": "tether:job-7:g1", "gpu_util": "busy",
              "machine_id": {"id": 1}}  # fmt: skip
    client, _ = make_client(Recorder(listing(record)))

    found = client.list_instances()

    (instance,) = found
    assert (instance.id, instance.actual_status) == (77, "running")
    assert instance.label == "tether:job-7:g1"
    assert instance.gpu_util is None and instance.machine_id is None
    assert found.issues == (RecordIssue("instance", "77", ("gpu_util", "machine_id"), "trimmed"),)
    assert describe_issues(found.issues) == "instance 77 trimmed (gpu_util, machine_id)"


def test_show_instance_reads_odd_values_and_refuses_an_unreadable_record() -> None:
    odd = {"instances": {"id": "5", "actual_status": "loading", "gpu_util": "n/a", "label": 1}}
    client, _ = make_client(Recorder(ok(odd), ok({"instances": {"actual_status": {"x": 1}}})))

    instance = client.show_instance(5)
    assert instance is not None and (instance.id, instance.gpu_util, instance.label) == (
        5,
        None,
        "1",
    )
    with pytest.raises(VastError, match="actual_status"):
        client.show_instance(5)


# -- offers ---------------------------------------------------------------------------------


def test_an_offer_without_a_price_is_skipped_and_named() -> None:
    client, _ = make_client(
        Recorder(
            offers(
                priced(1),
                {"id": 2, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": None},
                priced(3, dph_base="n/a", dph_total=""),
                priced(4, dph_base=None, dph_total=0.5),
            )
        )
    )

    found = client.search_offers(Resources(min_disk_gb=20))

    assert [o.id for o in found] == [1, 4]
    assert found.issues == (
        RecordIssue("offer", "2", ("dph_total",), "skipped"),
        RecordIssue("offer", "3", ("dph_total",), "skipped"),
    )


def test_offers_with_numbers_as_text_are_read() -> None:
    record = priced("31732048", num_gpus="2", gpu_ram="24564", dph_base="0.35",
                    inet_down_cost="0.0026", reliability2="n/a")  # fmt: skip
    client, _ = make_client(Recorder(offers(record, priced(5, gpu_ram={"mb": 1}))))

    found = client.search_offers(Resources(min_disk_gb=20))

    (offer,) = found
    assert (offer.id, offer.num_gpus, offer.gpu_ram, offer.dph_total) == (31732048, 2, 24564, 0.35)
    assert offer.inet_down_cost == 0.0026 and offer.reliability2 is None
    assert found.issues == (RecordIssue("offer", "5", ("gpu_ram",), "skipped"),)


# -- charges --------------------------------------------------------------------------------


def test_charges_keep_what_can_be_read_and_name_the_rest() -> None:
    items = [
        {"type": "instance", "source": "instance-11", "amount": 0.5, "metadata": {}},
        {"type": "volume", "source": "volume-3", "amount": 0.1, "metadata": {}},
        {"type": "instance", "source": "instance-?", "amount": 0.2},
        {"type": "instance", "source": "instance-12", "amount": "lots"},
        "junk",
    ]
    client, _ = make_client(Recorder(ok({"results": items, "next_token": None})))

    found = client.charges(since=1_790_000_000, until=1_790_086_400)

    assert [i["source"] for i in found] == ["instance-11", "volume-3"]
    assert found.issues == (
        RecordIssue("charge", '"instance-?"', ("source",), "skipped"),
        RecordIssue("charge", '"instance-12"', ("amount",), "skipped"),
        RecordIssue("charge", "?", (), "skipped"),
    )


# -- starts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(
            400,
            json={"success": False, "error": "resources_unavailable", "msg": "GPUs are taken"},
        ),
        ok({"success": False, "error": "resources_unavailable", "msg": "GPUs are taken"}),
    ],
)
def test_a_start_refused_for_lack_of_resources_raises_resources_unavailable(
    answer: httpx.Response,
) -> None:
    client, _ = make_client(Recorder(answer))
    with pytest.raises(ResourcesUnavailable, match="GPUs are taken"):
        client.start_instance(5)


# -- the real records -----------------------------------------------------------------------


def test_every_real_record_parses_whole() -> None:
    if not REAL.exists():
        pytest.skip("../shared/fixtures/vast is not present")
    real_offers = json.loads((REAL / "offers.json").read_text())["offers"]
    real_instances = json.loads((REAL / "instances.json").read_text())["instances"]
    client, _ = make_client(Recorder(offers(*real_offers), listing(*real_instances)))

    found_offers = client.search_offers(Resources(min_disk_gb=20))
    found_instances = client.list_instances()

    assert (len(found_offers), found_offers.issues) == (len(real_offers), ())
    assert (len(found_instances), found_instances.issues) == (len(real_instances), ())
