"""Interruptible hosts at run time (functions/domain/outbid.py, the health rule `outbid`, the
monitor's decision): what an outbid looks like, wait or replace by expected cost (hand-computed
both ways), outbid counts, the bid a rent places. Expected values are worked out by hand."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.health import Health, OutbidView, Verdict, classify
from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.job import Heartbeat
from functions.domain.jobspec import Resources
from functions.domain.offer import Offer
from functions.domain.outbid import (
    count_outbid,
    is_outbid,
    outbid_history,
    wait_or_replace,
)
from functions.domain.reconcile import InstanceFacts, JobSnapshot, SupervisionSettings, reconcile
from functions.domain.rent import RentPlan, learned_job_hazard, plan_rent
from functions.domain.spend import VastCharges
from functions.domain.supervision_facts import Observation
from tests.unit.domain.builders import NOW, gen, job
from tests.unit.domain.health_facts import hb, inst, state

SETTINGS = SupervisionSettings(interval_s=60, orphan_grace_s=60)
LABEL = "tether:t-0123abcd:g1"


def stopped(intended: str | None = "running", **fields: Any) -> InstanceFacts:
    values: dict[str, Any] = {
        "id": 100, "label": LABEL, "actual_status": "stopped", "intended_status": intended,
        "start_date": NOW - 600,
    }  # fmt: skip
    return InstanceFacts(**(values | fields))


# -- what an outbid looks like ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instance", "interruptible", "expected"),
    [
        (stopped(), True, True),  # the marketplace's stop: intended_status stays running
        (stopped(is_bid=True), False, True),  # Vast says it is a bid instance
        (stopped("stopped"), True, False),  # the agent's dead-man stop (or ours): asked for
        (stopped(None), True, False),  # no intended_status: not provably the marketplace's
        (stopped(), False, False),  # an on-demand host stopped: dead, as before
        (stopped(actual_status="running"), True, False),
        (stopped(actual_status="exited"), True, False),  # exited never heals: dead
        (None, True, False),  # gone
    ],
)
def test_an_outbid_is_an_interruptible_instance_stopped_while_vast_still_intends_it_to_run(
    instance: InstanceFacts | None, interruptible: bool, expected: bool
) -> None:
    assert is_outbid(instance, gen(interruptible=interruptible)) is expected


# -- wait or replace, by expected cost ----------------------------------------------------------


def test_wait_bound_is_the_break_even_of_replacing_against_waiting() -> None:
    """Replace: 6 min at $0.30/h = $0.03, + $0.06 download = $0.09. Wait: $0.02 storage +
    $0.30 of the job's hour = $0.32/h. Break-even: 0.09 / 0.32 h = 0.28125 h = 1012.5 s."""
    rule = wait_or_replace(
        usd_per_hour=0.30, storage_usd_per_hour=0.02, startup_min=6, download_usd=0.06,
        remaining_hours=5,
    )  # fmt: skip
    assert rule.replace_usd == pytest.approx(0.09)
    assert rule.wait_usd_per_hour == pytest.approx(0.32)
    assert rule.wait_s == pytest.approx(1012.5)


def test_a_big_download_makes_waiting_worth_longer() -> None:
    """60 GB at $0.04/GB = $2.40 to download again: (0.03 + 2.40) / 0.32 h = 7.59375 h."""
    rule = wait_or_replace(
        usd_per_hour=0.30, storage_usd_per_hour=0.02, startup_min=6, download_usd=2.40,
        remaining_hours=100,
    )  # fmt: skip
    assert rule.wait_s == pytest.approx(7.59375 * 3600)


def test_the_wait_never_exceeds_the_work_left() -> None:
    """Break-even 7.59 h, but only 0.5 h of work is left: wait at most 1800 s."""
    rule = wait_or_replace(
        usd_per_hour=0.30, storage_usd_per_hour=0.02, startup_min=6, download_usd=2.40,
        remaining_hours=0.5,
    )  # fmt: skip
    assert rule.wait_s == pytest.approx(1800)
    assert "capped by the remaining work" in rule.why


