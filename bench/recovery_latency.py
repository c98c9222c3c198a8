"""Detection and recovery latency: from a host's death or hang to the first resumed step.

    python bench/recovery_latency.py [--quick]

Runs the demo's fault scenarios (`tether_local.demo`) on one local stack with a
`bench.lib.local_run.StackRecorder` attached, plus `frozen`, defined here: the host's processes
are stopped (SIGSTOP) while Vast still reports it running, so only the heartbeat timeout can
notice. Scenarios: `dead-twice` (Vast reports the host offline) and `frozen`; without --quick
also `hung-gpu` and `no-progress`.

Per incident, on one clock: the fault (the demo's FAULT line), detection (the monitor's dead /
hung timeline event in DynamoDB), the replacement's rent request (the Vast simulator's ledger
opens at the rent call), its first heartbeat (the agent is up), its first `restoring` heartbeat,
and, as its agent reported them (stored on the generation by the heartbeat API), when its
training process started and when its first training step after the restore completed: the
recovery ends there, not at the process start. Detection is compared with the threshold
the policy must wait (0 when Vast reports the host gone, else the heartbeat timeout, GPU or
progress threshold) plus one monitor interval; the rent with the replace execution that
detection started (goal: the rent lies inside that one execution).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lib.local_run import StackRecorder, executions, recorded_stack  # noqa: E402
from bench.lib.recovery import Incident, Milestones, breakdown  # noqa: E402
from bench.lib.report import quartiles, write_results  # noqa: E402

NAME = "recovery_latency"
_FAULT = re.compile(r"^FAULT (?P<kind>[\w-]+) on generation (?P<generation>\d+)")


def _frozen(run: Any) -> None:
    """The host stops answering (SIGSTOP on every process) between two checkpoints; Vast
    still reports it running."""
    from tether_local import demo

    g = run.wait_step(1, 100, checkpoint=100)
    time.sleep(demo.MID_INTERVAL_S)
    instance = run.instance(g)
    run.fault("frozen", g, lambda: run.stack.hosts.freeze(instance))


def register_frozen() -> None:
    from tether_local import demo

    demo.SCENARIOS.setdefault(
        "frozen",
        demo.Scenario(
            "frozen",
            "the host freezes (no heartbeats; Vast still says running): replaced after the "
            "heartbeat timeout",
            demo.TrainArgs(steps=200),
            _frozen,
        ),
    )


def thresholds() -> dict[str, float]:
    """Seconds the health policy must wait before it may call each fault (the demo's policy)."""
    from tether_local.demo import DEMO_POLICY

    return {
        "dead": 0.0,  # Vast reports the instance offline: no timer to wait for
        "frozen": float(DEMO_POLICY["heartbeat_timeout_s"]),
        "hung": float(DEMO_POLICY["gpu_unresponsive_s"]),
        "no-progress": float(DEMO_POLICY["no_progress_s"]),
    }


def milestones(stack: Any, recorder: StackRecorder, job_id: str) -> list[Milestones]:
    """One `Milestones` per FAULT line of the job's run."""
    from functions.adapters.store import JobStore

    store = JobStore(stack.table_name())
    entries = recorder.timeline_entries
    runs = [r for r in executions(stack) if r["action"] == "replace"]
    assert stack.hosts is not None
    hosts = {h.generation: h for h in stack.hosts.for_job(job_id)}
    beats = [b for b in recorder.heartbeats if b.job_id == job_id]
    found = []
    for entry in entries:
        match = _FAULT.match(entry.text) if entry.source == "demo" else None
        if match is None:
            continue
        generation = int(match["generation"])
        # This fault belongs to the job if the job had that generation's host at the time.
        host = hosts.get(generation)
        if host is None or not any(
            b.generation == generation and b.at <= entry.at + 0.5 for b in beats
        ):
            continue
        verdict = next(
            (e.at for e in entries if e.source in ("dead", "hung") and e.at >= entry.at), None
        )
        execution = next((r for r in runs if verdict is not None and r["start"] >= verdict), None)
        successor = hosts.get(generation + 1)
        rent_at = None
        if successor is not None and successor.instance_id is not None:
            rent_at = stack.vast.ledger(successor.instance_id).opened_at
        nxt = [b for b in beats if b.generation == generation + 1]
        after = store.get_generation(job_id, generation + 1)
        found.append(
            Milestones(
                kind=match["kind"],
                fault_at=entry.at,
                detected_at=verdict,
                execution_start=execution["start"] if execution else None,
                execution_stop=execution["stop"] if execution else None,
                rent_at=rent_at,
                first_heartbeat_at=min((b.at for b in nxt), default=None),
                restoring_at=min((b.at for b in nxt if b.phase == "restoring"), default=None),
                training_at=after.resumed_started_at if after else None,
                first_step_at=after.first_step_at if after else None,
            )
        )
    return found


def measure(quick: bool) -> dict[str, Any]:
    from tether_cli.local_ship import SHIPPER
    from tether_local.demo import DEMO_POLICY, MONITOR_INTERVAL_S, demo_stack_config, run_scenario

    register_frozen()
    names = (
        ["dead-twice", "frozen"] if quick else ["dead-twice", "frozen", "hung-gpu", "no-progress"]
    )
    config = demo_stack_config()
    incidents: list[Incident] = []
    summaries = []
    with recorded_stack(config) as (stack, recorder):
        for name in names:
            summary = run_scenario(name, stack=stack, shipper=SHIPPER, timeline=recorder.timeline)
            summaries.append(summary.model_dump(mode="json"))
            for m in milestones(stack, recorder, summary.job_id):
                incidents.append(
                    breakdown(
                        m,
                        threshold_s=thresholds().get(m.kind, 0.0),
                        monitor_interval_s=MONITOR_INTERVAL_S,
                    )
                )
    return {
        "scenarios": names,
        "summaries": summaries,
        "incidents": [i.as_dict() for i in incidents],
        "config": {
            "monitor_interval_s": MONITOR_INTERVAL_S,
            "heartbeat_interval_s": DEMO_POLICY["heartbeat_interval_s"],
            "thresholds_s": thresholds(),
            "vast_startup_s": config.startup_s,
        },
    }


def summarise(incidents: list[dict[str, Any]]) -> dict[str, Any]:
    parts = ("detection_s", "to_rent_s", "startup_s", "restore_s", "first_step_s", "total_s")
    out: dict[str, Any] = {}
    for part in parts:
        values = [i[part] for i in incidents if i[part] is not None]
        if values:
            out[part] = quartiles(values)
    ratios = [i["detection_over_threshold_plus_interval"] for i in incidents]
    out["detection_within_goal"] = sum(1 for i in incidents if i["detection_within_goal"])
    out["rent_within_execution"] = sum(1 for i in incidents if i["rent_within_execution"])
    out["worst_detection_ratio"] = max((r for r in ratios if r is not None), default=None)
    out["incidents"] = len(incidents)
    return out


def print_results(r: dict[str, Any]) -> None:
    c = r["config"]
    print(
        f"config: monitor every {c['monitor_interval_s']:g} s, heartbeat every "
        f"{c['heartbeat_interval_s']:g} s, thresholds {c['thresholds_s']}, Vast start-up "
        f"{c['vast_startup_s']:g} s"
    )
    for i in r["incidents"]:
        print(
            f"incident.{i['kind']}: detection {_s(i['detection_s'])} "
            f"(threshold {i['threshold_s']:g} s; (detection − threshold) / interval "
            f"{_x(i['excess_over_interval'])}), rent +{_s(i['to_rent_s'])} "
            f"(execution {_s(i['execution_s'])}; inside it: {i['rent_within_execution']}), "
            f"start-up +{_s(i['startup_s'])}, restore +{_s(i['restore_s'])}, "
            f"process start → first step +{_s(i['first_step_s'])}, "
            f"first resumed step after {_s(i['total_s'])}"
        )
    s = r["summary"]
    for part in ("detection_s", "to_rent_s", "startup_s", "restore_s", "first_step_s", "total_s"):
        if part in s:
            print(f"{part}: {s[part].describe(2)}")
    within, n = s["detection_within_goal"], s["incidents"]
    print(f"detection_within_threshold_plus_one_interval: {within}/{n}")
    print(f"rent_within_one_lifecycle_execution: {s['rent_within_execution']}/{s['incidents']}")
    total = s.get("total_s")
    print(f"recovery_to_first_step_s_median: {total.median:.2f}" if total else "recovery: none")


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="dead-twice and frozen only")
    args = parser.parse_args()
    started = time.perf_counter()
    results = measure(args.quick)
    results["summary"] = summarise(results["incidents"])
    results["wall_s"] = time.perf_counter() - started
    print_results(results)
    write_results(NAME, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
