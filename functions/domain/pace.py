"""What tether learns from a job's own generations (pure): training pace per (job name, GPU
model, GPU count) and start-up per machine and per GPU model, and the estimators that give the
planner those figures in place of the speed prior and the spec's start-up
(docs/architecture.md#cost-model).

Samples. A generation gives its samples when the lifecycle ends it (the `destroy` step of a
replace or a stop, before a replacement is planned in the same execution):

- pace: steps trained ÷ seconds trained on that host, from its first `training` heartbeat
  (`training_started_at`, `training_start_step`) to its last heartbeat while training, or else
  to the last step the monitor saw advance (`progress_step`, `progress_at`): the steps of one
  steady script, without start-up or idle time. Taken only past `MIN_SAMPLE_S` and
  `MIN_SAMPLE_STEPS`: a short run says more about its first steps than its pace.
- start-up: rent (`created_at`) → first training step after the restore (`first_step_at`, the
  agent's report on the server's clock), less the job's download at the host's `inet_down`
  (what the planner adds per offer itself), so what is learned is the fixed part: image pull,
  install, restore, model load, first step. Dropped past `MAX_STARTUP_S` (a host that hung).
  The first step's time is the host's word; the server's own clock bounds it from below: the
  first `training` heartbeat arrived (`training_started_at`) at most one heartbeat interval
  after training began, so a host claiming an instant start-up gains nothing below that.

Bounds, so a host that reports absurd steps cannot dominate what later plans use. Each pace
sample weighs at most `MAX_SAMPLE_S` of training (a longer one is scaled down, its pace kept),
and its pace is clamped to within `PACE_BOUND` times the speed prior's pace on that offer
(`Generation.prior_steps_per_hour`, recorded with the rent when the job gives `total_steps`);
without a prior in steps only `MAX_STEPS_PER_S` bounds it. Stored figures are sums (steps,
seconds, runs) added atomically, so concurrent writers never lose a sample, and every sample
names its generation, so an ended generation that is ended again adds nothing. The same ADD
files what calibrating the prior needs, where the rent recorded it: the prior's steps in the
sample's seconds (beside the sample's steps and a run count) and the host's dlperf as sums for
a log-log fit (`calibration.FitSums`). Items stored before these lack them: uncalibrated.

Estimates. With `total_steps`, the work left is `total_steps` less the step a replacement
resumes from (the newest recorded checkpoint); the measured runs calibrate the prior rather
than replace it (BENCHMARKS.md, planner regret: a model's measured hours lose each host's own
dlperf, and a job learns only the models it rented):

- an offer whose GPU model and count were measured: this offer's prior hours for the steps
  left × (prior steps ÷ measured steps on that model), unshrunk (`calibration.PRIOR_RUNS`)
  (source `measured`, with its runs). Uncalibrated items: steps left ÷ the
  measured steps per hour, as before.
- any other offer, for a job with `reference_gpu`, once two runs differ in dlperf: steps left ÷
  the pace of the power law refitted to every run (`calibration.fit_power_law`); else, while
  one dlperf level is known or for a job without `reference_gpu` (its hours do not follow the
  GPU, so no law), the prior × the factor pooled over every calibrated run (`POOL`). Source
  `prior`, basis "prior, calibrated by N runs".
- nothing calibrated: the prior's hours scaled to the share of steps left.

With the speed law held unknown (`pace_estimator(law=...)`, what the planner passes:
`functions/domain/speed_law.py`), a job with `reference_gpu` and `total_steps` is priced by the
law's posterior after every run that knew its host's dlperf (`job_speed_law`, from the same fit
sums): a machine the job itself ran on at its own pace (`host_paces`), a measured model's
other hosts at the law's hours × the model's share of how far its runs were off the law
(`_off_law`), every other offer at the posterior-mean hours, in place of the refit and the
pooled factor; the steps left scale both.

Without `total_steps` but with `reference_gpu`, a pace measured both on the reference GPU and on
the offer's GPU (same count) replaces the dlperf ratio: hours = expected_hours × reference pace
÷ offer pace. Otherwise the prior, unchanged. Start-up: the machine's own figure where seen,
else the GPU model's, else the spec's `expected_startup_min`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.calibration import (
    PRIOR_RUNS,
    FitSums,
    PowerLaw,
    calibration_factor,
    fit_power_law,
)
from functions.domain.cost import Estimator, StartupEstimator, download_minutes
from functions.domain.job import Generation, Job
from functions.domain.jobspec import JobSpec
from functions.domain.offer import Offer
from functions.domain.speed import SpeedEstimate, StartupEstimate, prior_estimate, spec_startup
from functions.domain.speed_law import SpeedLaw, law_sums, model_share

MIN_SAMPLE_S = 300.0  # five minutes of training at least
MIN_SAMPLE_STEPS = 10
MAX_SAMPLE_S = 6 * 3600.0  # one generation weighs at most six hours of training
PACE_BOUND = 4.0  # a sample's pace stays within [prior / 4, prior × 4]
MAX_STEPS_PER_S = 100.0  # without a prior in steps: no fine-tune steps faster than this
MAX_STARTUP_S = 6 * 3600.0
POOL = True  # before two dlperf levels are measured, carry the pooled factor to other models


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


def gpu_key(gpu_name: str) -> str:
    """GPU models compare as Vast spells them, ignoring case and spacing."""
    return " ".join(gpu_name.lower().split())


# --- samples --------------------------------------------------------------------------------


class PaceSample(_Frozen):
    sample_id: str  # `<job id>:g<n>`: one sample per generation
    gpu_name: str
    gpu_count: int
    steps: float  # bounded (module docstring)
    seconds: float
    # What calibrating the prior needs (module docstring), None when the rent did not record it:
    prior_steps: float | None = None  # the prior's steps in `seconds` on this host
    dlperf: float | None = None  # the host's dlperf

    def fit_sums(self) -> FitSums:
        """This run's point for the power-law refit (none without dlperf)."""
        if self.dlperf is None or self.steps <= 0 or self.seconds <= 0:
            return FitSums()
        return FitSums.of(self.dlperf, self.steps / self.seconds * 3600)


