"""Spend accounting: prices, usage, a generation's and a job's spend, Vast's charges."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.domain.job import UnrecordedInstance
from functions.domain.offer import Offer
from functions.domain.spend import (
    GenerationPrices,
    GenerationSpend,
    GenerationUsage,
    UnreadableCharge,
    charges_by_instance,
    generation_spend,
    instance_charge,
    job_spend_usd,
    spend_of,
    unrecorded_spend,
    vast_charges,
)
from tests.unit.domain.builders import NOW, gen

# An RTX 4090 offer in the shape Vast returns (prices as in the real records).
OFFER = Offer.model_validate(
    {
        "id": 1,
        "gpu_name": "RTX 4090",
        "num_gpus": 1,
        "dph_base": 0.4,
        "dph_total": 0.4111,
        "storage_cost": 0.2,
        "inet_down_cost": 0.02,
        "inet_up_cost": 0.01,
    }
)
GB = 1_000_000_000


def test_prices_from_offer() -> None:
    prices = GenerationPrices.from_offer(OFFER, disk_gb=72)
    assert prices.gpu_usd_per_hour == 0.4
    assert prices.storage_usd_per_hour == pytest.approx(0.2 * 72 / 720)
    assert prices.usd_per_hour == pytest.approx(0.42)
    assert (prices.inet_down_usd_per_gb, prices.inet_up_usd_per_gb) == (0.02, 0.01)


def test_prices_from_offer_without_dph_base_use_dph_total() -> None:
    offer = Offer.model_validate({"id": 2, "dph_total": 0.5})
    assert GenerationPrices.from_offer(offer, disk_gb=10).gpu_usd_per_hour == 0.5


def test_generation_spend_sums_gpu_storage_and_traffic() -> None:
    prices = GenerationPrices.from_offer(OFFER, disk_gb=72)  # storage $0.02/h
    usage = GenerationUsage(
        running_s=2 * 3600,  # GPU billed while running
        existed_s=3 * 3600,  # storage billed while it exists, stopped included
        bytes_downloaded=60 * GB,
        bytes_uploaded=5 * GB,
    )
    spend = generation_spend(prices, usage)
    assert spend.gpu_usd == pytest.approx(0.8)
    assert spend.storage_usd == pytest.approx(0.06)
    assert spend.download_usd == pytest.approx(1.2)
    assert spend.upload_usd == pytest.approx(0.05)
    assert spend.total_usd == spend.estimated_usd == pytest.approx(2.11)


@pytest.mark.parametrize(
    ("vast_charged", "expected"),
    [(None, 1.0), (0.4, 1.0), (1.0, 1.0), (1.7, 1.7)],
    ids=["no charges yet", "charges lag", "equal", "image pull traffic we did not count"],
)
def test_reconciled_with_vast_charges_takes_the_larger(
    vast_charged: float | None, expected: float
) -> None:
    prices = GenerationPrices(gpu_usd_per_hour=1.0, storage_usd_per_hour=0.0)
    usage = GenerationUsage(running_s=3600, existed_s=3600)
    spend = generation_spend(prices, usage, vast_charged_usd=vast_charged)
    assert spend.total_usd == pytest.approx(expected)
    assert spend.estimated_usd == pytest.approx(1.0)


def test_job_spend_is_the_sum_over_generations() -> None:
    gens = [
        GenerationSpend(gpu_usd=0.1, storage_usd=0.2, download_usd=0.3, upload_usd=0.0),
        GenerationSpend(
            gpu_usd=1.0, storage_usd=0, download_usd=0, upload_usd=0, vast_charged_usd=2.0
        ),
    ]
    assert job_spend_usd(gens) == pytest.approx(2.6)
    assert job_spend_usd([]) == 0


def test_negative_usage_is_rejected() -> None:
    with pytest.raises(ValueError, match="running_s"):
        GenerationUsage(running_s=-1, existed_s=0)


def test_prices_from_real_offers_match_vast_dph_total(shared_vast_offers) -> None:
    # Vast's dph_total is GPU + storage for the searched disk size (storage_total_cost $/h):
    # our hourly price for that disk size must agree with it on every real record.
    offers = json.loads(shared_vast_offers.read_text())["offers"]
    checked = 0
    for raw in offers:
        if not (raw.get("storage_total_cost") and raw.get("storage_cost") and raw.get("dph_base")):
            continue
        disk_gb = raw["storage_total_cost"] * 720 / raw["storage_cost"]
        prices = GenerationPrices.from_offer(Offer.model_validate(raw), disk_gb=disk_gb)
        assert prices.usd_per_hour == pytest.approx(raw["dph_total"], rel=1e-9), raw["id"]
        checked += 1
    assert checked >= 10


# --- a generation's spend, from what the table holds ------------------------------------------


def test_spend_is_price_times_seconds_plus_traffic_and_vast_wins_when_higher() -> None:
    g = gen().model_copy(
        update={"heartbeat": gen().heartbeat.model_copy(update={"bytes_downloaded": 10**10})}  # type: ignore[union-attr]
    )
    spend = spend_of(g, NOW)
    assert spend.estimated_usd == pytest.approx(0.5 * 600 / 3600 + 10 * 0.01)
    assert spend_of(g, NOW, vast_charged_usd=5.0).total_usd == 5.0
    ended = g.model_copy(update={"ended_at": NOW - 300})
    assert spend_of(ended, NOW).gpu_usd == pytest.approx(0.4 * 300 / 3600)


def test_charges_sum_per_instance() -> None:
    rows: list[dict[str, Any]] = [
        {"amount": 1.5, "metadata": {"instance_id": 9}},
        {"amount": 0.5, "metadata": {"instance_id": 9}},
        {"amount": 2},
    ]
    assert charges_by_instance(rows) == {9: 2.0}


# Items of GET /api/v0/charges/ as the real API sends them: the instance is named only in
# `source` (sources in functions/domain/spend.py::instance_charge).
REAL_SHAPED = {
    "start": 1_790_000_000.0,
    "end": 1_790_086_400.0,
    "type": "instance",
    "source": "instance-31051696",
    "description": "Instance 31051696 Charges - 1.00 days",
    "amount": 3.25,
    "metadata": {"label": "tether:job-7:g1", "template_id": None},
    "items": [{"start": 1_790_000_000.0, "end": 1_790_086_400.0, "type": "gpu", "source": None,
               "description": "24.000 hours at $0.130/hour", "amount": 3.12, "items": []}],
}  # fmt: skip


def test_charges_are_reconciled_from_source_as_vast_sends_them() -> None:
    rows = [
        REAL_SHAPED,
        {**REAL_SHAPED, "amount": 0.75},  # a second row of the same contract adds up
        {**REAL_SHAPED, "source": "instance-42", "amount": "1.5"},
        {**REAL_SHAPED, "type": "volume", "source": "volume-7", "amount": 9.0},
        {**REAL_SHAPED, "type": "serverless", "source": "endpoint-3", "amount": 9.0},
    ]
    assert charges_by_instance(rows) == {31051696: 4.0, 42: 1.5}


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"source": "Instance-5", "amount": 1.0}, 5),
        ({"source": " instance_5 ", "amount": 1.0}, 5),
        ({"type": "instance", "source": "5", "amount": 1.0}, 5),
        ({"type": "instance", "source": 5, "amount": 1.0}, 5),
        ({"amount": 1.0, "metadata": {"instance_id": "5"}}, 5),
        ({"source": "workergroup-5", "amount": 1.0}, None),
        ({"type": "Volume", "source": None, "amount": 1.0}, None),
    ],
)
def test_each_shape_of_an_instance_charge_names_its_instance(
    row: dict[str, Any], expected: int | None
) -> None:
    charge = instance_charge(row)
    assert (charge.instance_id if charge else None) == expected


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"type": "instance", "source": "instance-", "amount": 1.0}, "source"),
        ({"type": "instance", "source": None, "amount": 1.0}, "source"),
        ({"source": "instance-0", "amount": 1.0}, "source"),
        ({"amount": 1.0}, "source"),
        ({"source": "instance-5", "amount": None}, "amount"),
        ({"source": "instance-5", "amount": True}, "amount"),
        ({"source": "instance-5", "amount": "$1"}, "amount"),
    ],
)
def test_an_instance_charge_that_cannot_be_read_names_the_field(
    row: dict[str, Any], field: str
) -> None:
    with pytest.raises(UnreadableCharge) as raised:
        instance_charge(row)
    assert raised.value.field == field
    assert charges_by_instance([row, REAL_SHAPED]) == {31051696: 3.25}


HOUR = 3600.0
# $0.40/h GPU and $0.01/h of disk: $0.41/h while running, $0.01/h while stopped.
PRICES = {"gpu_usd_per_hour": 0.40, "storage_usd_per_hour": 0.01}


@pytest.mark.parametrize(
    ("case", "fields", "expected_usd"),
    [
        ("12 h running", {}, 12 * 0.41),
        (
            "3 h running, then stopped for 9 h and still stopped (the issue's $1.32)",
            {"observed_status": "stopped", "observed_status_since": NOW - 9 * HOUR},
            3 * 0.40 + 12 * 0.01,
        ),
        (
            "a closed stopped stretch of 4 h, running again since",
            {
                "stopped_s": 4 * HOUR,
                "observed_status": "running",
                "observed_status_since": NOW - HOUR,
            },
            8 * 0.40 + 12 * 0.01,
        ),
        (
            "stopped 9 h, ended 1 h ago: the stretch ends with the instance",
            {
                "observed_status": "stopped",
                "observed_status_since": NOW - 9 * HOUR,
                "ended_at": NOW - HOUR,
            },
            3 * 0.40 + 11 * 0.01,
        ),
        (
            "gone from Vast for 2 h: nothing billed since",
            {"observed_status": "gone", "observed_status_since": NOW - 2 * HOUR},
            10 * 0.41,
        ),
    ],
)
def test_stopped_time_is_billed_at_the_storage_rate_only(
    case: str, fields: dict[str, Any], expected_usd: float
) -> None:
    g = gen(created_at=NOW - 12 * HOUR, prices=PRICES, usd_per_hour=0.41, beat_age=None, **fields)
    assert spend_of(g, NOW).total_usd == pytest.approx(expected_usd), case


def test_an_unrecorded_instance_costs_its_price_from_start_to_last_sighting() -> None:
    seen = UnrecordedInstance(instance_id=9, start=NOW - HOUR, last_seen=NOW, usd_per_hour=0.5)
    assert unrecorded_spend(seen).total_usd == pytest.approx(0.5)
    assert unrecorded_spend(seen, vast_charged_usd=0.7).total_usd == pytest.approx(0.7)


def test_charges_carry_the_label_each_instance_was_billed_under() -> None:
    rows = [
        {"type": "instance", "source": "instance-5", "amount": 0.2,
         "metadata": {"label": "tether:j-0123abcd:g2"}},
        {"type": "instance", "source": "instance-5", "amount": 0.1, "metadata": {}},
        {"type": "instance", "source": "instance-6", "amount": 0.3, "metadata": None},
    ]  # fmt: skip
    charges = vast_charges(rows)
    assert charges.amounts == {5: pytest.approx(0.3), 6: 0.3}
    assert charges.labels == {5: "tether:j-0123abcd:g2"}