def test_lost_work_a_replacement_redoes_counts_for_waiting() -> None:
    """$0.09 + $0.16 of work only the resumed host keeps = $0.25; / $0.32/h = 2812.5 s."""
    rule = wait_or_replace(
        usd_per_hour=0.30, storage_usd_per_hour=0.02, startup_min=6, download_usd=0.06,
        lost_work_usd=0.16,
    )  # fmt: skip
    assert rule.wait_s == pytest.approx(2812.5)


def test_nothing_to_gain_from_waiting_replaces_at_once() -> None:
    rule = wait_or_replace(
        usd_per_hour=0.30, storage_usd_per_hour=0.02, startup_min=0, download_usd=0
    )
    assert rule.wait_s == 0


# -- the health rule ------------------------------------------------------------------------------


def test_an_outbid_host_within_its_bound_is_waited_for_not_dead() -> None:
    """Its heartbeat is long silent (the agent was killed with the container): not dead."""
    h = state(
        instance=inst("stopped"),
        heartbeat=None,
        outbid=OutbidView(for_s=100, wait_s=300, why="rule"),
    )  # an hour since rent without a heartbeat: past the startup timeout, were it not outbid
    verdict = classify(h)
    assert (verdict.health, verdict.action, verdict.waited_out) == (Health.OUTBID, "none", False)
    assert "waiting up to 300 s" in verdict.reason
    assert not verdict.blames_host


def test_an_outbid_host_past_its_bound_is_replaced_without_blame() -> None:
    verdict = classify(
        state(instance=inst("stopped"), outbid=OutbidView(for_s=301, wait_s=300, why="rule"))
    )
    assert (verdict.health, verdict.action) == (Health.OUTBID, "replace")
    assert not verdict.blames_host


def test_the_training_killed_by_the_outbid_is_no_crash() -> None:
    """The stop SIGTERMs the training: a non-zero exit, with the restarts used up, is still
    an outbid (not `failed`, not `crashed`)."""
    h = state(
        instance=inst("stopped"),
        heartbeat=hb(age=5, phase="stopping", exit_code=143),
        restarts_so_far=5,
        outbid=OutbidView(for_s=10, wait_s=300, why="rule"),
    )
    assert classify(h).health is Health.OUTBID


def test_over_budget_beats_waiting_for_an_outbid_host() -> None:
    h = state(
        instance=inst("stopped"),
        outbid=OutbidView(for_s=10, wait_s=300, why="rule"),
        spend_usd=10.0,
        budget_usd=10.0,
        usd_per_hour=1.0,
    )
    assert classify(h).health is Health.OVER_BUDGET


# -- the monitor's decision ---------------------------------------------------------------------


def outbid_generation(stopped_since: float, **fields: Any) -> Any:
    return gen(
        interruptible=True, bid_usd_per_hour=0.4, observed_status="stopped",
        observed_status_since=stopped_since, **fields,
    )  # fmt: skip


def decide(generation: Any) -> Any:
    snapshot = JobSnapshot(job=job(), generations=(generation,))
    plan = reconcile([snapshot], [stopped()], VastCharges(), now=NOW, settings=SETTINGS)
    return plan.decisions[0]


def test_the_monitor_waits_for_an_outbid_host_and_counts_the_outbid_once() -> None:
    """Builders: $0.50/h with $0.10/h of storage, 6 min start-up, no download, 1 h of work left.
    Replace: 0.5 × 0.1 h = $0.05; wait: $0.60/h; bound 0.05 / 0.6 h = 300 s."""
    first = decide(outbid_generation(NOW - 100))
    assert first.verdict.health is Health.OUTBID and first.transition is None
    assert "waiting up to 300 s" in first.verdict.reason
    assert (first.observation.outbids, first.observation.outbid_since) == (1, NOW - 100)

    again = decide(outbid_generation(NOW - 100, outbids=1, outbid_since=NOW - 100))
    assert again.observation.outbids == 1  # the same stretch is not counted twice


