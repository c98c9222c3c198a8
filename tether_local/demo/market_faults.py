"""The marketplace's own faults: an interruptible (bid) host outbid (`outbid`).

The job rents interruptible (`resources.market: interruptible`: the rent bids `min_bid` plus
the margin). Outbid once, the monitor waits (the wait is worth the replacement's start-up,
`functions/domain/outbid.py`) and the host wins its machine back: the container restarts, the
same generation's agent starts again on its kept disk and trains on from its own checkpoint.
Outbid again, it stays stopped past the wait: the monitor replaces it through the replace
transition, the stopped instance is destroyed, and the next host restores and finishes.
"""

from __future__ import annotations

from functions.adapters.store import JobView
from functions.domain.job import Generation, TimelineEvent
from tether_local.demo.run import DemoRun


def _waits(view: JobView) -> list[TimelineEvent]:
    return [e for e in view.events if e.kind == "outbid_wait"]


def _interruptible(run: DemoRun, g: Generation) -> bool:
    record = run.stack.vast.instance(run.instance(g))
    return bool(
        g.interruptible
        and g.bid_usd_per_hour is not None
        and record is not None
        and record["is_bid"] is True
        and abs(record["dph_base"] - g.bid_usd_per_hour) < 1e-9
    )


def outbid(run: DemoRun) -> None:
    sim = run.stack.vast
    g = run.wait_step(1, 100, checkpoint=100)
    instance = run.instance(g)
    run.checks["rented_interruptible_at_its_bid"] = _interruptible(run, g)

    step = run.max_step.get(1, 0)
    run.say(f"OUTBID generation 1 (instance {instance}, step {step}): a higher bid takes it")
    sim.outbid(instance)
    run.checks["outbid_bills_no_gpu"] = instance not in sim.gpu_billing_instances()
    run.wait("the monitor's wait-or-replace decision", lambda v: _waits(v))
    view = run.poll()
    run.checks["first_outbid_waited_for"] = view.job.current_generation == 1

    sim.win(instance)
    run.say(f"generation 1 wins its machine back: instance {instance} starts again")
    back = run.wait_step(1, 150, checkpoint=150)
    run.say(f"generation 1 trains on from its own disk: step {run.max_step.get(1, 0)}")
    run.checks["same_generation_trained_on_after_the_win"] = (
        back.generation == 1 and back.instance_id == instance
    )

    g = run.wait_step(1, 200, checkpoint=200)
    run.fault("outbid", g, lambda: sim.outbid(instance))
    run.wait("the monitor's second decision", lambda v: len(_waits(v)) >= 2)
    run.wait_training(2)
    view = run.poll()
    first = run.generation(view, 1)
    run.checks["second_outbid_replaced_after_the_wait"] = (
        first is not None and first.replaced_for == "outbid" and not first.host_blamed
    )
    run.checks["outbids_counted"] = first is not None and first.outbids == 2


__all__ = ["outbid"]