class StartupSample(_Frozen):
    sample_id: str
    gpu_name: str
    machine_id: int | None
    seconds: float  # fixed part: rent → first step, less the download


def sample_id(generation: Generation) -> str:
    return f"{generation.job_id}:g{generation.generation}"


def _trained_until(generation: Generation) -> tuple[int, float] | None:
    """The last (step, time) the generation was seen training."""
    beat = generation.heartbeat
    if beat is not None and beat.phase == "training" and beat.step is not None:
        return beat.step, beat.at
    if generation.progress_step is not None and generation.progress_at is not None:
        return generation.progress_step, generation.progress_at
    return None


def bounded_steps(steps: float, seconds: float, prior_steps_per_hour: float | None) -> float:
    """`steps` in `seconds`, their pace clamped to the prior's band (or `MAX_STEPS_PER_S`)."""
    pace = steps / seconds
    if prior_steps_per_hour is not None and prior_steps_per_hour > 0:
        prior = prior_steps_per_hour / 3600
        pace = min(max(pace, prior / PACE_BOUND), prior * PACE_BOUND)
    return min(pace, MAX_STEPS_PER_S) * seconds


def work_spec(spec: JobSpec, generations: Iterable[Generation]) -> JobSpec:
    """The spec with its work in steps: its own `total_steps`, else the total the script
    reported in the newest heartbeat that gave one (what `tether status` shows as "script"): what
    a plan prices a job's measured paces by."""
    if spec.total_steps is not None:
        return spec
    reported = [
        (g.generation, g.heartbeat.total_steps)
        for g in generations
        if g.heartbeat is not None and g.heartbeat.total_steps is not None
    ]
    if not reported:
        return spec
    return spec.model_copy(update={"total_steps": max(reported)[1]})


def pace_sample(generation: Generation) -> PaceSample | None:
    """The generation's training pace as a sample, bounded; None when it did not train enough
    or was rented before generations recorded their GPUs."""
    end = _trained_until(generation)
    started, start_step = generation.training_started_at, generation.training_start_step
    if end is None or started is None or generation.gpu_name is None:
        return None
    steps, seconds = float(end[0] - (start_step or 0)), end[1] - started
    if seconds < MIN_SAMPLE_S or steps < MIN_SAMPLE_STEPS:
        return None
    return bounded_sample(
        sample_id(generation), generation.gpu_name, generation.gpu_count or 1, steps, seconds,
        prior_steps_per_hour=generation.prior_steps_per_hour, dlperf=generation.dlperf,
    )  # fmt: skip


