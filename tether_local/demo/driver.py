"""The driver: start a stack (or take one), submit the scenario's job through the real API (its
code packed and uploaded as `tether submit` does), run
the demo's monitor clock, let the scenario inject its faults, wait for the job to end and every
instance to go, then judge the run."""

from __future__ import annotations

import time

from functions.domain.job import is_terminal
from functions.domain.jobspec import SpecError, parse_job
from tether_local.demo.evidence import live_instances
from tether_local.demo.job import EXAMPLE_JOB, MONITOR_INTERVAL_S, demo_job, demo_stack_config
from tether_local.demo.run import DemoError, DemoRun, MonitorClock, Scenario, Timeline, quiet
from tether_local.demo.scenarios import DEFAULT_SCENARIO, SCENARIOS
from tether_local.demo.submit import CodeShipper
from tether_local.demo.summary import DemoSummary, summarize
from tether_local.stack import LocalStack


def run_scenario(
    name: str = DEFAULT_SCENARIO,
    *,
    shipper: CodeShipper,
    stack: LocalStack | None = None,
    timeline: Timeline = quiet,
) -> DemoSummary:
    """Run one scenario end to end and judge it; `shipper` submits the job and its code as
    `tether submit` does (`tether_cli.local_ship.SHIPPER`). Starts (and stops) a stack unless
    given one made with `demo_stack_config()`."""
    scenario = SCENARIOS.get(name)
    if scenario is None:
        raise ValueError(f"scenario: {name!r} is not one of {', '.join(SCENARIOS)}")
    if stack is not None:
        return _run_on(stack, scenario, timeline, shipper)
    started = time.time()
    timeline(0.0, "demo", "starting the local stack…")
    with LocalStack(demo_stack_config()) as own:
        timeline(time.time() - started, "demo", f"local stack up in {time.time() - started:.1f} s")
        return _run_on(own, scenario, timeline, shipper)


def _run_on(
    stack: LocalStack, scenario: Scenario, timeline: Timeline, shipper: CodeShipper
) -> DemoSummary:
    run = DemoRun(stack=stack, scenario=scenario, timeline=timeline)
    run.clock = MonitorClock(stack, MONITOR_INTERVAL_S)
    run.say(f"scenario {scenario.name}: {scenario.description}")
    try:
        spec = parse_job(demo_job(scenario.train, **scenario.spec_overrides))
    except SpecError as exc:
        raise DemoError(f"the scenario's spec is invalid: {exc}") from None
    if stack.hosts is not None:
        stack.hosts.use_gpu(scenario.host_gpu)  # for the hosts this run rents
    try:
        with shipper.pack(spec, EXAMPLE_JOB) as code:
            run.job_id, shipped = shipper.submit(stack.api_url, spec, code)
        run.say(f"submitted job {run.job_id}: {scenario.train.command()}; {shipped}")
        run.start_monitor()
        scenario.drive(run)
        view = run.wait(
            f"the job to end {scenario.expected_state.value}",
            lambda v: is_terminal(v.job.state),
            timeout_s=scenario.timeout_s,
        )
        run.wait(
            "every instance of the job destroyed",
            lambda _v: not live_instances(stack, run.job_id),
            20,
        )
    finally:
        run.clock.close()
        if stack.hosts is not None:
            stack.hosts.use_gpu("fake-probe")
    view = run.poll()
    return summarize(run, view)


__all__ = ["run_scenario"]
