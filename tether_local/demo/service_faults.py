"""Faults outside the host: the monitor stops (`supervisor-dead`), the budget runs out
(`over-budget`), the Vast API throttles and fails while a host is replaced (`vast-flaky`) or is
down while the job is cancelled (`vast-outage-during-stop`). `monitor-crash` is in
`monitor_faults`.
"""

from __future__ import annotations

import time

import httpx

from functions.adapters.store import JobView
from functions.domain.job import JobState
from tether_local.demo.host_faults import destroy
from tether_local.demo.invariants import Fault
from tether_local.demo.job import MONITOR_INTERVAL_S, SIGNED
from tether_local.demo.run import DemoError, DemoRun


def supervisor_dead(run: DemoRun) -> None:
    g = run.wait_step(1, 50, checkpoint=50)
    instance = run.instance(g)
    fault = run.fault("supervisor-dead", g, run.stop_monitor)

    def stopped_itself(_view: JobView) -> bool:
        record = run.stack.vast.instance(instance)
        return record is not None and record["intended_status"] == "stopped"

    lease = g.lease_expires_at
    run.say(f"monitor stopped; the host's lease runs out in {max(lease - time.time(), 0):.0f} s")
    run.wait("the host to stop itself (dead-man switch)", stopped_itself, timeout_s=40)
    stopped_at = time.time()
    run.say(f"the agent stopped its own instance {instance} after {stopped_at - fault.at:.1f} s")
    time.sleep(2 * MONITOR_INTERVAL_S)  # nothing bills GPU time while nobody supervises
    run.checks["host_stopped_itself"] = True
    run.checks["no_gpu_billing_after_stop"] = not [
        s
        for s in run.samples
        if s.at > stopped_at + run.stack.config.stop_grace_s and s.instance_ids
    ]
    run.supervisor_dead_s = time.time() - fault.at
    run.faults[-1] = fault.model_copy(update={"detected_at": stopped_at})
    run.say("monitor restarted")
    run.start_monitor()


def over_budget(run: DemoRun) -> None:
    g = run.wait_step(1, 1)
    run.faults.append(
        Fault(kind="over-budget", at=time.time(), generation=g.generation, step_at_fault=0)
    )


def vast_flaky(run: DemoRun) -> None:
    vast = run.stack.vast
    g = run.wait_step(1, 50, checkpoint=50)
    run.say("Vast API: 429s, 502s and dropped connections from now on")
    vast.inject("rate_limit", 3)
    vast.inject("server_error", 2)
    vast.inject("connection_error", 1)
    vast.inject("offer_gone", 1)
    destroy(run, g)


def vast_outage_during_stop(run: DemoRun) -> None:
    """Vast answers 502 to everything while the job is cancelled: the stop's first attempt
    fails (its destroy step gives up), and once Vast is back the host is destroyed — by the
    monitor's sweep of a stopping job's instances, and by the next attempt, which ends it."""
    vast = run.stack.vast
    g = run.wait_step(1, 50, checkpoint=50)
    instance = run.instance(g)
    run.say("Vast API: 502 Bad Gateway on every request from now on")
    fault = run.fault("vast-outage", g, vast.outage)
    cancelled = httpx.post(
        f"{run.stack.api_url}/jobs/{run.job_id}/cancel", headers=SIGNED, timeout=30
    )
    if cancelled.status_code != 202:
        raise DemoError(f"cancel refused: {cancelled.status_code} {cancelled.text[:300]}")
    run.say("cancelled the job while Vast is down")

    def attempt_failed(view: JobView) -> str | None:
        failed = [e for e in view.events if e.kind == "transition_failed"]
        return failed[0].message if failed else None

    message = run.wait("the stop's first attempt to fail", attempt_failed)
    run.say(f"lifecycle: {message[:160]}")
    vast.outage(False)
    recovered_at = time.time()
    run.say(f"Vast answers again ({recovered_at - fault.at:.1f} s of outage)")

    def destroyed(_view: JobView) -> float | None:
        return vast.ledger(instance).closed_at

    closed_at = run.wait(f"instance {instance} destroyed", destroyed)
    assert run.clock is not None
    intervals = (closed_at - recovered_at) / run.clock.effective_interval_s
    run.say(
        f"instance {instance} destroyed {closed_at - recovered_at:.1f} s after Vast recovered "
        f"({intervals:.1f} monitor intervals)"
    )
    run.faults[-1] = fault.model_copy(update={"detected_at": closed_at})
    view = run.wait("the job to end", lambda v: v.job.state == JobState.CANCELLED and v)
    kinds = [e.kind for e in view.events]
    run.checks["first_attempt_failed_during_the_outage"] = "transition_failed" in kinds
    run.checks["retried_as_a_new_attempt"] = "transition_retried" in kinds
    run.checks["destroyed_within_two_intervals_of_recovery"] = (
        closed_at - recovered_at <= 2 * run.clock.effective_interval_s + OUTAGE_SLACK_S
    )


OUTAGE_SLACK_S = 2.0  # the invariants' slack: scheduling jitter of the demo machine


__all__ = [
    "OUTAGE_SLACK_S",
    "over_budget",
    "supervisor_dead",
    "vast_flaky",
    "vast_outage_during_stop",
]
