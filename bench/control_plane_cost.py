"""Control-plane cost: what AWS bills per job-hour and per idle month, measured on the local stack.

    python bench/control_plane_cost.py [--quick] [--incidents-per-hour X] [--job-hours H]

The local stack (`tether_local.stack`, the demo's configuration) runs the real handlers and the
synthesized state machine; `bench.lib.local_run.StackRecorder` records every Lambda invocation
(memory size from the template, duration, AWS calls with estimated DynamoDB units, Vast and
Cloudflare calls, EMF metrics, log bytes) and every heartbeat. The run: idle monitor runs with no
job, then the demo's fault scenarios (`tether_local.demo`: `dead-twice`, and `hung-gpu` unless
--quick), then a few user queries. Step Functions transitions come from the execution histories.

The local stack compresses time (1 s heartbeats, a monitor run a second), so usage is counted
per EVENT and scaled to production rates (`bench.lib.cost.Rates`): steady heartbeats × 3600/15
per job-hour, what a checkpoint's heartbeat adds × checkpoints per job-hour, what a host's
start-up heartbeats add × hosts started per job-hour (`heartbeat_kind`), the monitor's per-job
increment × 60 runs an hour, provision + stop executions over the job's length, a replace
execution × incidents per job-hour, user calls × calls per job-hour; idle: the monitor with no
job × 43,800 runs a month. Lambda duration = the handler's own time plus an assumed round trip
per remote call (10 ms AWS, 500 ms Vast, 300 ms Cloudflare).
Goals: ≤ $0.0015 per job-hour, ≤ $1 a month idle (with the alarms, without the dashboard).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.lib import cost, prices  # noqa: E402
from bench.lib.cost import PerEvent, Rates, Usage  # noqa: E402
from bench.lib.local_run import Invocation, executions, recorded_stack  # noqa: E402
from bench.lib.report import write_results  # noqa: E402

NAME = "control_plane_cost"
GOAL_JOB_HOUR_USD = 0.0015
GOAL_IDLE_MONTH_USD = 1.0
HEARTBEAT_ROUTE = "POST /agent/heartbeat"


def default_heartbeat_interval_s() -> float:
    """The production heartbeat interval: the job spec's default (the demo shortens it)."""
    from functions.domain.jobspec import load_job_file

    return float(
        load_job_file(ROOT / "examples" / "qlora-7b" / "job.yaml").policy.heartbeat_interval_s
    )


def billed_s(invocation: Invocation) -> float:
    return invocation.estimated_s(cost.AWS_CALL_S, cost.PROVIDER_CALL_S)


def usage_of(invocation: Invocation, api_functions: set[str], traced: set[str]) -> Usage:
    return cost.invocation_usage(
        invocation.memory_mb,
        billed_s(invocation),
        invocation.aws_calls,
        read_units=invocation.read_units,
        write_units=invocation.write_units,
        log_bytes=invocation.log_bytes,
        via_http_api=invocation.function in api_functions,
        traced=invocation.function in traced,
    )


def _function_name(arn: str) -> str:
    return arn.split(":")[6] if arn.count(":") >= 6 else arn


