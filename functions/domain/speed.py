"""How long a job takes on an offer (docs/architecture.md#cost-model): work ÷ the host's speed.

A job states its work as `expected_hours` on `gpu_count` GPUs of its `reference_gpu`. On an offer
those hours become

    hours = reference hours × reference speed / offer speed

with both speeds in the same figure, the one the offer publishes:

- `dlperf` (preferred): Vast's benchmark of the whole machine, used as the offer reports it. The
  reference for N GPUs is one reference GPU's dlperf × `effective_gpus(N)`.
- else `total_flops`: peak TFLOPS summed over the GPUs, which grows exactly with the count while
  training does not, so the offer's speed is total_flops ÷ num_gpus × `effective_gpus(num_gpus)`,
  against one reference GPU's TFLOPS × `effective_gpus(N)`.

`effective_gpus(n) = 1 + (n − 1) × MULTI_GPU_EFFICIENCY`: each GPU past the first adds half a GPU.
That is how Vast's own dlperf grows across the real records (4 and 8 RTX 4090s score 2.3 and
4.6 times one), and data-parallel training loses a comparable share to communication on hosts
without NVLink. The planner rents exactly `gpu_count` GPUs, so the constant moves every offer's
hours alike and does not change the ranking among them.

Without `reference_gpu` the hours are as the spec gives them, on any host (the meaning
`expected_hours` always had); an offer with neither figure also gets them as given.

The result is a `SpeedEstimate`: the hours, where they came from and from how many runs. Today
the source is the spec or the prior (`runs` 0); pace measured from heartbeats (per job name,
GPU model and count) is meant to replace the prior through the same shape, `source="measured"`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from functions.domain.gpu_reference import REFERENCE_SPEEDS
from functions.domain.jobspec import JobSpec
from functions.domain.offer import Offer

MULTI_GPU_EFFICIENCY = 0.5  # the share of a GPU each GPU past the first adds

SpeedSource = Literal["spec", "prior", "measured"]
StartupSource = Literal["spec", "machine", "gpu"]


class SpeedEstimate(BaseModel):
    model_config = ConfigDict(frozen=True)

    hours: float  # expected training hours on the offer
    source: SpeedSource  # spec: as written; prior: from the offer's figures; measured: pace seen
    runs: int = 0  # how many runs a measured pace comes from (0 for spec and prior)
    basis: str  # a few words for a table column: "dlperf 85.2", "as given"
    detail: str  # one line for people: the figures the hours come from


class StartupEstimate(BaseModel):
    """The fixed start-up minutes a rent of an offer is billed before training (the download
    at the host's speed comes on top: `functions.domain.cost.startup_minutes`)."""

    model_config = ConfigDict(frozen=True)

    minutes: float
    source: StartupSource  # spec: expected_startup_min; machine / gpu: learned (pace.py)
    runs: int = 0  # how many generations a learned figure comes from (0 for spec)


def spec_startup(job: JobSpec, startup_min: float | None = None) -> StartupEstimate:
    """The spec's `expected_startup_min`, or an override (`tether plan --startup-min`)."""
    minutes = job.expected_startup_min if startup_min is None else startup_min
    return StartupEstimate(minutes=minutes, source="spec")


def effective_gpus(count: int) -> float:
    """How many GPUs' worth of speed `count` GPUs give to one training run."""
    return 1 + (max(count, 1) - 1) * MULTI_GPU_EFFICIENCY


def _speed_figures(job: JobSpec, offer: Offer) -> tuple[str, float, float] | None:
    """(which figure, the offer's speed, the reference's for the job's GPU count): dlperf, else
    effective TFLOPS; None without `reference_gpu` or a figure."""
    if job.reference_gpu is None:
        return None
    ref = REFERENCE_SPEEDS[job.reference_gpu]
    ref_gpus = effective_gpus(job.resources.gpu_count)
    if offer.dlperf is not None and offer.dlperf > 0:
        return "dlperf", offer.dlperf, ref.dlperf * ref_gpus
    if offer.total_flops is not None and offer.total_flops > 0 and offer.num_gpus > 0:
        speed = offer.total_flops / offer.num_gpus * effective_gpus(offer.num_gpus)
        return "tflops", speed, ref.tflops * ref_gpus
    return None


def relative_speed(job: JobSpec, offer: Offer) -> float | None:
    """The offer's published speed ÷ the reference's for the job's GPU count, in the same figure
    `prior_estimate` uses (dlperf, else effective TFLOPS); None without `reference_gpu` or a
    figure. `functions/domain/speed_law.py` raises it to an uncertain exponent."""
    figures = _speed_figures(job, offer)
    return None if figures is None else figures[1] / figures[2]


def prior_estimate(job: JobSpec, offer: Offer) -> SpeedEstimate:
    """The job's hours on `offer` from the offer's published speed (see the module docstring)."""
    if job.reference_gpu is None:
        return SpeedEstimate(
            hours=job.expected_hours,
            source="spec",
            basis="as given",
            detail="as given: expected_hours on any host (no reference_gpu)",
        )
    ref_label = f"{job.resources.gpu_count}x {job.reference_gpu}"
    figures = _speed_figures(job, offer)
    if figures is not None and figures[0] == "dlperf":
        _, speed, ref_speed = figures
        return SpeedEstimate(
            hours=job.expected_hours * ref_speed / speed,
            source="prior",
            basis=f"dlperf {speed:.0f}",
            detail=f"prior: dlperf {speed:.1f} vs {ref_label} ref {ref_speed:.1f}",
        )
    if figures is not None:
        _, speed, ref_speed = figures
        return SpeedEstimate(
            hours=job.expected_hours * ref_speed / speed,
            source="prior",
            basis=f"{speed:.0f} TFLOPS",
            detail=f"prior: {speed:.1f} effective TFLOPS vs {ref_label} ref {ref_speed:.1f}",
        )
    return SpeedEstimate(
        hours=job.expected_hours,
        source="spec",
        basis="as given (no figure)",
        detail=f"as given: the offer has no dlperf or total_flops; hours on {ref_label}",
    )
