"""Moving a running job to a cheaper host once its own pace is known (pure, no I/O).

A first rent is chosen before anything is measured: the planner ranks hosts by expected cost
under its prior over the speed law (`functions/domain/speed_law.py`), and when the job's speed
does not follow `dlperf` the way the prior leans, that first host can cost far more than the
best one (BENCHMARKS.md, planner regret: no single host is near the best under every law). The
job's first checkpoint on the host says how fast it really trains there, so the monitor asks
once per generation, right after that checkpoint, whether finishing the work elsewhere is
cheaper than staying, everything counted:

- staying: the steps left from the host's last reported step, at the pace it trained
  (`pace_sample`, bounded as the pace store's samples are), priced as the planner prices any
  host (`cost_offer` on the host as it was rented, `spend.rented_offer`): its $/h, the checkpoints'
  uploads and the interruptions its reliability makes likely; not the start-up and download it
  has paid already;
- moving: what the lifecycle's replace would rent (`plan_rent`, the same call the provision
  makes, the current machine left out) priced from the newest recorded checkpoint (the steps
  since are trained again), with the pace this host showed filed as the destroy step files it
  (`with_live_sample`): start-up, the download, storage, traffic and interruptions included.

Both sides are priced by the same terms: a staying cost of compute alone would make every host
look cheaper to keep than it is, and the job would stay on hosts a move would save on.

The job moves (verdict `overpriced`: a replace that blames nobody and counts against no cap but
its own, `policy.max_moves`) only when moving is expected to save at least `MOVE_MARGIN` of
staying and `MOVE_MIN_SAVING_USD`. A job moves at most `policy.max_moves` times (1 by default;
0 never); each generation is judged once (`Generation.move_checked_at`), so a judgement to stay
is not asked again every minute.

The check needs the work in steps: the spec's `total_steps`, else the total the script reports
in its heartbeats (`work_spec`); a job without either is never moved. Interruptible generations
are not judged: their price moves with the market and the outbid rule replaces them already.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.cost import cost_offer
from functions.domain.health import Health
from functions.domain.job import Generation, HostReputation, Job, JobState
from functions.domain.jobspec import JobSpec
from functions.domain.offer import Offer
from functions.domain.pace import (
    JobMeasures,
    Pace,
    add_sample,
    gpu_key,
    pace_sample,
    startup_estimator,
    work_spec,
)
from functions.domain.rent import Refusal, plan_rent
from functions.domain.speed import SpeedEstimate
from functions.domain.speed_law import SpeedLaw
from functions.domain.spend import rented_offer

# Moving must be expected to save this share of what staying costs, and this much at least.
# The new host's cost is already an expected cost under the posterior (its uncertainty priced
# in); the margin is for what the estimate leaves out, a move's own risks (a host that does not
# start, a restore to redo), and small: on the planner-regret bench's tuning books a larger one
# only kept more jobs on hosts that cost more (BENCHMARKS.md, planner regret).
MOVE_MARGIN = 0.05
MOVE_MIN_SAVING_USD = 0.05
# The replacement cause a move records on the generation it leaves.
MOVED_FOR = Health.OVERPRICED.value


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MoveCheck(_Frozen):
    """One judgement of a running generation: move or stay, and why."""

    move: bool
    reason: str
    stay_usd: float | None = Field(default=None, description="The rest of the job on this host.")
    move_usd: float | None = Field(
        default=None, description="The rest of the job on the best other host, all counted."
    )
    offer_id: int | None = Field(default=None, description="That host's offer.")


def moves_made(generations: Iterable[Generation]) -> int:
    """How many times the job moved for price (generations replaced as `overpriced`)."""
    return sum(g.replaced_for == MOVED_FOR for g in generations)


def move_due(job: Job, current: Generation, generations: Sequence[Generation]) -> bool:
    """Whether the monitor should judge moving `current` this run: a running on-demand
    generation not judged yet, with moves left, that has trained long enough for a pace and
    saved a checkpoint of its own (so a move loses little), on a job whose work is in steps."""
    if job.state != JobState.RUNNING or not current.is_current or current.interruptible:
        return False
    if current.move_checked_at is not None or current.machine_id is None:
        return False
    if moves_made(generations) >= job.spec.policy.max_moves:
        return False
    beat = current.heartbeat
    if beat is None or beat.phase != "training" or beat.step is None:
        return False
    if not any(c.generation == current.generation for c in job.recorded_checkpoints):
        return False
    total = work_spec(job.spec, generations).total_steps
    if total is None or beat.step >= total:
        return False
    return pace_sample(current) is not None


def with_live_sample(measures: JobMeasures, current: Generation) -> JobMeasures:
    """`measures` with the running generation's pace filed, as the lifecycle's destroy step
    files it when a replace ends the generation: what the replacement's plan will know."""
    sample = pace_sample(current)
    if sample is None:
        return measures
    key = (gpu_key(sample.gpu_name), sample.gpu_count)
    paces: dict[tuple[str, int], Pace] = {
        (gpu_key(p.gpu_name), p.gpu_count): p for p in measures.paces
    }
    paces[key] = add_sample(paces.get(key), sample)
    return measures.model_copy(update={"paces": tuple(paces.values())})