def measure(quick: bool) -> dict[str, Any]:
    from tether_cli.local_ship import SHIPPER
    from tether_local.demo import SIGNED, demo_stack_config, run_scenario

    scenarios = ["dead-twice"] if quick else ["dead-twice", "hung-gpu"]
    idle_runs = 4 if quick else 10
    with recorded_stack(demo_stack_config()) as (stack, recorder):
        deployed = stack.deployed
        routes = {r.route_key: _function_name(r.function_arn) for r in deployed.http_routes}
        api_functions = set(routes.values())
        heartbeat_fn = routes[HEARTBEAT_ROUTE]
        monitor_fns = {_function_name(s.target_arn) for s in stack.schedules()}
        schedule_s = [s.interval_s for s in stack.schedules() if s.interval_s]
        secrets = sum(
            1 for r in deployed.resources.values() if r.type == "AWS::SecretsManager::Secret"
        )
        # X-Ray active tracing per function, as the template configures it.
        lambda_client = stack.aws.client("lambda")
        traced = {
            r.physical_id
            for r in deployed.resources.values()
            if r.type == "AWS::Lambda::Function"
            and lambda_client.get_function_configuration(FunctionName=r.physical_id)
            .get("TracingConfig", {})
            .get("Mode")
            == "Active"
        }

        # Idle: the monitor with no job (the first run is a cold start: it reads the secrets).
        for _ in range(idle_runs):
            stack.tick()
        idle = list(recorder.invocations)
        summaries = []
        for name in scenarios:
            summaries.append(
                run_scenario(name, stack=stack, shipper=SHIPPER, timeline=recorder.timeline)
            )
        busy_end = recorder.mark()
        # A user's queries: status of a job, the job list.
        job_id = summaries[0].job_id
        with httpx.Client(base_url=stack.api_url, headers=SIGNED, timeout=30) as client:
            for _ in range(3):
                client.get(f"/jobs/{job_id}").raise_for_status()
                client.get("/jobs").raise_for_status()
        user = recorder.invocations[busy_end:]
        busy = recorder.invocations[len(idle) : busy_end]
        runs = executions(stack)
        return {
            "recorder": recorder,
            "idle": idle,
            "busy": busy,
            "user": user,
            "executions": runs,
            "api_functions": api_functions,
            "heartbeat_fn": heartbeat_fn,
            "submit_fn": routes.get("POST /jobs"),
            "monitor_fns": monitor_fns,
            "schedule_s": schedule_s,
            "secrets": secrets,
            "traced": traced,
            "template": stack_template(),
            "summaries": [s.model_dump(mode="json") for s in summaries],
        }


def stack_template() -> dict[str, Any]:
    from infra.synth import synth_template

    return synth_template(bundle=False)  # cached: the one the local stack deployed


def _median_usage(usages: list[Usage]) -> Usage:
    """Item by item median: robust to the odd run that starts a transition."""
    names = Usage().as_dict().keys()
    return Usage(**{n: statistics.median(u.as_dict()[n] for u in usages) for n in names})


# The demo's run is start-heavy (three hosts in a minute, a checkpoint every few seconds), so
# its heartbeats are told apart by what they wrote and each kind is scaled by its own rate: a
# steady one (its heartbeat item alone) 240 a job-hour, one that records a checkpoint
# `Rates.checkpoints_per_job_hour`, a host's start-up ones per host started.
HEARTBEAT_KINDS = ("steady", "checkpoint", "host_start", "wrote_nothing")
DYNAMODB_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"})


def heartbeat_kind(invocation: Invocation) -> str:
    writes = {
        name.removeprefix("dynamodb."): n
        for name, n in invocation.aws_calls.items()
        if name.startswith("dynamodb.") and name.removeprefix("dynamodb.") in DYNAMODB_WRITES
    }
    if not writes:  # refused, or answered `superseded`: billed, but not scaled
        return "wrote_nothing"
    if writes == {"UpdateItem": 1}:
        return "steady"
    # The checkpoint record is the heartbeat's only transaction (JobStore.record_checkpoints).
    return "checkpoint" if "TransactWriteItems" in writes else "host_start"


