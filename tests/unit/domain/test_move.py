"""Moving a running job to a cheaper host once its own pace is known (functions/domain/move.py)."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.cost import RELIABILITY_MAX
from functions.domain.health import Health
from functions.domain.heartbeat_contract import CheckpointRef, GpuProbe
from functions.domain.job import Generation, Heartbeat, Job, JobState
from functions.domain.jobspec import parse_job
from functions.domain.measures import MOVE_CAUSE
from functions.domain.move import (
    MOVE_MARGIN,
    MOVED_FOR,
    judge_move,
    move_due,
    moves_made,
    with_live_sample,
    worth_moving,
)
from functions.domain.offer import Offer
from functions.domain.pace import JobMeasures, pace_sample, work_spec
from functions.domain.spend import rented_offer
from tests.unit.domain.builders import NOW, SPEC, gen, job

# 3 h of training on one RTX 4090 (dlperf 90 here), 3,000 steps: 1,000 steps/h there.
MOVING_SPEC: dict[str, Any] = {
    **SPEC, "expected_hours": 3, "reference_gpu": "RTX 4090", "total_steps": 3000,
    "budget_usd": 50,
}  # fmt: skip
TRAINED_S = 1800.0  # the current host has trained half an hour


def market_offer(offer_id: int, gpu: str, dlperf: float, usd_per_hour: float) -> Offer:
    return Offer.model_validate(
        {
            "id": offer_id, "machine_id": offer_id * 10, "gpu_name": gpu, "num_gpus": 1,
            "gpu_ram": 24_000, "disk_space": 100, "dph_base": usd_per_hour, "storage_cost": 0,
            "inet_down": 500, "inet_up": 500, "reliability2": 0.99, "rentable": True,
            "dlperf": dlperf, "inet_down_cost": 0.0, "inet_up_cost": 0.0,
        }
    )  # fmt: skip


FAST = market_offer(1, "RTX 4090", 90.0, 0.40)
# The host the job runs on, as it was offered: a slow card, cheap by the hour.
SLOW_OFFER, SLOW_MACHINE = 7, 70


def moving_job(**fields: Any) -> Job:
    spec = parse_job({**MOVING_SPEC, **fields.pop("spec", {})})
    checkpoints = fields.pop(
        "recorded_checkpoints",
        [CheckpointRef(step=40, generation=1, manifest_key="t/g1/ckpt-40/manifest.json")],
    )
    return job(spec=spec, budget_usd=spec.budget_usd, recorded_checkpoints=checkpoints, **fields)


def beat_at(step: int | None, phase: str = "training", **fields: Any) -> Heartbeat:
    return Heartbeat(
        at=NOW - 5, agent_time=NOW, phase=phase, step=step,
        gpu=GpuProbe(available=True, utilization_pct=90.0), **fields,
    )  # fmt: skip


def running(steps: int, **fields: Any) -> Generation:
    """Generation 1 on the slow host, `steps` trained in `TRAINED_S` since its first step."""
    beat = beat_at(steps, total_steps=fields.pop("total_steps", None))
    usd_per_hour = fields.pop("usd_per_hour", 0.10)
    values: dict[str, Any] = {
        "offer_id": SLOW_OFFER, "machine_id": SLOW_MACHINE, "usd_per_hour": usd_per_hour,
        "prices": {"gpu_usd_per_hour": usd_per_hour, "storage_usd_per_hour": 0.0},
        "gpu_name": "RTX 3060", "gpu_count": 1, "dlperf": 20.0, "reliability": 0.99,
        "training_started_at": NOW - 5 - TRAINED_S, "training_start_step": 0, "heartbeat": beat,
    }  # fmt: skip
    values.update(fields)
    return gen(1, **values)


def judged(current: Generation, offers: list[Offer], **kwargs: Any) -> Any:
    the_job = kwargs.pop("the_job", moving_job())
    return judge_move(
        the_job, (current,), offers, reputations={}, measures=JobMeasures(name="t"), now=NOW,
        **kwargs,
    )  # fmt: skip


def test_a_host_far_slower_than_planned_is_left_for_a_cheaper_one() -> None:
    # 50 steps in half an hour: 100 steps/h, 29.5 h for the 2,950 steps left at $0.10/h, $2.95;
    # the RTX 4090 would take about 3 h from the checkpoint at $0.40/h.
    check = judged(running(50), [FAST])
    assert check.move, check.reason
    assert check.offer_id == FAST.id
    assert check.stay_usd == pytest.approx(2.95, rel=0.01)
    assert check.move_usd is not None and check.move_usd < check.stay_usd * (1 - MOVE_MARGIN)
    assert "moving saves" in check.reason and "offer 1 (1x RTX 4090" in check.reason


def test_a_host_that_trains_as_planned_stays() -> None:
    # 500 steps in half an hour: 1,000 steps/h, as fast as the 4090 and four times cheaper.
    check = judged(running(500), [FAST])
    assert not check.move
    assert "staying" in check.reason
    assert check.stay_usd == pytest.approx(0.25, rel=0.01)


def test_no_other_offer_means_staying() -> None:
    check = judged(running(50), [])
    assert not check.move
    assert "no move: no offer qualifies" in check.reason


def test_the_current_machine_is_not_its_own_alternative() -> None:
    again = market_offer(7, "RTX 3060", 20.0, 0.10)  # machine 70: the one the job runs on
    check = judged(running(50), [again])
    assert not check.move and "no offer qualifies" in check.reason


def test_a_move_the_budget_cannot_start_is_not_made() -> None:
    poor = moving_job(spec={"budget_usd": 1}, spent_usd=0.99)
    check = judged(running(50), [FAST], the_job=poor)
    assert not check.move and "no move: remaining budget" in check.reason


def test_the_scripts_total_is_the_work_when_the_spec_has_none() -> None:
    no_total = moving_job(spec={"total_steps": None})
    current = running(50, total_steps=3000)
    assert work_spec(no_total.spec, (current,)).total_steps == 3000
    assert move_due(no_total, current, (current,))
    assert judged(current, [FAST], the_job=no_total).move
    # Neither the spec nor the script gives it: never judged.
    assert not move_due(no_total, running(50), (running(50),))


@pytest.mark.parametrize(
    ("case", "job_fields", "gen_fields", "due"),
    [
        ("trained, checkpointed, never judged", {}, {}, True),
        ("judged once already", {}, {"move_checked_at": NOW - 60}, False),
        ("no checkpoint of its own yet", {"recorded_checkpoints": []}, {}, False),
        (
            "the newest checkpoint is an older host's",
            {"recorded_checkpoints": [CheckpointRef(step=9, generation=1, manifest_key="k")],
             "current_generation": 2},
            {"generation": 2},
            False,
        ),
        ("moves turned off", {"spec": {"policy": {"max_moves": 0}}}, {}, False),
        ("an interruptible host", {}, {"interruptible": True, "bid_usd_per_hour": 0.1}, False),
        ("not running", {"state": JobState.REPLACING}, {}, False),
        ("too short a run for a pace", {}, {"training_started_at": NOW - 65}, False),
        ("the work is done", {}, {"heartbeat": beat_at(3000)}, False),
        ("restoring, not training", {}, {"heartbeat": beat_at(None, "restoring")}, False),
    ],
)  # fmt: skip
def test_a_generation_is_judged_once_after_its_first_checkpoint(
    case: str, job_fields: dict[str, Any], gen_fields: dict[str, Any], due: bool
) -> None:
    current = running(50, **gen_fields)
    assert move_due(moving_job(**job_fields), current, (current,)) is due, case


def test_a_job_moves_at_most_max_moves_times() -> None:
    moved = running(50, generation=1, is_current=False, replaced_for="overpriced")
    current = running(50, generation=2)
    checkpoint = CheckpointRef(step=60, generation=2, manifest_key="t/g2/ckpt-60/manifest.json")
    once = moving_job(current_generation=2, recorded_checkpoints=[checkpoint])
    twice = moving_job(
        current_generation=2, recorded_checkpoints=[checkpoint], spec={"policy": {"max_moves": 2}}
    )
    assert moves_made((moved, current)) == 1
    assert not move_due(once, current, (moved, current))
    assert move_due(twice, current, (moved, current))


def test_the_live_pace_is_filed_as_the_destroy_step_would() -> None:
    current = running(50)
    sample = pace_sample(current)
    assert sample is not None
    measures = with_live_sample(JobMeasures(name="t"), current)
    (pace,) = measures.paces
    assert pace.runs == 1 and pace.steps == pytest.approx(sample.steps)
    assert with_live_sample(JobMeasures(name="t"), running(50, heartbeat=None)).paces == ()


def test_worth_moving_needs_the_margin_and_a_floor() -> None:
    assert worth_moving(1.0, 1.0 - MOVE_MARGIN)
    assert not worth_moving(1.0, 1.0 - MOVE_MARGIN + 0.01)
    assert not worth_moving(0.2, 0.16)  # 20 % but four cents


# Staying is priced by the planner's own terms, as the alternative is: its $/h, the uploads of
# its checkpoints and the interruptions its reliability makes likely.
BIG_CHECKPOINTS = {"data": {"upload_gb_per_checkpoint": 2}}


def on_time(**fields: Any) -> Generation:
    """A host that trains at the planned 1,000 steps/h at $1/h: 2.5 h and $2.50 of compute
    left, against a 4090 at $0.90/h that would finish from the checkpoint for about $2.54."""
    prices = {"gpu_usd_per_hour": 1.0, "storage_usd_per_hour": 0.0, **fields.pop("prices", {})}
    return running(500, usd_per_hour=1.0, prices=prices, **fields)


NEARLY_AS_CHEAP = market_offer(1, "RTX 4090", 90.0, 0.90)


def test_staying_pays_for_its_checkpoint_uploads() -> None:
    the_job = moving_job(spec=BIG_CHECKPOINTS)
    free = judged(on_time(), [NEARLY_AS_CHEAP], the_job=the_job)
    assert not free.move, free.reason
    # $0.05 a GB up: every 2 GB checkpoint this host uploads from here on costs $0.10.
    metered = judged(
        on_time(prices={"inet_up_usd_per_gb": 0.05}), [NEARLY_AS_CHEAP], the_job=the_job
    )
    assert metered.move, metered.reason
    assert metered.stay_usd is not None and free.stay_usd is not None
    assert metered.stay_usd > free.stay_usd + 0.5
    assert "with its uploads and interruptions" in metered.reason


def test_staying_on_an_unreliable_host_pays_for_its_likely_interruptions() -> None:
    sure = judged(on_time(reliability=0.99), [NEARLY_AS_CHEAP])
    assert not sure.move, sure.reason
    shaky = judged(on_time(reliability=0.6), [NEARLY_AS_CHEAP])
    assert shaky.move, shaky.reason
    assert shaky.stay_usd is not None and sure.stay_usd is not None
    assert shaky.stay_usd > sure.stay_usd


def test_a_generation_stored_without_its_reliability_is_priced_as_the_surest_host() -> None:
    unknown = judged(on_time(reliability=None), [NEARLY_AS_CHEAP]).stay_usd
    surest = judged(on_time(reliability=RELIABILITY_MAX), [NEARLY_AS_CHEAP]).stay_usd
    assert unknown == pytest.approx(surest)
    assert unknown is not None and unknown < judged(on_time(), [NEARLY_AS_CHEAP]).stay_usd


def test_the_rented_host_is_priced_as_it_was_offered() -> None:
    current = running(50, prices={
        "gpu_usd_per_hour": 0.10, "storage_usd_per_hour": 0.02, "inet_up_usd_per_gb": 0.03,
        "inet_up_mbps": 200.0, "inet_down_mbps": 800.0,
    })  # fmt: skip
    disk_gb = moving_job().spec.resources.min_disk_gb
    host = rented_offer(current, disk_gb)
    assert host is not None
    assert host.usd_per_hour(disk_gb) == pytest.approx(0.12)
    assert (host.id, host.machine_id, host.gpu_name, host.dlperf) == (7, 70, "RTX 3060", 20.0)
    assert (host.inet_up, host.inet_down, host.inet_up_cost) == (200.0, 800.0, 0.03)
    assert host.reliability_score == 0.99
    assert rented_offer(running(50, offer_id=None), disk_gb) is None


def test_the_dashboard_counts_moves_under_the_verdict_the_monitor_logs() -> None:
    # infra's "Replaces by cause" widget sums the run's `verdicts` by this name.
    assert MOVE_CAUSE == MOVED_FOR == Health.OVERPRICED.value