def stay_usd(spec: JobSpec, current: Generation, hours_left: float, measures: JobMeasures) -> float:
    """The rest of the job on the host it runs on, priced by `cost_offer`'s terms as the
    alternative is (module docstring): `hours_left` at its $/h, its checkpoints' uploads and
    its expected interruptions (each a start-up elsewhere and half an interval trained again).
    A generation without its offer's id is priced by its hours at its $/h alone."""
    host = rented_offer(current, spec.resources.min_disk_gb)
    if host is None:
        return hours_left * current.usd_per_hour
    hours = SpeedEstimate(
        hours=hours_left, source="measured", runs=1, basis="this host's pace",
        detail="the steps left at the pace this host trained",
    )  # fmt: skip
    cost = cost_offer(spec, host, speed=hours, startup=startup_estimator(measures)(spec, host))
    paid = cost.breakdown.startup_usd + cost.breakdown.download_usd
    return cost.expected_total_usd - paid


def worth_moving(stay: float, move: float) -> bool:
    """Moving saves at least `MOVE_MARGIN` of staying and `MOVE_MIN_SAVING_USD`."""
    saving = stay - move
    return saving >= MOVE_MARGIN * stay and saving >= MOVE_MIN_SAVING_USD


def judge_move(
    job: Job,
    generations: Sequence[Generation],
    offers: Iterable[Offer],
    *,
    reputations: Mapping[int, HostReputation],
    measures: JobMeasures,
    now: float,
    law: SpeedLaw | None = None,
) -> MoveCheck:
    """Move the job's current generation or keep it (module docstring). `offers`: a fresh
    search for the job's resources; `measures`: the pace and start-up stored for its name."""
    current = next(
        (g for g in generations if g.is_current and g.generation == job.current_generation), None
    )
    if current is None:
        return MoveCheck(move=False, reason="no current generation to judge")
    sample = pace_sample(current)
    beat = current.heartbeat
    spec = work_spec(job.spec, generations)
    if sample is None or beat is None or beat.step is None or spec.total_steps is None:
        return MoveCheck(move=False, reason="no pace or no work in steps to judge a move by")
    pace = sample.steps / sample.seconds * 3600
    left = max(0, spec.total_steps - beat.step)
    stay = stay_usd(spec, current, left / pace, measures)
    here = (
        f"staying: {left} steps at {pace:.0f} steps/h on this {current.gpu_name or 'host'} "
        f"at ${current.usd_per_hour:.3f}/h, ${stay:.2f} with its uploads and interruptions"
    )
    others = [o for o in offers if o.machine_id != current.machine_id]
    plan = plan_rent(  # prices the work by the same `work_spec`
        job, others, generation=current.generation + 1,
        generations=generations, reputations=reputations, now=now,
        measures=with_live_sample(measures, current), law=law, max_offers=1,
    )  # fmt: skip
    if isinstance(plan, Refusal):
        return MoveCheck(move=False, reason=f"{here}; no move: {plan.reason}", stay_usd=stay)
    best = plan.candidates[0]
    offer, move = best.offer, best.expected_total_usd
    there = (
        f"offer {offer.id} ({offer.num_gpus}x {offer.gpu_name}, machine {offer.machine_id}) "
        f"is expected to finish from the last checkpoint for ${move:.2f} with its start-up"
    )
    decision = MoveCheck(
        move=worth_moving(stay, move), reason="", stay_usd=stay, move_usd=move, offer_id=offer.id
    )
    saved = (stay - move) / stay if stay > 0 else 0.0
    if decision.move:
        why = f"{here}; {there}: moving saves {saved:.0%}"
    elif move >= stay:
        why = f"{here}; {there}: no cheaper, staying"
    else:
        why = (
            f"{here}; {there}: that saves {saved:.0%} (${stay - move:.2f}), less than a move "
            f"must ({MOVE_MARGIN:.0%} and ${MOVE_MIN_SAVING_USD:.2f}), staying"
        )
    return decision.model_copy(update={"reason": why})


__all__ = [
    "MOVED_FOR",
    "MOVE_MARGIN",
    "MOVE_MIN_SAVING_USD",
    "MoveCheck",
    "judge_move",
    "move_due",
    "moves_made",
    "stay_usd",
    "with_live_sample",
    "worth_moving",
]