def per_event(m: dict[str, Any], rates: Rates) -> tuple[PerEvent, dict[str, Any]]:
    api = m["api_functions"]
    use = lambda inv: usage_of(inv, api, m["traced"])  # noqa: E731
    monitors = m["monitor_fns"]
    idle = [use(i) for i in m["idle"] if i.function in monitors]
    busy_monitor = [
        i
        for i in m["busy"]
        if i.function in monitors and not i.aws_calls.get("stepfunctions.StartExecution")
    ]
    beats = [i for i in m["busy"] if i.function == m["heartbeat_fn"]]
    heartbeats = [use(i) for i in beats]
    kinds = {kind: [use(i) for i in beats if heartbeat_kind(i) == kind] for kind in HEARTBEAT_KINDS}
    steady_beat = cost.mean(kinds["steady"]) if kinds["steady"] else cost.mean(heartbeats)
    # A real submit starts the provision execution (the demo's bad requests do not).
    submits = [
        use(i)
        for i in m["busy"]
        if i.function == m["submit_fn"] and i.aws_calls.get("stepfunctions.StartExecution")
    ]
    users = [use(i) for i in m["user"]]
    lifecycle = [i for i in m["busy"] if i.function not in api and i.function not in monitors]

    def execution_usage(run: dict[str, Any]) -> Usage:
        stop = run["stop"] or time.time()
        inside = [i for i in lifecycle if run["start"] - 0.05 <= i.started_at <= stop + 0.05]
        return cost.total(use(i) for i in inside) + Usage(sfn_transitions=run["transitions"])

    by_action: dict[str, list[Usage]] = {}
    for run in m["executions"]:
        by_action.setdefault(run["action"], []).append(execution_usage(run))
    jobs = max(1, len(by_action.get("provision", [])))
    # What a job's start and end cost: its submit, provision and final stop executions.
    ends = [u for a, us in by_action.items() if a not in ("provision", "replace") for u in us]
    start_end = cost.total([*submits, *by_action.get("provision", []), *ends]) * (1 / jobs)
    # The first idle run is a cold start (it reads the secrets); a container serves
    # `rates.monitor_runs_per_cold_start` runs, so the cold start's extra is spread over them.
    idle_warm = idle[1:] or idle
    cold_extra = (idle[0] - cost.mean(idle_warm)).floor_zero()
    generations = len(by_action.get("provision", [])) + len(by_action.get("replace", []))
    extra = lambda us: cost.total(u - steady_beat for u in us).floor_zero()  # noqa: E731
    events = PerEvent(
        heartbeat=steady_beat,
        checkpoint=extra(kinds["checkpoint"]) * (1 / max(1, len(kinds["checkpoint"]))),
        generation_heartbeats=extra(kinds["host_start"]) * (1 / max(1, generations)),
        monitor_idle=cost.mean(idle_warm) + cold_extra * (1 / rates.monitor_runs_per_cold_start),
        monitor_per_job=(
            _median_usage([use(i) for i in busy_monitor]) - _median_usage(idle_warm)
        ).floor_zero(),
        job_start_and_end=start_end,
        replace=cost.mean(by_action.get("replace", [Usage()])),
        user_call=cost.mean(users),
    )
    idle_metrics = set().union(*(i.metrics for i in m["idle"]))
    busy_metrics = set().union(*(i.metrics for i in m["busy"])) - idle_metrics
    steady, events_only = split_busy_metrics(m, busy_monitor, busy_metrics)
    facts = {
        "counts": {
            "idle_monitor_runs": len(idle),
            "busy_monitor_runs_steady": len(busy_monitor),
            "heartbeats": len(heartbeats),
            "heartbeats_by_kind": {kind: len(us) for kind, us in kinds.items()},
            "hosts_started": generations,
            "submits": len(submits),
            "user_calls": len(users),
            "executions": {a: len(us) for a, us in by_action.items()},
            "lifecycle_invocations": len(lifecycle),
        },
        "transitions_per_execution": {
            a: [r["transitions"] for r in m["executions"] if r["action"] == a] for a in by_action
        },
        "billed_s_median": {
            "monitor_idle": statistics.median(billed_s(i) for i in m["idle"]),
            "monitor_busy": statistics.median(billed_s(i) for i in busy_monitor),
            "heartbeat": statistics.median(
                billed_s(i) for i in m["busy"] if i.function == m["heartbeat_fn"]
            ),
        },
        "wall_s_median": {
            "monitor_idle": statistics.median(i.wall_s for i in m["idle"]),
            "heartbeat": statistics.median(
                i.wall_s for i in m["busy"] if i.function == m["heartbeat_fn"]
            ),
        },
        "memory_mb": {i.function: i.memory_mb for i in m["idle"] + m["busy"]},
        "traced_functions": sorted(m["traced"]),
        "secrets_manager_secrets": m["secrets"],
        "idle_metrics": sorted(idle_metrics),
        "busy_only_metrics": sorted(busy_metrics),
        "busy_steady_metrics": sorted(steady),
        "busy_event_metrics": sorted(events_only),
    }
    return events, facts


