"""The pure arithmetic of the benchmarks: savings statistics, DynamoDB units, Vast pages."""

from __future__ import annotations

import pytest

from bench.lib.meter import AwsMeter, item_size, read_units, value_size, write_units
from bench.lib.report import quartiles
from bench.monitor_scale import expected_vast_calls
from bench.planner_savings import JobSavings, choose, saving_pct
from functions.domain.jobspec import parse_job
from functions.domain.offer import Offer


def test_quartiles_inclusive_and_single_value() -> None:
    q = quartiles([0.0, 10.0, 20.0, 30.0, 40.0])
    assert (q.q1, q.median, q.q3, q.mean, q.n) == (10.0, 20.0, 30.0, 20.0, 5)
    one = quartiles([7.0])
    assert (one.q1, one.median, one.q3) == (7.0, 7.0, 7.0)
    with pytest.raises(ValueError, match="no values"):
        quartiles([])


def test_saving_pct_is_share_of_the_baseline() -> None:
    assert saving_pct(0.19, 0.81) == pytest.approx(76.54, abs=0.01)
    assert saving_pct(1.0, 1.0) == 0.0
    assert saving_pct(1.0, 0.0) == 0.0  # a free baseline cannot be beaten


def _offer(offer_id: int, dph: float, down_cost: float, **extra: object) -> Offer:
    return Offer.model_validate(
        {"id": offer_id, "machine_id": offer_id, "gpu_name": "RTX 4090", "num_gpus": 1,
         "gpu_ram": 24564, "disk_space": 100, "dph_base": dph, "dph_total": dph,
         "storage_cost": 0.1, "inet_down": 1000, "inet_up": 500, "inet_down_cost": down_cost,
         "inet_up_cost": 0.004, "reliability2": 0.99, "rentable": True, "rented": False, **extra}
    )  # fmt: skip


def test_choose_prefers_full_cost_over_cheap_hour_with_expensive_traffic() -> None:
    job = parse_job({
        "name": "t", "image": "i", "run": "r", "budget_usd": 10, "expected_hours": 1,
        "resources": {"gpu_names": ["RTX 4090"], "min_disk_gb": 20},
        "data": {"download_gb": 20},
    })  # fmt: skip
    cheap_hour = _offer(1, 0.30, 0.05)  # $1.00 of download traffic
    fair = _offer(2, 0.35, 0.002)
    gone = _offer(3, 0.10, 0.0, rented=True)  # cheapest, but not rentable: never chosen
    choices = choose(job, [cheap_hour, fair, gone])
    assert choices is not None
    assert choices.tether.offer.id == 2
    assert choices.cheapest_per_hour.offer.id == 1 and choices.dstack_rule.offer.id == 1
    savings = JobSavings()
    savings.add(choices)
    savings.add(None)
    summary = savings.summary()
    assert summary["books_without_offer"] == 1 and summary["books_where_choice_differs"] == 1
    assert summary["saving_pct_vs_dstack_rule"].median > 40


def test_choose_without_qualifying_offer() -> None:
    job = parse_job({"name": "t", "image": "i", "run": "r", "budget_usd": 10, "expected_hours": 1,
                     "resources": {"gpu_names": ["H100 SXM"]}})  # fmt: skip
    assert choose(job, [_offer(1, 0.3, 0.0)]) is None


def test_dynamodb_item_sizes_follow_the_published_rules() -> None:
    assert value_size({"S": "héllo"}) == 6  # UTF-8 bytes
    assert value_size({"N": "12345"}) == 4  # 5 significant digits → 3 bytes + 1
    assert value_size({"BOOL": True}) == 1
    assert value_size({"M": {"a": {"S": "xy"}}}) == 3 + 1 + 1 + 2
    assert item_size({"pk": {"S": "JOB#1"}, "n": {"N": "1"}}) == 2 + 5 + 1 + 2


def test_read_and_write_units() -> None:
    assert read_units([5000], consistent=True, together=False) == 2
    assert read_units([1000, 1000, 1000], consistent=False, together=True) == 0.5
    assert read_units([1000, 1000, 1000], consistent=True, together=False) == 3
    assert write_units(1500) == 2
    assert write_units(1500, indexes=2) == 6
    assert write_units(100, transactional=True) == 2


def test_meter_prices_an_update_by_the_size_it_last_saw() -> None:
    meter = AwsMeter(index_keys=("active_pk",))
    big = {"pk": {"S": "JOB#1"}, "sk": {"S": "JOB"}, "active_pk": {"S": "A"},
           "blob": {"S": "x" * 3000}}  # fmt: skip
    meter._dynamodb("PutItem", {"Item": big}, {})
    assert meter.write_units == 3 * 2  # 3 KB, once for the table and once for the index
    meter._dynamodb("UpdateItem", {"Key": {"pk": big["pk"], "sk": big["sk"]}}, {})
    assert meter.write_units == 12 and meter.items_written == 2
    meter._dynamodb("GetItem", {"ConsistentRead": True}, {})  # nothing found: still one read
    assert meter.read_units == 1


def test_meter_counts_the_index_reads_apart() -> None:
    meter = AwsMeter(index_keys=("active_pk",))
    item = {"pk": {"S": "JOB#1"}, "sk": {"S": "JOB"}, "blob": {"S": "x" * 6000}}
    meter._dynamodb("Query", {"IndexName": "ActiveJobs"}, {"Items": [item]})
    meter._dynamodb("Query", {}, {"Items": [item]})  # the table itself
    assert meter.index_read_units == 1  # 6 KB eventually consistent: 2 units halved
    assert meter.read_units == 2
    assert meter.snapshot()["dynamodb_index_read_units"] == 1
    meter.reset()
    assert meter.index_read_units == 0


def test_vast_calls_grow_with_pages() -> None:
    assert expected_vast_calls(1000, 1000) == 40 + 2
    assert expected_vast_calls(25, 3) == 2
    assert expected_vast_calls(0, 0) == 2
