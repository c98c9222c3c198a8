"""The regret bench's first run as tether runs it: the first host, then the monitor's move check
after that host's first checkpoint (`functions.domain.move.judge_move`, the monitor's own call,
on the same book), and the rest of the job on the host it judged cheaper when it moved.

The first host is tether's first-run pick (`plan_job` under the prior over the speed law). It
trains until its first checkpoint, at least `MIN_SAMPLE_S` (the pace store's shortest sample),
at the checkpoint interval the plan chose for it, plus one monitor interval before the check;
its pace is its true hours' (jitter `MEASURE_SIGMA`). The check sees the generation as the store
would hold it (rent-time prices, reliability and prior pace, the heartbeat's step, the recorded
checkpoint) and the book's offers. A move bills the first host up to the check and the second
from its own start-up, download included, for the steps after the checkpoint, at its true hours:
the job's true cost is the sum, against the oracle's one host.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.lib.learned import BENCH_TOTAL_STEPS, MEASURE_SIGMA, with_steps
from bench.lib.regret import HostTruth, with_hours
from functions.domain.cost import cost_offer, plan_job
from functions.domain.heartbeat_contract import CheckpointRef, GpuProbe
from functions.domain.job import Generation, Heartbeat, JobState, new_job
from functions.domain.jobspec import JobSpec
from functions.domain.move import judge_move
from functions.domain.offer import Offer
from functions.domain.pace import (
    MIN_SAMPLE_S,
    JobMeasures,
    pace_estimator,
    prior_steps_per_hour,
)
from functions.domain.speed_law import SpeedLaw
from functions.domain.spend import GenerationPrices

MONITOR_INTERVAL_S = 60.0
START = 1_800_000_000.0  # the bench's clock: any fixed epoch
NO_AGENT = "0" * 64  # the generation's token hash: no agent heartbeats here


@dataclass(frozen=True)
class FirstRun:
    cost_usd: float  # the job's true cost, the move included
    moved: bool


def _generation(
    job_id: str, offer: Offer, spec: JobSpec, steps: int, trained_s: float
) -> Generation:
    """The first host's generation as the store holds it at the move check."""
    now = START + trained_s
    prices = GenerationPrices.from_offer(offer, spec.resources.min_disk_gb)
    return Generation(
        job_id=job_id, generation=1, token_hash=NO_AGENT, instance_id=1, offer_id=offer.id,
        machine_id=offer.machine_id, usd_per_hour=prices.usd_per_hour,
        prices=prices.model_dump(), created_at=START, gpu_name=offer.gpu_name,
        gpu_count=offer.num_gpus, dlperf=offer.dlperf, reliability=offer.reliability_score,
        training_started_at=START, training_start_step=0,
        prior_steps_per_hour=prior_steps_per_hour(spec, offer),
        heartbeat=Heartbeat(at=now, agent_time=now, phase="training", step=steps,
                            gpu=GpuProbe(available=True, utilization_pct=90.0)),
    )  # fmt: skip


def first_run_with_move(
    job: JobSpec,
    offers: Sequence[Offer],
    truth: Mapping[int, HostTruth],
    rng: random.Random,
    law: SpeedLaw | None = None,
) -> FirstRun:
    """The job's true cost on its first run: the first host, and the host it moved to if the
    monitor's check moved it (module docstring)."""
    job = with_steps(job)
    law = SpeedLaw() if law is None else law
    first = plan_job(
        job, offers, estimate=pace_estimator(JobMeasures(name=job.name), law=law)
    ).ranking[0]
    host = first.offer
    true_hours = job.expected_hours / truth[host.id].speed
    stay_cost = cost_offer(
        with_hours(job, true_hours), host, startup_min=truth[host.id].startup_min
    )
    trained_h = max(MIN_SAMPLE_S, first.checkpoint_interval_min * 60) / 3600
    checked_h = trained_h + MONITOR_INTERVAL_S / 3600
    if checked_h >= true_hours:  # finished before the check
        return FirstRun(stay_cost.expected_total_usd, moved=False)
    done = trained_h / true_hours  # the share of the work saved in the first checkpoint
    measured_h = trained_h * math.exp(rng.gauss(0.0, MEASURE_SIGMA))
    steps = max(1, int(BENCH_TOTAL_STEPS * done))  # trained and saved; reported in `measured_h`
    spec = job.model_copy(update={"budget_usd": 1e6})
    the_job, _ = new_job(spec, job_id="bench-00000000", now=START, submitted_by="bench")
    the_job = the_job.model_copy(
        update={
            "state": JobState.RUNNING, "current_generation": 1,
            "recorded_checkpoints": [CheckpointRef(step=steps, generation=1,
                                                   manifest_key="bench/g1/manifest.json")],
        }
    )  # fmt: skip
    generation = _generation(the_job.job_id, host, spec, steps, measured_h * 3600)
    check = judge_move(
        the_job, (generation,), offers, reputations={}, measures=JobMeasures(name=job.name),
        now=START + checked_h * 3600, law=law,
    )  # fmt: skip
    if not check.move:
        return FirstRun(stay_cost.expected_total_usd, moved=False)
    second = next(o for o in offers if o.id == check.offer_id)
    before = cost_offer(with_hours(job, checked_h), host, startup_min=truth[host.id].startup_min)
    left_h = (1 - steps / BENCH_TOTAL_STEPS) * job.expected_hours / truth[second.id].speed
    after = cost_offer(with_hours(job, left_h), second, startup_min=truth[second.id].startup_min)
    return FirstRun(before.expected_total_usd + after.expected_total_usd, moved=True)