def split_busy_metrics(
    m: dict[str, Any], steady_runs: list[Invocation], busy_metrics: set[str]
) -> tuple[set[str], set[str]]:
    """The metrics a running job keeps billed every hour (sent by most steady monitor runs, and
    the checkpoint lag every checkpoint sends), and those billed only for the hour of an event
    (a job start, an incident: recoveries, hosts blamed, work lost, transitions …)."""
    counts: dict[str, int] = {}
    for run in steady_runs:
        for metric in run.metrics:
            counts[metric] = counts.get(metric, 0) + 1
    steady = {k for k, n in counts.items() if 2 * n >= max(1, len(steady_runs))}
    beats = set().union(*(i.metrics for i in m["busy"] if i.function == m["heartbeat_fn"]))
    steady |= {k for k in beats if "/CheckpointUploadLagS/" in k}
    steady &= busy_metrics
    return steady, busy_metrics - steady


def price_everything(
    events: PerEvent,
    facts: dict[str, Any],
    rates: Rates,
    secrets: int,
    template: dict[str, Any] | None = None,
) -> dict[str, Any]:
    lines = cost.per_job_hour(events, rates)
    job_hour_usage = cost.total(lines.values())
    job_hour_items = cost.priced(job_hour_usage)
    busy_metrics = len(facts["busy_only_metrics"])
    job_hour_lines = {k: sum(cost.priced(u).values()) for k, u in lines.items()}
    per_job_hour = sum(job_hour_items.values())
    busy_metric_hour = cost.metric_usd_per_hour(busy_metrics)
    steady_metric_hour = cost.metric_usd_per_hour(len(facts["busy_steady_metrics"]))
    # An event's metrics are billed for the hour it happens in, at most: per job-hour, the job
    # start's share and each incident's.
    event_hours_per_job_hour = rates.incidents_per_job_hour + 1 / rates.job_hours
    event_metric_job_hour = (
        cost.metric_usd_per_hour(len(facts["busy_event_metrics"])) * event_hours_per_job_hour
    )

    idle_usage = cost.idle_month(events, rates)
    idle_metrics = len(facts["idle_metrics"])
    fixed = {"secrets": secrets * prices.SECRET_MONTH.usd}
    idle_list = {
        **cost.priced(idle_usage),
        "custom_metrics": cost.metric_usd_per_month(idle_metrics, free=False),
        **fixed,
    }
    idle_free = {
        **cost.priced(idle_usage, free_used=Usage()),
        "custom_metrics": cost.metric_usd_per_month(idle_metrics, free=True),
        **fixed,
    }
    # The alarms and the dashboard bill all month too. The goal (≤ $1 at list price) holds for
    # a stack with its alarms and without the dashboard (`tether deploy --no-dashboard`: the
    # same alarms, the template tests hold them equal); with it, $3 more.
    watch_list = cost.observability_usd_per_month(template or {}, free=False)
    watch_free = cost.observability_usd_per_month(template or {}, free=True)
    # Within the free tier: what a job-hour costs while the idle month leaves free units over.
    job_hour_free_items = cost.priced(job_hour_usage, free_used=idle_usage)
    free_left_hours = {
        name: (cost.PRICED[name].free_per_month - getattr(idle_usage, name)) / q
        for name, q in job_hour_usage.as_dict().items()
        if q > 0 and cost.PRICED[name].free_per_month > 0
    }
    free_hours = min(free_left_hours.values()) if free_left_hours else 0.0
    in_free_tier = sum(
        v
        for k, v in job_hour_items.items()
        if cost.PRICED[k].free_per_month == 0 or free_left_hours.get(k, 0) <= 0
    )
    dstack = prices.dstack_server_usd_per_month()
    return {
        "rates": {
            **rates.__dict__,
            "heartbeats_per_job_hour": rates.heartbeats_per_job_hour,
            "generations_per_job_hour": rates.generations_per_job_hour,
        },
        "per_event_usage": {k: getattr(events, k).as_dict() for k in events.__dataclass_fields__},
        "job_hour": {
            "usage": job_hour_usage.as_dict(),
            "usd_by_item": job_hour_items,
            "usd_by_line": job_hour_lines,
            "usd": per_job_hour,
            "usd_with_busy_metrics_one_job": per_job_hour + busy_metric_hour,
            "busy_only_metrics": busy_metrics,
            "busy_metrics_usd_per_fleet_hour": busy_metric_hour,
            "steady_metrics": len(facts["busy_steady_metrics"]),
            "steady_metrics_usd_per_fleet_hour": steady_metric_hour,
            "event_metrics": len(facts["busy_event_metrics"]),
            "event_metrics_usd_per_job_hour_at_most": event_metric_job_hour,
            "usd_within_free_tier": in_free_tier,
            "free_tier_covers_job_hours_per_month": free_hours,
            "usd_by_item_within_free_tier": job_hour_free_items,
            "dominant": cost.dominant(job_hour_items),
            "vs_skypilot_controller": per_job_hour / prices.SKYPILOT_CONTROLLER_HOUR.usd,
        },
        "idle_month": {
            "usage": idle_usage.as_dict(),
            "metrics": idle_metrics,
            "usd_by_item_list_price": idle_list,
            "usd_list_price": sum(idle_list.values()),
            "usd_by_item_with_free_tier": idle_free,
            "usd_with_free_tier": sum(idle_free.values()),
            "alarm_metrics": cost.alarm_metrics(template or {}),
            "dashboards": cost.dashboards(template or {}),
            "alarms_and_dashboard_list_price": watch_list,
            "alarms_and_dashboard_with_free_tier": watch_free,
            "usd_list_price_with_alarms": sum(idle_list.values()) + watch_list["alarms"],
            "usd_with_free_tier_with_alarms": sum(idle_free.values()) + watch_free["alarms"],
            "usd_list_price_with_alarms_and_dashboard": sum(idle_list.values())
            + sum(watch_list.values()),
            "usd_with_free_tier_with_alarms_and_dashboard": sum(idle_free.values())
            + sum(watch_free.values()),
            "dominant": cost.dominant(idle_list),
            "dstack_server_usd_month": dstack,
            "vs_dstack_server": sum(idle_list.values()) / dstack,
            "vs_dstack_server_with_free_tier": sum(idle_free.values()) / dstack,
        },
    }


