"""bench/lib/pairs.py: agent and s5cmd interleaved, the order alternated pair by pair, and the
median pair ratio with its spread."""

from __future__ import annotations

from typing import Any

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


def transfer_run(
    restore: list[tuple[float, float]], cpu_restore: float, loads: list[float]
) -> dict[str, Any]:
    """One `transfer_bench` result at 128 MiB, as the headline reads it."""
    from bench.lib.report import quartiles

    return {
        "mib": 128.00002,
        "pairs": len(restore),
        "restore_ratio": ratio_summary(restore),
        "upload_ratio": ratio_summary([(99.0, 100.0)] * len(restore)),
        "agent_cpu_s_per_gib": {"upload": 2.0, "restore": cpu_restore, "restore_system": 0.7},
        "s5cmd_cpu_s_per_gib": {"upload": 2.4, "restore": 0.9, "restore_system": 0.8},
        "agent_restore_read_paths": [{"socket readinto": 11}] * len(restore),
        "load_1min": quartiles(loads),
    }


def test_the_transfer_headline_carries_both_ratios_cpu_per_gib_read_path_and_load() -> None:
    from bench.agent_transfer import headline

    one = transfer_run([(90.0, 100.0), (100.0, 100.0), (120.0, 100.0)], 1.5, [1.0, 2.0, 4.0])
    got = headline([one])
    assert (got["mib"], got["runs"], got["pairs"]) == (128, 1, 3)
    assert got["restore_ratio_median"] == pytest.approx(1.0)
    assert got["restore_ratio_iqr"] == pytest.approx([0.95, 1.1])
    assert got["restore_ratio_run_medians"] == pytest.approx([1.0])
    assert got["restore_meets_goal"] is True
    assert got["upload_ratio_median"] == pytest.approx(0.99)
    assert got["upload_meets_goal"] is True
    assert (got["agent_restore_cpu_s_per_gib"], got["s5cmd_restore_cpu_s_per_gib"]) == (1.5, 0.9)
    assert got["agent_restore_system_cpu_s_per_gib"] == 0.7
    assert got["s5cmd_restore_system_cpu_s_per_gib"] == 0.8
    assert (got["agent_upload_cpu_s_per_gib"], got["s5cmd_upload_cpu_s_per_gib"]) == (2.0, 2.4)
    assert got["agent_restore_read_paths"] == {"socket readinto": 33}
    assert got["agent_restore_write_kib"] == 32
    assert (got["load_1min_median"], got["load_1min_min"], got["load_1min_max"]) == (2.0, 1.0, 4.0)


def test_the_headline_of_several_runs_pools_their_pairs_and_keeps_each_run_median() -> None:
    from bench.agent_transfer import headline

    low = transfer_run([(70.0, 100.0), (80.0, 100.0), (90.0, 100.0)], 2.0, [1.0, 1.0, 1.0])
    high = transfer_run([(100.0, 100.0), (110.0, 100.0), (120.0, 100.0)], 1.0, [3.0, 3.0, 5.0])
    got = headline([low, high])
    assert (got["runs"], got["pairs"]) == (2, 6)
    assert got["restore_ratio_run_medians"] == pytest.approx([0.8, 1.1])
    assert got["restore_ratio_median"] == pytest.approx(0.95)  # of the six pairs
    assert got["restore_meets_goal"] is True
    assert got["agent_restore_cpu_s_per_gib"] == pytest.approx(1.5)
    assert got["agent_restore_read_paths"] == {"socket readinto": 66}
    assert (got["load_1min_median"], got["load_1min_min"], got["load_1min_max"]) == (2.0, 1.0, 5.0)
