"""bench/lib/pairs.py: agent and s5cmd interleaved, the order alternated pair by pair, and the
median pair ratio with its spread."""

from __future__ import annotations

import pytest

from bench.lib.pairs import interleave, pair_order, ratio_summary


def test_the_order_alternates_so_neither_side_always_goes_first() -> None:
    orders = [pair_order(i) for i in range(6)]
    assert orders == [("a", "b"), ("b", "a")] * 3
    firsts = [o[0] for o in orders]
    assert firsts.count("a") == firsts.count("b")


def test_interleave_runs_a_b_b_a_and_pairs_each_with_its_partner() -> None:
    ran: list[str] = []
    counter = {"a": 0, "b": 0}

    def side(name: str, base: float) -> float:
        ran.append(name)
        counter[name] += 1
        return base + counter[name]

    pairs = interleave(5, lambda: side("a", 100.0), lambda: side("b", 200.0))
    assert "".join(ran) == "abbaabbaab"
    assert pairs == [(101.0, 201.0), (102.0, 202.0), (103.0, 203.0), (104.0, 204.0),
                     (105.0, 205.0)]  # fmt: skip
    with pytest.raises(ValueError):
        interleave(0, lambda: 1.0, lambda: 1.0)


def test_ratio_summary_is_the_median_of_pair_ratios_with_its_spread() -> None:
    # an outlier pair moves the mean, not the median
    summary = ratio_summary([(90.0, 100.0), (100.0, 100.0), (110.0, 100.0), (95.0, 100.0),
                             (300.0, 100.0)])  # fmt: skip
    assert summary.ratios == pytest.approx((0.9, 1.0, 1.1, 0.95, 3.0))
    assert summary.median == pytest.approx(1.0)
    assert (summary.stats.min, summary.stats.max) == pytest.approx((0.9, 3.0))
    assert (summary.stats.q1, summary.stats.q3) == pytest.approx((0.95, 1.1))
    assert summary.stats.mean == pytest.approx(1.39)
    assert summary.meets(0.95) and not summary.meets(1.01)
    assert summary.describe() == "median 1.00 (IQR 0.95–1.10, min–max 0.90–3.00, 5 pairs)"


def test_a_broken_measurement_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        ratio_summary([(1.0, 0.0)])
    with pytest.raises(ValueError, match="no values"):
        ratio_summary([])
