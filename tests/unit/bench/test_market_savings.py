"""The market-savings benchmark (bench/market_savings.py): auto against on-demand, by hazard.

The hand case is tests/unit/domain/test_market.py's: one offer at $1.8285 on demand and
1.417425 + 1.4217 × hazard as a bid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.market_savings import HAZARDS, compare, run, run_shared, with_market
from functions.domain.jobspec import parse_job
from functions.domain.offer import Offer

JOB = parse_job({
    "name": "hand", "image": "i", "run": "r", "budget_usd": 50, "expected_hours": 2,
    "expected_startup_min": 5.5,
    "resources": {"min_disk_gb": 40, "min_reliability": 0, "min_download_mbps": 0},
    "data": {"download_gb": 30, "upload_gb_per_checkpoint": 0},
    "checkpoint": {"interval_min": 30},
})  # fmt: skip
RECORD: dict[str, Any] = {
    "id": 1, "machine_id": 1, "gpu_name": "RTX 4090", "num_gpus": 1, "gpu_ram": 24564,
    "disk_space": 500, "dph_base": 0.40, "min_bid": 0.20, "storage_cost": 0, "inet_down": 8000,
    "inet_up": 8000, "inet_down_cost": 0.02, "inet_up_cost": 0, "reliability2": 0.8,
    "rentable": True, "rented": False,
}  # fmt: skip


def test_with_market_sets_only_the_market_and_the_hazard():
    auto = with_market(JOB, "auto", 0.5)
    assert auto.resources.market == "auto" and auto.resources.outbid_hazard_per_hour == 0.5
    assert auto.resources.model_dump(exclude={"market", "outbid_hazard_per_hour"}) == (
        JOB.resources.model_dump(exclude={"market", "outbid_hazard_per_hour"})
    )


def test_auto_saves_at_a_low_hazard_and_nothing_at_a_high_one():
    offer = Offer.model_validate(RECORD)
    low = compare(JOB, [offer], 0.1)
    assert low is not None
    assert low.on_demand_usd == pytest.approx(1.8285)
    assert low.auto_usd == pytest.approx(1.559595)
    assert low.saving == pytest.approx(1 - 1.559595 / 1.8285)
    assert low.auto_market == "interruptible" and low.auto_bid_usd_per_hour == pytest.approx(0.22)
    high = compare(JOB, [offer], 0.5)
    assert high is not None
    assert high.saving == 0 and high.auto_market == "on-demand"


def test_a_book_only_auto_can_rent_is_left_out():
    capped = parse_job({**JOB.model_dump(), "resources": {**JOB.resources.model_dump(),
                                                          "max_usd_per_hour": 0.3}})  # fmt: skip
    assert compare(capped, [Offer.model_validate(RECORD)], 0.1) is None


def test_run_reports_every_job_and_hazard_and_skips_absent_records(tmp_path: Path):
    results = run(seeds=2, count=60, shared=tmp_path / "absent.json")
    assert results["shared_fixture"] is None
    assert results["hazards_per_hour"] == list(HAZARDS)
    for by_hazard in results["jobs"].values():
        assert set(by_hazard) == {str(h) for h in HAZARDS}
        for summary in by_hazard.values():
            if summary is not None:
                assert 0 <= summary["saving"]["min"] <= summary["saving"]["max"] < 1
                assert 0 <= summary["interruptible_share"] <= 1


def test_run_shared_prices_each_job_on_a_records_file(tmp_path: Path):
    path = tmp_path / "offers.json"
    path.write_text(json.dumps({"offers": [RECORD]}))
    shared = run_shared({"hand": JOB}, path)
    assert shared is not None and shared["offers"] == 1
    by_hazard = shared["jobs"]["hand"]
    assert by_hazard["0.1"]["saving"] == pytest.approx(1 - 1.559595 / 1.8285)
    assert by_hazard["0.5"]["auto_market"] == "on-demand"