def bounded_sample(
    sample: str, gpu_name: str, gpu_count: int, steps: float, seconds: float, *,
    prior_steps_per_hour: float | None, dlperf: float | None,
) -> PaceSample:  # fmt: skip
    """`steps` trained in `seconds` on a host as a sample: weighed at most `MAX_SAMPLE_S`, its
    pace bounded, with the prior's steps in the same seconds where the rent recorded them."""
    if seconds > MAX_SAMPLE_S:
        steps, seconds = steps * MAX_SAMPLE_S / seconds, MAX_SAMPLE_S
    prior = prior_steps_per_hour
    return PaceSample(
        sample_id=sample,
        gpu_name=gpu_name,
        gpu_count=gpu_count,
        steps=bounded_steps(steps, seconds, prior),
        seconds=seconds,
        prior_steps=prior * seconds / 3600 if prior is not None and prior > 0 else None,
        dlperf=dlperf if dlperf is not None and dlperf > 0 else None,
    )


def startup_sample(generation: Generation, job: JobSpec) -> StartupSample | None:
    """Rent → first training step, less the job's download at the host's speed; None without
    a first step (it never trained) or past `MAX_STARTUP_S`."""
    if generation.first_step_at is None or generation.created_at <= 0:
        return None
    if generation.gpu_name is None:
        return None
    seconds = generation.first_step_at - generation.created_at
    if generation.training_started_at is not None:  # the server's clock (module docstring)
        floor = generation.training_started_at - job.policy.heartbeat_interval_s
        seconds = max(seconds, floor - generation.created_at)
    if seconds <= 0 or seconds > MAX_STARTUP_S:
        return None
    down = generation.inet_down_mbps or 0.0
    download_s = download_minutes(job.data.download_gb, down) * 60 if down > 0 else 0.0
    return StartupSample(
        sample_id=sample_id(generation),
        gpu_name=generation.gpu_name,
        machine_id=generation.machine_id,
        seconds=max(0.0, seconds - download_s),
    )


# --- what is stored, per job name -----------------------------------------------------------


class Pace(_Frozen):
    """Sums of a job name's pace samples on one GPU model and count."""

    gpu_name: str
    gpu_count: int = Field(ge=1)
    steps: float = Field(ge=0)
    seconds: float = Field(ge=0)
    runs: int = Field(ge=0)
    # Over the samples that knew the prior's pace: their measured steps, the prior's steps in
    # the same seconds, and how many runs they are. Over those that knew the host's dlperf: the
    # sums a fit of log pace on log dlperf needs (`FitSums`). 0 on items stored before
    # calibration: uncalibrated, priced as before.
    calibrated_steps: float = Field(default=0, ge=0)
    prior_steps: float = Field(default=0, ge=0)
    calibrated_runs: int = Field(default=0, ge=0)
    fit_runs: int = Field(default=0, ge=0)
    fit_x: float = 0.0
    fit_xx: float = 0.0
    fit_y: float = 0.0
    fit_xy: float = 0.0

    @property
    def steps_per_hour(self) -> float:
        return self.steps / self.seconds * 3600 if self.seconds > 0 else 0.0

    @property
    def fit_sums(self) -> FitSums:
        return FitSums(self.fit_runs, self.fit_x, self.fit_xx, self.fit_y, self.fit_xy)

    def factor(self, prior_runs: int = PRIOR_RUNS) -> float | None:
        """Measured hours ÷ the prior's on this model (`calibration_factor`)."""
        return calibration_factor(
            self.prior_steps, self.calibrated_steps, self.calibrated_runs, prior_runs
        )


