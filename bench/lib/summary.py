"""`make bench`'s last word: every benchmark's headline figures side by side, each beside its goal.

    python -m bench.lib.summary [--since EPOCH] [--quick]

Reads what this run's benchmarks wrote under bench/results/ (`<name>.json`, or `<name>_quick.json`
with `--quick`); a result older than `--since` (the run's start) or missing is said to be so,
never shown as this run's. Each section says which goal it is held to and whether it was met:
a figure that misses its goal is printed as plainly as one that meets it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lib.report import RESULTS


@dataclass(frozen=True)
class Section:
    title: str
    result: str  # the file's stem without the `_quick` suffix
    render: Callable[[dict[str, Any]], list[str]]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell; the first left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first, *rest = (str(c) for c in cells)
        return "  ".join(
            [first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))]
        ).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def dig(data: Any, *path: str | int) -> Any:
    """`data[path[0]][path[1]]…`, or None where any step is missing."""
    for step in path:
        try:
            data = data[step]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def usd(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"${value:.{digits}f}"


# --- sections ------------------------------------------------------------------------------


def median_p90(regret: Any) -> str:
    return f"{pct(dig(regret, 'median'))} / {pct(dig(regret, 'p90'))}"


def render_planner(data: dict[str, Any]) -> list[str]:
    summary = data.get("summary")
    if not isinstance(summary, dict) or not summary:
        return ["(this run's results hold no `summary` of regrets)"]
    lines: list[str] = []
    for job, by_truth in summary.items():
        rules: list[str] = []
        for by_rule in by_truth.values():
            rules += [r for r in by_rule if r not in rules]
        rows = [[rule, *(median_p90(by_truth[t].get(rule)) for t in by_truth)] for rule in rules]
        lines += [f"{job}: regret median / p90 per truth", *table(["rule", *by_truth], rows), ""]
    goals = data.get("goals")
    if isinstance(goals, dict):
        lines += [f"goal: {name}: {verdict(bool(met))}" for name, met in goals.items()]
    return lines


def render_control_plane(data: dict[str, Any]) -> list[str]:
    job_hour = dig(data, "priced", "job_hour", "usd")
    idle = dig(data, "priced", "idle_month")
    without = dig(idle, "usd_list_price_with_alarms")
    with_dashboard = dig(idle, "usd_list_price_with_alarms_and_dashboard")
    goal_job_hour = dig(data, "goals", "job_hour_usd") or 0.0015
    rows = [
        ["per job-hour", usd(job_hour), f"≤ {usd(goal_job_hour)}"],
        ["idle month, alarms, no dashboard", usd(without, 3), "≤ $1.000"],
        ["idle month, alarms and the dashboard", usd(with_dashboard, 3), "(optional)"],
    ]
    lines = table(["at list price", "measured", "goal"], rows)
    if job_hour is not None:
        lines.append(
            f"goal: per job-hour ≤ {usd(goal_job_hour)}: {verdict(job_hour <= goal_job_hour)}"
        )
    if without is not None:
        lines.append(f"goal: idle month ≤ $1 with the alarms on: {verdict(without <= 1.0)}")
    return lines


def render_monitor(data: dict[str, Any]) -> list[str]:
    runs = data.get("summary")
    if not isinstance(runs, list) or not runs:
        return ["(this run's results hold no `summary` of monitor runs)"]
    rows = [
        [
            f"{r.get('jobs', '?'):,} jobs, {r.get('shards', 1)} shard(s)",
            f"{r['estimated_s']:.1f} s" if isinstance(r.get("estimated_s"), int | float) else "—",
            f"{r['index_read_units']:.0f}"
            if isinstance(r.get("index_read_units"), int | float)
            else "—",
            f"≤ {r.get('goal_s', 45):g} s",
            verdict(bool(r.get("met"))) if "met" in r else "—",
        ]
        for r in runs
    ]
    return table(["one run (slowest shard)", "estimated", "index RRU/shard", "goal", ""], rows)


def render_cold_start(data: dict[str, Any]) -> list[str]:
    handlers = data.get("handlers") or {}
    goal = data.get("goal_heartbeat_s") or 0.5
    rows = [
        [
            name,
            f"{dig(h, 'bytecode_s', 'median') or 0:.3f} s",
            f"{dig(h, 'no_bytecode_s', 'median') or 0:.3f} s",
            str(h.get("modules", "—")),
        ]
        for name, h in handlers.items()
    ]
    lines = table(["handler", "cold import (bundle)", "without bytecode", "modules"], rows)
    beat = dig(handlers, "heartbeat", "bytecode_s", "median")
    if beat is not None:
        lines.append(f"goal: the heartbeat's cold import ≤ {goal:g} s: {verdict(beat <= goal)}")
    return lines


def _ratio(median: float | None, low: float | None, high: float | None) -> str:
    return "—" if median is None else f"{median:.2f} ({low or 0:.2f}–{high or 0:.2f})"


def _transfer_row(
    label: str,
    *,
    upload: float | None,
    restore: float | None,
    iqr: tuple[float | None, float | None],
    run_medians: list[float],
    cpu: tuple[float | None, float | None],
    paths: dict[str, int],
    load: float | None,
    goal: float,
) -> list[str]:
    """One size's row: the columns of `render_transfer`'s header."""
    return [
        label,
        f"{upload or 0:.2f}",
        _ratio(restore, *iqr),
        ", ".join(f"{m:.2f}" for m in run_medians) or "—",
        f"{cpu[0] or 0:.2f} / {cpu[1] or 0:.2f}",
        ", ".join(f"{p} ×{n}" for p, n in paths.items()) or "—",
        f"{load or 0:.1f}",
        verdict(restore is not None and restore >= goal),
    ]


def _pooled_rows(headline: list[dict[str, Any]], goal: float) -> list[list[str]]:
    """One row per size from the bench's `headline`: every run's pairs pooled."""
    rows = []
    for size in headline:
        low, high = (size.get("restore_ratio_iqr") or [None, None])[:2]
        rows.append(
            _transfer_row(
                f"{size.get('mib', 0):.0f} MiB, {size.get('runs', 1)} run(s) × "
                f"{size.get('pairs', '?')} pairs",
                upload=size.get("upload_ratio_median"),
                restore=size.get("restore_ratio_median"),
                iqr=(low, high),
                run_medians=size.get("restore_ratio_run_medians") or [],
                cpu=(
                    size.get("agent_restore_cpu_s_per_gib"),
                    size.get("s5cmd_restore_cpu_s_per_gib"),
                ),
                paths=size.get("agent_restore_read_paths") or {},
                load=size.get("load_1min_median"),
                goal=goal,
            )
        )
    return rows


def _per_run_rows(sizes: list[dict[str, Any]], goal: float) -> list[list[str]]:
    """One row per run from `sizes`, for a result written before the bench pooled its runs."""
    rows = []
    for size in sizes:
        paths: dict[str, int] = {}
        for per_restore in size.get("agent_restore_read_paths") or []:
            for path, count in per_restore.items():
                paths[path] = paths.get(path, 0) + count
        rows.append(
            _transfer_row(
                f"{size.get('mib', 0):.0f} MiB × {size.get('pairs', '?')} pairs",
                upload=dig(size, "upload_ratio", "median"),
                restore=dig(size, "restore_ratio", "median"),
                iqr=(dig(size, "restore_ratio", "q1"), dig(size, "restore_ratio", "q3")),
                run_medians=[],
                cpu=(
                    dig(size, "agent_cpu_s_per_gib", "restore"),
                    dig(size, "s5cmd_cpu_s_per_gib", "restore"),
                ),
                paths=paths,
                load=dig(size, "load_1min", "median"),
                goal=goal,
            )
        )
    return rows


def render_transfer(data: dict[str, Any]) -> list[str]:
    goal = data.get("goal") or 0.95
    headline = data.get("headline")
    if isinstance(headline, list) and headline:
        rows = _pooled_rows(headline, goal)
    else:
        rows = _per_run_rows(data.get("sizes") or [], goal)
    header = [
        "size",
        "upload ×s5cmd",
        "restore ×s5cmd (IQR)",
        "run medians",
        "restore CPU-s/GiB agent / s5cmd",
        "read path",
        "load",
        f"restore ≥ {goal:g}",
    ]
    return table(header, rows)


SECTIONS = (
    Section(
        "Planner regret (first run, after the job's first generation)",
        "planner_regret",
        render_planner,
    ),
    Section("Control-plane cost", "control_plane_cost", render_control_plane),
    Section("Monitor at scale", "monitor_scale", render_monitor),
    Section("Cold imports (each handler in a fresh process)", "cold_start", render_cold_start),
    Section("Checkpoint transfer against s5cmd", "agent_transfer", render_transfer),
)


def result_path(stem: str, *, quick: bool, since: float | None) -> Path | None:
    """This run's result: `<stem>_quick.json` for a --quick run where the bench names it so,
    else `<stem>.json`; None when neither was written since `since`."""
    names = [f"{stem}_quick.json", f"{stem}.json"] if quick else [f"{stem}.json"]
    for path in (RESULTS / n for n in names):
        if path.exists() and (since is None or path.stat().st_mtime >= since):
            return path
    return None


def summarize(*, since: float | None, quick: bool) -> list[str]:
    lines: list[str] = []
    for section in SECTIONS:
        lines += ["", f"== {section.title}"]
        path = result_path(section.result, quick=quick, since=since)
        if path is None:
            lines.append(f"(no result from this run: bench/results/{section.result}*.json)")
            continue
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            lines.append(f"({path.name} is not JSON: {exc})")
            continue
        lines += section.render(data)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--since", type=float, help="the run's start (epoch s): older results are not shown"
    )
    parser.add_argument("--quick", action="store_true", help="read the --quick runs' results")
    args = parser.parse_args(argv)
    print("\n".join(summarize(since=args.since, quick=args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
