"""`make bench`'s summary: this run's figures beside their goals, a miss said as plainly as a hit,
and nothing from an older run shown as this one's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench.lib import summary


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(summary, "RESULTS", tmp_path)
    return tmp_path


def write(results: Path, name: str, data: dict[str, Any], *, mtime: float | None = None) -> None:
    path = results / f"{name}.json"
    path.write_text(json.dumps(data))
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def transfer(restore_median: float) -> dict[str, Any]:
    ratio = {"median": restore_median, "q1": restore_median - 0.1, "q3": restore_median + 0.1}
    return {
        "goal": 0.95,
        "sizes": [
            {
                "mib": 128.0,
                "pairs": 5,
                "upload_ratio": {"median": 1.02},
                "restore_ratio": ratio,
                "agent_cpu_s_per_gib": {"restore": 1.2},
                "s5cmd_cpu_s_per_gib": {"restore": 0.9},
                "agent_restore_read_paths": [{"socket readinto": 11}, {"socket readinto": 11}],
                "load_1min": {"median": 1.3},
            }
        ],
    }


def test_a_missed_goal_is_printed_as_plainly_as_a_met_one(results: Path) -> None:
    write(results, "agent_transfer_quick", transfer(0.83))
    heartbeat = {"bytecode_s": {"median": 0.29}, "no_bytecode_s": {"median": 0.69}}
    write(
        results, "cold_start_quick", {"goal_heartbeat_s": 0.5, "handlers": {"heartbeat": heartbeat}}
    )
    text = "\n".join(summary.summarize(since=None, quick=True))
    assert "0.83 (0.73–0.93)" in text and "NOT met" in text
    assert "socket readinto ×22" in text  # the read path each restore took, summed
    assert "the heartbeat's cold import ≤ 0.5 s: met" in text


def test_the_transfer_row_pools_the_runs_from_the_headline(results: Path) -> None:
    pooled = {
        "mib": 128,
        "runs": 3,
        "pairs": 15,
        "upload_ratio_median": 0.99,
        "restore_ratio_median": 1.06,
        "restore_ratio_iqr": [0.94, 1.47],
        "restore_ratio_run_medians": [0.95, 1.15, 0.96],
        "agent_restore_cpu_s_per_gib": 2.36,
        "s5cmd_restore_cpu_s_per_gib": 2.72,
        "agent_restore_read_paths": {"socket readinto": 165},
        "load_1min_median": 1.4,
    }
    write(results, "agent_transfer_quick", {**transfer(0.5), "headline": [pooled]})
    text = "\n".join(summary.summarize(since=None, quick=True))
    assert "128 MiB, 3 run(s) × 15 pairs" in text
    assert "1.06 (0.94–1.47)" in text and "0.95, 1.15, 0.96" in text
    assert "socket readinto ×165" in text
    assert "0.50" not in text  # one run's row is not shown beside the pooled one


def test_a_result_older_than_the_run_is_not_shown_as_this_runs(results: Path) -> None:
    write(results, "agent_transfer_quick", transfer(0.99), mtime=1_000.0)
    text = "\n".join(summary.summarize(since=2_000.0, quick=True))
    assert "0.99" not in text
    assert "no result from this run: bench/results/agent_transfer*.json" in text


def test_a_quick_run_reads_a_bench_that_writes_one_name_for_both(results: Path) -> None:
    idle = {"usd_list_price_with_alarms": 0.923, "usd_list_price_with_alarms_and_dashboard": 3.923}
    write(
        results, "control_plane_cost", {"priced": {"job_hour": {"usd": 0.0021}, "idle_month": idle}}
    )
    text = "\n".join(summary.summarize(since=None, quick=True))
    assert "per job-hour ≤ $0.0015: NOT met" in text
    assert "idle month ≤ $1 with the alarms on: met" in text
    assert "$3.923" in text


def test_the_planner_regret_prints_each_rule_per_truth_and_its_goals(results: Path) -> None:
    from bench.planner_regret import BOUND, DSTACK, TETHER_AFTER, TETHER_FIRST, goals_of

    def row(first: float, after: float, dstack: float, bound: float) -> dict[str, Any]:
        cells = {TETHER_FIRST: first, TETHER_AFTER: after, DSTACK: dstack, BOUND: bound}
        return {rule: {"median": m, "p90": 2 * m} for rule, m in cells.items()}

    by_truth = {"sublinear": row(0.089, 0.065, 0.174, 0.102), "flat": row(0.30, 0.06, 0.127, 0.05)}
    data: dict[str, Any] = {"summary": {"qlora-7b": by_truth}}
    data["goals"] = goals_of(data["summary"], {"qlora-7b": True})
    write(results, "planner_regret_quick", data)
    text = "\n".join(summary.summarize(since=None, quick=True))
    assert "qlora-7b: regret median / p90 per truth" in text
    first = next(line for line in text.splitlines() if TETHER_FIRST in line)
    assert "8.9 % / 17.8 %" in first and "30.0 % / 60.0 %" in first
    assert "qlora-7b: first-run median ≤ 20 % in every truth: NOT met" in text
    assert "qlora-7b: first-run median never above dstack's rule: NOT met" in text
    assert "median ≤ 1.5× the bound's in every truth: met" in text


def test_the_monitor_section_shows_each_configuration_beside_its_goal(results: Path) -> None:
    entries = [
        {"jobs": 10_000, "shards": 1, "estimated_s": 88.9, "index_read_units": 1460.0,
         "goal_s": 45.0, "met": False},
        {"jobs": 10_000, "shards": 4, "estimated_s": 23.6, "index_read_units": 365.0,
         "goal_s": 45.0, "met": True},
        {"jobs": 1000, "shards": 1, "estimated_s": 7.9, "index_read_units": 146.0,
         "goal_s": 10.0, "met": True},
    ]  # fmt: skip
    write(results, "monitor_scale", {"summary": entries})
    lines = summary.summarize(since=None, quick=False)
    rows = {line.split("  ")[0]: line for line in lines if " jobs, " in line}

    assert set(rows) == {
        "10,000 jobs, 1 shard(s)",
        "10,000 jobs, 4 shard(s)",
        "1,000 jobs, 1 shard(s)",
    }
    unsharded = rows["10,000 jobs, 1 shard(s)"]
    assert "88.9 s" in unsharded and "1460" in unsharded and "≤ 45 s" in unsharded
    assert unsharded.endswith("NOT met")
    assert (
        rows["10,000 jobs, 4 shard(s)"].endswith("met") and "365" in rows["10,000 jobs, 4 shard(s)"]
    )
    assert (
        rows["1,000 jobs, 1 shard(s)"].endswith("met")
        and "≤ 10 s" in rows["1,000 jobs, 1 shard(s)"]
    )


def test_the_monitor_section_says_when_a_result_has_no_summary(results: Path) -> None:
    write(results, "monitor_scale_quick", {"runs": []})
    text = "\n".join(summary.summarize(since=None, quick=True))
    assert "no `summary` of monitor runs" in text