def add_sample(pace: Pace | None, sample: PaceSample) -> Pace:
    """`pace` with `sample` added, as the store's atomic ADD does (`MeasureRecords.record_pace`)."""
    base = pace or Pace(gpu_name=sample.gpu_name, gpu_count=sample.gpu_count, steps=0, seconds=0,
                        runs=0)  # fmt: skip
    calibrated = sample.prior_steps is not None
    fit = sample.fit_sums()
    return base.model_copy(
        update={
            "steps": base.steps + sample.steps,
            "seconds": base.seconds + sample.seconds,
            "runs": base.runs + 1,
            "calibrated_steps": base.calibrated_steps + (sample.steps if calibrated else 0),
            "prior_steps": base.prior_steps + (sample.prior_steps or 0),
            "calibrated_runs": base.calibrated_runs + calibrated,
            "fit_runs": base.fit_runs + fit.runs,
            "fit_x": base.fit_x + fit.x,
            "fit_xx": base.fit_xx + fit.xx,
            "fit_y": base.fit_y + fit.y,
            "fit_xy": base.fit_xy + fit.xy,
        }
    )


StartupKind = Literal["machine", "gpu"]


class LearnedStartup(_Frozen):
    """Sums of a job name's start-up samples on one machine, or on one GPU model."""

    kind: StartupKind
    key: str  # the machine id, or the GPU model as Vast spells it
    seconds: float = Field(ge=0)
    runs: int = Field(ge=1)

    @property
    def minutes(self) -> float:
        return self.seconds / self.runs / 60


class JobMeasures(_Frozen):
    """Everything learned for one job name (`GET /measures?name=`, the lifecycle's planner)."""

    name: str
    paces: tuple[Pace, ...] = ()
    startups: tuple[LearnedStartup, ...] = ()

    def pace_for(self, gpu_name: str, gpu_count: int) -> Pace | None:
        key = gpu_key(gpu_name)
        for pace in self.paces:
            if gpu_key(pace.gpu_name) == key and pace.gpu_count == gpu_count and pace.runs > 0:
                return pace if pace.steps_per_hour > 0 else None
        return None

    def power_law(self) -> PowerLaw | None:
        """Steps per hour against dlperf through every measured run (`fit_power_law`)."""
        return fit_power_law(sum((p.fit_sums for p in self.paces), FitSums()))

    def pooled_factor(self, prior_runs: int = PRIOR_RUNS) -> tuple[float | None, int]:
        """How far the prior was off over every calibrated run, and their number."""
        runs = sum(p.calibrated_runs for p in self.paces)
        prior = sum(p.prior_steps for p in self.paces)
        measured = sum(p.calibrated_steps for p in self.paces)
        return calibration_factor(prior, measured, runs, prior_runs), runs

    def startup_for(self, kind: StartupKind, key: str) -> LearnedStartup | None:
        wanted = gpu_key(key) if kind == "gpu" else key
        for startup in self.startups:
            have = gpu_key(startup.key) if kind == "gpu" else startup.key
            if startup.kind == kind and have == wanted:
                return startup
        return None


# --- estimates ------------------------------------------------------------------------------


def done_step(job: Job, generation: int) -> int:
    """The step generation `generation` resumes from: the newest checkpoint recorded before it."""
    steps = [r.step for r in job.recorded_checkpoints if r.generation < generation]
    return max(steps, default=0)


def _measured(hours: float, pace: Pace, detail: str) -> SpeedEstimate:
    return SpeedEstimate(
        hours=hours,
        source="measured",
        runs=pace.runs,
        basis=f"measured, {pace.runs} run{'s' if pace.runs != 1 else ''}",
        detail=f"measured: {pace.steps_per_hour:.0f} steps/h on {pace.gpu_count}x "
        f"{pace.gpu_name} over {pace.runs} run(s) ({pace.seconds / 3600:.1f} h); {detail}",
    )


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def _carried(
    measures: JobMeasures, job: JobSpec, offer: Offer, base: SpeedEstimate, left: int, pool: bool,
    prior_runs: int,
) -> SpeedEstimate | None:  # fmt: skip
    """An unmeasured model's hours from what the job measured on others (module docstring);
    None when nothing carries over. The refit only for a job that scales by dlperf
    (`reference_gpu`): a job without one says its hours do not follow the GPU."""
    if job.total_steps is None:
        return None
    law = None if job.reference_gpu is None else measures.power_law()
    if law is not None and offer.dlperf is not None and offer.dlperf > 0:
        return SpeedEstimate(
            hours=left / law.steps_per_hour(offer.dlperf),
            source="prior",
            basis=f"prior, calibrated by {_runs(law.runs)}",
            detail=f"prior refitted to {_runs(law.runs)}: steps/h "
            f"∝ dlperf^{law.exponent:.2f}, dlperf {offer.dlperf:.1f}; {left} of "
            f"{job.total_steps} steps left",
        )
    factor, runs = measures.pooled_factor(prior_runs) if pool else (None, 0)
    if factor is None:
        return None
    return base.model_copy(
        update={
            "hours": base.hours * left / job.total_steps * factor,
            "basis": f"{'prior' if base.source == 'prior' else 'as given'}, calibrated by "
            f"{_runs(runs)}",
            "detail": f"{base.detail}; × {factor:.2f}, how far the prior was off on the "
            f"{_runs(runs)} measured; {left} of {job.total_steps} steps left",
        }
    )


