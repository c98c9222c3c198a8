"""The seeded offer book: reproducible, parseable, and shaped like the real market."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from functions.domain.offer import Offer
from tether_local.vast_sim.offers import generate_offers, main, price_for_storage

BOOK = generate_offers(500, seed=7)


def test_the_same_seed_gives_the_same_book() -> None:
    assert generate_offers(50, seed=3) == generate_offers(50, seed=3)
    assert generate_offers(50, seed=3) != generate_offers(50, seed=4)
    assert generate_offers(0, seed=3) == []
    assert generate_offers(80, seed=3)[:50] == generate_offers(50, seed=3)


def test_every_record_parses_as_an_offer_with_a_unique_id() -> None:
    offers = [Offer.model_validate(record) for record in BOOK]
    assert len({o.id for o in offers}) == len(offers)
    assert all(record["ask_contract_id"] == record["id"] for record in BOOK)


def test_values_are_in_realistic_ranges() -> None:
    for r in BOOK:
        assert r["num_gpus"] in {1, 2, 3, 4, 6, 8}
        assert r["gpu_total_ram"] == r["gpu_ram"] * r["num_gpus"]
        assert 8_000 <= r["gpu_ram"] <= 150_000  # MB
        assert 0.8 <= r["reliability"] <= 1 and r["reliability2"] == r["reliability"]
        assert 0 <= r["inet_down_cost"] <= 0.06 and 0 <= r["inet_up_cost"] <= 0.06  # $/GB
        assert r["internet_down_cost_per_tb"] == pytest.approx(r["inet_down_cost"] * 1024)
        assert r["storage_total_cost"] == pytest.approx(r["storage_cost"] * 8 / 720)
        assert r["dph_total"] == pytest.approx(r["dph_base"] + r["storage_total_cost"])
        assert r["search"]["totalHour"] == r["dph_total"]
        assert 0.02 <= r["dph_base"] <= 40
        assert r["disk_space"] >= 10
        assert r["verification"] in {"verified", "unverified", "deverified"}
        assert r["rentable"] is True and r["rented"] is False
        assert r["geolocation"]


def test_the_book_has_the_traffic_cost_spread_of_the_real_market() -> None:
    down = [r["inet_down_cost"] for r in BOOK]
    assert any(cost == 0 for cost in down)
    assert min(c for c in down if c > 0) <= 0.0015
    assert max(down) >= 0.03
    typical = Counter(round(c, 6) for c in down).most_common(1)[0][0]
    assert typical == pytest.approx(2 * 4 / 3 / 1024, abs=1e-6)  # host $2/TB × 4/3
    speeds = [r["inet_down"] for r in BOOK]
    assert min(speeds) < 100  # slow hosts, tens of Mbit/s
    assert max(speeds) > 5000


def test_the_book_has_the_common_gpu_models_with_sensible_prices() -> None:
    names = Counter(r["gpu_name"] for r in BOOK)
    for model in ("RTX 3090", "RTX 4090", "RTX 5090", "RTX A6000", "L40S", "A100 SXM4",
                  "H100 SXM", "Tesla V100"):  # fmt: skip
        assert names[model] > 0, model
    per_gpu = {
        name: sorted(r["dph_base"] / r["num_gpus"] for r in BOOK if r["gpu_name"] == name)
        for name in ("RTX 3090", "H100 SXM")
    }
    assert max(per_gpu["RTX 3090"]) < min(per_gpu["H100 SXM"])


def test_float_noise_like_the_real_client_prices() -> None:
    # Client prices are host prices × 4/3, e.g. 0.19999999999999998 for a $0.15 listing.
    assert any(r["storage_cost"] != round(r["storage_cost"], 4) for r in BOOK)
    assert any(r["driver_vers"] is None for r in BOOK)


def test_prices_follow_the_allocated_disk() -> None:
    record = BOOK[0]
    priced = price_for_storage(record, 100)
    assert priced["dph_total"] == pytest.approx(
        record["dph_base"] + record["storage_cost"] * 100 / 720
    )
    assert priced["search"]["diskHour"] == pytest.approx(record["storage_cost"] * 100 / 720)
    assert record["storage_total_cost"] == pytest.approx(record["storage_cost"] * 8 / 720)
    big = generate_offers(5, seed=1, allocated_gb=200)
    assert all(r["storage_total_cost"] == pytest.approx(r["storage_cost"] * 200 / 720) for r in big)


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="count"):
        generate_offers(-1, seed=0)


def test_the_command_prints_the_offers_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--count", "5", "--seed", "3"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == {"offers": generate_offers(5, seed=3)}


def test_the_command_rejects_a_negative_count(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--count", "-3"])
    assert caught.value.code == 2
    assert "--count" in capsys.readouterr().err


def test_generated_records_have_the_fields_of_real_records(shared_vast_offers: Path) -> None:
    real = json.loads(shared_vast_offers.read_text())["offers"]
    common = Counter(key for record in real for key in record)
    usual = {key for key, n in common.items() if n >= 0.8 * len(real)}
    missing = usual - set(BOOK[0])
    assert not missing, f"generated offers lack fields real offers have: {sorted(missing)}"
    for key in usual:
        types = {type(r[key]) for r in real if r.get(key) is not None}
        if types and BOOK[0].get(key) is not None:
            generated = type(BOOK[0][key])
            assert generated in types or {generated, *types} <= {int, float}, key