def test_the_monitor_replaces_an_outbid_host_past_its_bound_through_the_replace_transition() -> (
    None
):
    decision = decide(outbid_generation(NOW - 301))
    assert decision.verdict.health is Health.OUTBID
    assert decision.transition is not None and decision.transition.action == "replace"
    assert decision.transition.generation == 2
    assert decision.transition.reason.startswith("outbid: ")
    assert decision.replaced_for == "outbid" and decision.blame is None


def test_a_stop_the_agent_asked_for_is_still_dead() -> None:
    snapshot = JobSnapshot(job=job(), generations=(outbid_generation(NOW - 100),))
    plan = reconcile([snapshot], [stopped("stopped")], VastCharges(), now=NOW, settings=SETTINGS)
    verdict = plan.decisions[0].verdict
    assert verdict is not None and verdict.health is Health.DEAD


def test_count_outbid_ignores_other_verdicts() -> None:
    seen = Observation(observed_status="stopped", observed_status_since=NOW)
    assert count_outbid(seen, Verdict(health=Health.DEAD, reason="x")).outbids == 0


# -- history --------------------------------------------------------------------------------------


def test_outbid_history_counts_outbids_over_the_hours_bid_instances_ran() -> None:
    """g1: bid, rented 3 h before its end, stopped 1 h of it, outbid twice → 2 h, 2 outbids.
    g2: bid, current, rented 30 min ago, stopped for the last 10 min, once → 20 min.
    g3 on-demand: left out."""
    g1 = gen(1, interruptible=True, created_at=NOW - 4 * 3600, ended_at=NOW - 3600,
             stopped_s=3600, outbids=2)  # fmt: skip
    g2 = gen(2, interruptible=True, created_at=NOW - 1800, observed_status="stopped",
             observed_status_since=NOW - 600, outbids=1)  # fmt: skip
    g3 = gen(3, created_at=NOW - 100, outbids=0)
    history = outbid_history([g1, g2, g3], NOW)
    assert history.outbids == 3
    assert history.interruptible_hours == pytest.approx(2 + 20 / 60)


# -- renting with a bid ---------------------------------------------------------------------------


def offer(**fields: Any) -> Offer:
    values: dict[str, Any] = {
        "id": 11, "machine_id": 5, "gpu_name": "RTX 4090", "num_gpus": 1, "gpu_ram": 24564,
        "disk_space": 200, "dph_base": 0.20, "storage_cost": 0.15, "inet_down": 900,
        "inet_up": 900, "reliability2": 0.99, "min_bid": 0.20,
    }  # fmt: skip
    return Offer(**(values | fields))


def test_a_job_outbid_before_plans_with_the_hazard_learned_from_its_outbids() -> None:
    """3 outbids in 2 h on bid hosts, spec prior 0.1/h worth 10 h: (1 + 3) / 12 = 0.333/h,
    and the interval the host gets counts it (its detail names the hazard)."""
    spec = job().spec.model_copy(
        update={"resources": Resources(market="interruptible", min_download_mbps=0)}
    )
    before = gen(1, interruptible=True, created_at=NOW - 2 * 3600, ended_at=NOW, outbids=3)
    assert learned_job_hazard(job(spec=spec), [before], NOW).per_hour == pytest.approx(4 / 12)
    plan = plan_rent(
        job(current_generation=1, spec=spec), [offer()], generation=2, generations=[before],
        reputations={}, now=NOW,
    )  # fmt: skip
    assert isinstance(plan, RentPlan)
    interval = plan.candidates[0].checkpoint_interval
    assert interval is not None and "outbid hazard 0.333/h" in interval.detail