def _off_law(job: JobSpec, pace: Pace, law: SpeedLaw) -> float:
    """How far a measured GPU model's other hosts are expected off what `law` says: its runs'
    measured hours ÷ the law's at their mean speed figure (geometric means), to the model's
    share (`speed_law.model_share`: most of one run's deviation is its own host's)."""
    sums = law_sums(job, pace.fit_sums)
    if sums.runs <= 0:
        return 1.0
    measured = math.exp(-sums.y / sums.runs)  # hours ÷ expected_hours
    off = measured / law.hours_factor(math.exp(sums.x / sums.runs))
    return float(off ** model_share(sums.runs))


def host_paces(generations: Iterable[Generation]) -> dict[int, float]:
    """Steps per hour the job's own generations trained at, per machine (`pace_sample`, so
    bounded as the store's samples are): what a replacement on a host the job ran on will do."""
    steps: dict[int, float] = {}
    seconds: dict[int, float] = {}
    for generation in generations:
        sample = pace_sample(generation)
        if sample is None or generation.machine_id is None:
            continue
        machine = generation.machine_id
        steps[machine] = steps.get(machine, 0.0) + sample.steps
        seconds[machine] = seconds.get(machine, 0.0) + sample.seconds
    return {m: steps[m] / seconds[m] * 3600 for m in steps if seconds[m] > 0 and steps[m] > 0}


def job_speed_law(job: JobSpec, measures: JobMeasures, law: SpeedLaw | None = None) -> SpeedLaw:
    """The speed law's posterior (`functions/domain/speed_law.py`) after every run in
    `measures` that knew its host's dlperf: the job's own generations (filed as each ends,
    before a replacement is planned) and earlier runs of its name. Needs `reference_gpu` and
    `total_steps` to place a run against the spec's anchor; otherwise the prior."""
    law = SpeedLaw() if law is None else law
    return law.observed(law_sums(job, sum((p.fit_sums for p in measures.paces), FitSums())))


