"""The Vast simulator's offer search, driven through the real adapter."""

from __future__ import annotations

import pytest

from functions.domain.jobspec import Resources
from tests.unit.local.vast_sim_support import client_for
from tether_local.vast_sim import VastSimulator


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