def test_an_interruptible_plan_rents_with_a_bid_and_prices_the_generation_at_it() -> None:
    """40 GB at $0.15/GB/month = $0.00833/h of storage; GPU at the bid $0.22/h."""
    spec = job().spec.model_copy(
        update={"resources": Resources(market="interruptible", min_download_mbps=0)}
    )
    plan = plan_rent(
        job(state=job().state, current_generation=0, spec=spec),
        [offer()], generation=1, generations=(), reputations={}, now=NOW,
    )  # fmt: skip
    assert isinstance(plan, RentPlan)
    candidate = plan.candidates[0]
    assert candidate.bid_usd_per_hour == pytest.approx(0.22)
    assert candidate.prices.gpu_usd_per_hour == pytest.approx(0.22)
    assert candidate.prices.usd_per_hour == pytest.approx(0.22 + 0.15 * 40 / 720)


def test_an_on_demand_plan_rents_without_a_bid() -> None:
    plan = plan_rent(
        job(current_generation=0), [offer()], generation=1, generations=(), reputations={},
        now=NOW,
    )  # fmt: skip
    assert isinstance(plan, RentPlan) and plan.candidates[0].bid_usd_per_hour is None
    assert plan.candidates[0].prices.gpu_usd_per_hour == pytest.approx(0.20)


# -- back from an outbid ------------------------------------------------------------------------


def back_from_outbid(back_for: float) -> Any:
    """Outbid at NOW - 900 (counted), running again for `back_for` s; its last heartbeat, at
    NOW - 901, reports the exit the stop caused."""
    stopped_beat = Heartbeat(
        at=NOW - 901, agent_time=NOW - 901, phase="stopping", step=3, exit_code=143,
        gpu=GpuProbe(available=True, utilization_pct=0.0),
    )  # fmt: skip
    return gen(
        interruptible=True, bid_usd_per_hour=0.4, observed_status="running",
        observed_status_since=NOW - back_for, outbids=1, outbid_since=NOW - 900,
        heartbeat=stopped_beat,
    )  # fmt: skip


def test_a_host_back_from_an_outbid_gets_the_heartbeat_timeout_afresh() -> None:
    """Its last heartbeat is 901 s old (timeout 180 s) and says exit 143: neither dead nor
    crashed while its agent starts again."""
    snapshot = JobSnapshot(job=job(), generations=(back_from_outbid(60),))
    running = stopped(actual_status="running")
    decision = reconcile(
        [snapshot], [running], VastCharges(), now=NOW, settings=SETTINGS
    ).decisions[0]
    assert decision.verdict is not None and decision.verdict.health is Health.HEALTHY
    assert decision.transition is None


def test_a_host_back_from_an_outbid_whose_agent_never_beats_is_dead() -> None:
    snapshot = JobSnapshot(job=job(), generations=(back_from_outbid(181),))
    running = stopped(actual_status="running")
    decision = reconcile(
        [snapshot], [running], VastCharges(), now=NOW, settings=SETTINGS
    ).decisions[0]
    assert decision.verdict is not None and decision.verdict.health is Health.DEAD
    assert "last heartbeat 181 s ago" in decision.verdict.reason


def test_the_planners_bid_is_the_one_rented_with(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seam for the planner's pricing: a ranked offer that carries a bid
    (`OfferCost.bid_usd_per_hour`) is rented with exactly that bid, whatever the market."""
    import functions.domain.rent as rent
    from functions.domain.cost import plan_job as real

    def planned(*args: Any, **kwargs: Any) -> Any:
        plan = real(*args, **kwargs)
        bid = plan.ranking[0].model_copy(
            update={"market": "interruptible", "bid_usd_per_hour": 0.31}
        )
        return plan.model_copy(update={"ranking": [bid]})

    monkeypatch.setattr(rent, "plan_job", planned)
    spec = job().spec.model_copy(update={"resources": Resources(market="auto")})
    plan = plan_rent(
        job(current_generation=0, spec=spec), [offer()], generation=1, generations=(),
        reputations={}, now=NOW,
    )  # fmt: skip
    assert isinstance(plan, RentPlan)
    assert plan.candidates[0].bid_usd_per_hour == 0.31
    assert plan.candidates[0].prices.gpu_usd_per_hour == 0.31