def pace_estimator(
    measures: JobMeasures,
    *,
    resume_step: int = 0,
    prior: Estimator = prior_estimate,
    prior_runs: int = PRIOR_RUNS,
    pool: bool = POOL,
    law: SpeedLaw | None = None,
    hosts: Mapping[int, float] | None = None,
) -> Estimator:
    """The job's hours on an offer from its measured paces (module docstring), for the work
    left after `resume_step`; the prior where nothing applies. With `law` (the planner's, since
    the speed law is unknown), a job with `reference_gpu` prices every offer whose GPU model
    was not measured by that law's posterior after the measured runs (`job_speed_law`), in
    place of the dlperf-ratio prior, the refit and the pooled factor. `hosts`: steps per hour
    the job itself trained at on a machine (`host_paces`): that machine at its own pace."""
    own = hosts or {}

    posteriors: list[tuple[JobSpec, SpeedLaw]] = []  # the last job's: one per plan, not offer

    def posterior(job: JobSpec, law: SpeedLaw) -> SpeedLaw:
        if not posteriors or posteriors[-1][0] is not job:
            posteriors[:] = [(job, job_speed_law(job, measures, law))]
        return posteriors[-1][1]

    def estimate(job: JobSpec, offer: Offer) -> SpeedEstimate:
        base = prior(job, offer)
        pace = measures.pace_for(offer.gpu_name, offer.num_gpus)
        post = None if law is None or job.reference_gpu is None else posterior(job, law)
        by_law = None if post is None else post.estimate(job, offer)
        if job.total_steps is not None:
            left = max(0, job.total_steps - resume_step)
            steps_left = f"{left} of {job.total_steps} steps left"
            factor = None if pace is None else pace.factor(prior_runs)
            seen = own.get(offer.machine_id) if offer.machine_id is not None else None
            if seen is not None and seen > 0:
                return SpeedEstimate(
                    hours=left / seen,
                    source="measured",
                    runs=1,
                    basis="measured on this host",
                    detail=f"measured: {seen:.0f} steps/h on this machine (the job ran here); "
                    f"{steps_left}",
                )
            if post is not None and by_law is not None and pace is not None and pace.fit_runs:
                off = _off_law(job, pace, post)
                hours = by_law.hours * left / job.total_steps * off
                return _measured(hours, pace, f"the law's hours × {off:.2f}; {steps_left}")
            if pace is not None and factor is not None:
                hours = base.hours * left / job.total_steps * factor
                return _measured(hours, pace, f"this host's prior × {factor:.2f}; {steps_left}")
            if pace is not None:  # stored before calibration: the model's pace as it is
                return _measured(left / pace.steps_per_hour, pace, steps_left)
            if by_law is not None:
                base = by_law
            else:
                carried = _carried(measures, job, offer, base, left, pool, prior_runs)
                if carried is not None:
                    return carried
            if resume_step <= 0:
                return base
            share = left / job.total_steps
            return base.model_copy(
                update={"hours": base.hours * share, "detail": f"{base.detail}; {steps_left}"}
            )
        ref = job.reference_gpu
        ref_pace = None if ref is None else measures.pace_for(ref, job.resources.gpu_count)
        if pace is None or ref_pace is None:
            return base if by_law is None else by_law
        hours = job.expected_hours * ref_pace.steps_per_hour / pace.steps_per_hour
        return _measured(
            hours,
            pace,
            f"vs {ref_pace.steps_per_hour:.0f} steps/h on the reference "
            f"{ref_pace.gpu_count}x {ref_pace.gpu_name}",
        )

    return estimate


def startup_estimator(measures: JobMeasures) -> StartupEstimator:
    """Per machine where seen, else per GPU model, else the spec's `expected_startup_min`."""

    def estimate(job: JobSpec, offer: Offer) -> StartupEstimate:
        if offer.machine_id is not None:
            seen = measures.startup_for("machine", str(offer.machine_id))
            if seen is not None:
                return StartupEstimate(minutes=seen.minutes, source="machine", runs=seen.runs)
        model = measures.startup_for("gpu", offer.gpu_name)
        if model is not None:
            return StartupEstimate(minutes=model.minutes, source="gpu", runs=model.runs)
        return spec_startup(job)

    return estimate


def prior_steps_per_hour(job: JobSpec, offer: Offer) -> float | None:
    """The prior's pace in steps on `offer` (recorded with a rent: a sample's bound)."""
    if job.total_steps is None:
        return None
    hours = prior_estimate(job, offer).hours
    return job.total_steps / hours if hours > 0 else None


def measures_of(
    name: str, paces: Iterable[Pace], startups: Iterable[LearnedStartup]
) -> JobMeasures:
    order = sorted(paces, key=lambda p: (gpu_key(p.gpu_name), p.gpu_count))
    return JobMeasures(
        name=name,
        paces=tuple(order),
        startups=tuple(sorted(startups, key=lambda s: (s.kind, s.key))),
    )


def measures_json(measures: JobMeasures) -> dict[str, Any]:
    """`GET /measures` (its shape is a contract: `tether plan` reads it)."""
    return {
        "name": measures.name,
        "paces": [
            p.model_dump(mode="json") | {"steps_per_hour": p.steps_per_hour} for p in measures.paces
        ],
        "startups": [s.model_dump(mode="json") | {"minutes": s.minutes} for s in measures.startups],
    }
