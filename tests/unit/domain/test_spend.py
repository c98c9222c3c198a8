"""Spend accounting and the lease."""

from __future__ import annotations

import json

import pytest

from functions.domain.offer import Offer
from functions.domain.spend import (
    GenerationPrices,
    GenerationSpend,
    GenerationUsage,
    generation_spend,
    job_spend_usd,
    lease_expires_at,
    lease_s,
)

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


@pytest.mark.parametrize(
    ("window", "budget", "spent", "rate", "expected"),
    [
        (10_800, 100, 0, 1.0, 10_800),  # plenty of money: the window
        (10_800, 10, 9, 2.0, 1800),  # $1 left at $2/h: half an hour
        (10_800, 10, 7, 1.0, 10_800),  # exactly 3 h of money: the window
        (10_800, 10, 10, 1.0, 0),  # nothing left
        (10_800, 10, 12, 1.0, 0),  # past the cap
        (10_800, 10, 0, 0.0, 10_800),  # a free host
    ],
)
def test_lease(window: float, budget: float, spent: float, rate: float, expected: float) -> None:
    assert lease_s(
        lease_window_s=window, budget_usd=budget, spent_usd=spent, usd_per_hour=rate
    ) == pytest.approx(expected)


def test_lease_bounds_overspend_with_a_dead_supervisor() -> None:
    # Running the whole lease at the current price never passes the budget (invariant 4).
    for spent in (0.0, 3.3, 9.99):
        lease = lease_s(lease_window_s=10_800, budget_usd=10, spent_usd=spent, usd_per_hour=7.5)
        assert spent + 7.5 * lease / 3600 <= 10 + 1e-9


def test_lease_expires_at_is_now_plus_lease() -> None:
    assert (
        lease_expires_at(1000.0, lease_window_s=600, budget_usd=10, spent_usd=0, usd_per_hour=1)
        == 1600.0
    )


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