def print_results(r: dict[str, Any]) -> None:
    facts, jh, idle = r["facts"], r["priced"]["job_hour"], r["priced"]["idle_month"]
    rates = r["priced"]["rates"]
    print(f"scenarios: {', '.join(s['scenario'] for s in r['summaries'])} (local stack)")
    print(f"events_measured: {facts['counts']}")
    print(f"transitions_per_execution: {facts['transitions_per_execution']}")
    print(f"billed_s_median (own time + assumed remote round trips): {facts['billed_s_median']}")
    print(f"memory_mb: {facts['memory_mb']}")
    print(
        f"scaling: steady heartbeat × {rates['heartbeats_per_job_hour']:.0f}/job-h, a "
        f"checkpoint's extra × {rates['checkpoints_per_job_hour']:g}/job-h, a host's start-up "
        f"heartbeats' extra × {rates['generations_per_job_hour']:.3g}/job-h, monitor per job × "
        f"{rates['monitor_runs_per_hour']:.0f}/h, start+end ÷ {rates['job_hours']:g} h, replace × "
        f"{rates['incidents_per_job_hour']:g}/job-h, user call × "
        f"{rates['user_calls_per_job_hour']:g}/job-h; idle monitor × "
        f"{rates['monitor_runs_per_hour'] * prices.HOURS_PER_MONTH:,.0f}/month (a cold start "
        f"every {rates['monitor_runs_per_cold_start']:g} runs)"
    )
    for line, usd in jh["usd_by_line"].items():
        print(f"job_hour.{line}_usd: {usd:.6f}")
    for item, usd in sorted(jh["usd_by_item"].items(), key=lambda kv: -kv[1]):
        if usd:
            print(f"job_hour.item.{item}_usd: {usd:.6f}")
    print(
        f"job_hour.busy_only_metrics: {jh['busy_only_metrics']} metrics, "
        f"${jh['busy_metrics_usd_per_fleet_hour']:.6f} per hour with any job running "
        "(fleet-wide, not per job)"
    )
    print(
        f"job_hour.steady_metrics: {jh['steady_metrics']} "
        f"({', '.join(k.split('/')[1] for k in facts['busy_steady_metrics'])}), "
        f"${jh['steady_metrics_usd_per_fleet_hour']:.6f} per hour with any job running; "
        f"event metrics: {jh['event_metrics']} "
        f"({', '.join(k.split('/')[1] for k in facts['busy_event_metrics'])}), "
        f"≤ ${jh['event_metrics_usd_per_job_hour_at_most']:.6f} per job-hour"
    )
    print(
        f"job_hour.within_free_tier_usd: {jh['usd_within_free_tier']:.6f} (the free tier covers "
        f"~{jh['free_tier_covers_job_hours_per_month']:,.0f} job-hours a month)"
    )
    print(
        f"job_hour.vs_skypilot_controller: {jh['vs_skypilot_controller']:.4f} "
        f"(${prices.SKYPILOT_CONTROLLER_HOUR.usd}/h controller VM)"
    )
    for item, usd in sorted(idle["usd_by_item_list_price"].items(), key=lambda kv: -kv[1]):
        if usd:
            print(f"idle_month.item.{item}_usd: {usd:.4f}")
    print(f"idle_month.metrics: {idle['metrics']} ({', '.join(facts['idle_metrics'][:3])}, …)")
    print(
        f"idle_month.usd_with_free_tier: {idle['usd_with_free_tier']:.3f} "
        f"(goal ≤ {GOAL_IDLE_MONTH_USD:g}); vs dstack server "
        f"${idle['dstack_server_usd_month']:.2f}/month: "
        f"{idle['vs_dstack_server_with_free_tier']:.2f}"
    )
    print(
        f"idle_month.usd_list_price: {idle['usd_list_price']:.3f} (dominant: "
        f"{idle['dominant'][0]} ${idle['dominant'][1]:.3f}); vs dstack server: "
        f"{idle['vs_dstack_server']:.2f}"
    )
    print(
        f"idle_month.alarms_and_dashboard: {idle['alarm_metrics']} alarm metrics, "
        f"{idle['dashboards']} dashboard: list price "
        f"{sum(idle['alarms_and_dashboard_list_price'].values()):.2f}, with the free tier "
        f"{sum(idle['alarms_and_dashboard_with_free_tier'].values()):.2f}; idle month with them: "
        f"{idle['usd_list_price_with_alarms_and_dashboard']:.3f} list price, "
        f"{idle['usd_with_free_tier_with_alarms_and_dashboard']:.3f} with the free tier"
    )
    print(
        f"idle_month.usd_list_price_with_alarms_no_dashboard: "
        f"{idle['usd_list_price_with_alarms']:.3f} (goal ≤ {GOAL_IDLE_MONTH_USD:g}; "
        "tether deploy --no-dashboard)"
    )
    print(
        f"idle_month.usd_list_price_with_alarms_and_dashboard: "
        f"{idle['usd_list_price_with_alarms_and_dashboard']:.3f} (the dashboard "
        f"${prices.CLOUDWATCH_DASHBOARD_MONTH.usd:g} a month beyond an account's "
        f"{prices.CLOUDWATCH_DASHBOARD_MONTH.free_per_month:g} free)"
    )
    print(f"job_hour.usd_one_job_with_busy_metrics: {jh['usd_with_busy_metrics_one_job']:.6f}")
    print(
        f"usd_per_job_hour: {jh['usd']:.6f} (goal ≤ {GOAL_JOB_HOUR_USD}; dominant: "
        f"{jh['dominant'][0]} ${jh['dominant'][1]:.6f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one scenario (dead-twice)")
    parser.add_argument("--incidents-per-hour", type=float, default=Rates.incidents_per_job_hour)
    parser.add_argument("--job-hours", type=float, default=Rates.job_hours)
    parser.add_argument(
        "--checkpoints-per-hour", type=float, default=Rates.checkpoints_per_job_hour
    )
    args = parser.parse_args()
    started = time.perf_counter()
    measured = measure(args.quick)
    rates = Rates(
        heartbeat_interval_s=default_heartbeat_interval_s(),
        monitor_runs_per_hour=3600 / (measured["schedule_s"] or [60.0])[0],
        job_hours=args.job_hours,
        incidents_per_job_hour=args.incidents_per_hour,
        checkpoints_per_job_hour=args.checkpoints_per_hour,
    )
    events, facts = per_event(measured, rates)
    results = {
        "summaries": measured["summaries"],
        "facts": facts,
        "priced": price_everything(events, facts, rates, measured["secrets"], measured["template"]),
        "assumed_round_trip_s": {"aws": cost.AWS_CALL_S, **cost.PROVIDER_CALL_S},
        "prices": prices.as_json(),
        "wall_s": time.perf_counter() - started,
    }
    print_results(results)
    write_results(NAME, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
