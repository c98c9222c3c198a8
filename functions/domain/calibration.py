"""How far the speed prior was off, from a job's measured runs (pure arithmetic for
`functions/domain/pace.py`'s estimator; the rules and why are in its docstring).

- `calibration_factor`: measured hours ÷ the prior's hours on the hosts that ran, from the
  stored sums (the prior's steps and the measured steps over the same seconds), optionally
  shrunk toward 1 in logs with the prior worth `prior_runs` runs: (prior ÷ measured)^(n/(n+p));
  `PRIOR_RUNS` is 0: unshrunk.
- `fit_power_law`: steps per hour = a × dlperf^e through every measured run (its host's dlperf,
  its pace), least squares in logs from sums the store adds atomically (`FitSums`), e clamped
  to `EXPONENT_RANGE`; None until two runs differ in dlperf (one level says nothing of e). Hosts
  of one GPU model differ in dlperf too (0.7–1.2 × the model's median on the real records), so
  a job that stays on one model still learns the exponent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EXPONENT_RANGE = (0.0, 1.5)  # speed ∝ dlperf^e: from "the GPU does not matter" to superlinear
# What the prior weighs against a model's measured runs: none. A run's pace is exact for its
# host, and the regret bench did better under every truth unshrunk (BENCHMARKS.md).
PRIOR_RUNS = 0


def calibration_factor(
    prior_steps: float, measured_steps: float, runs: int, prior_runs: int = PRIOR_RUNS
) -> float | None:
    """The multiplier on the prior's hours (< 1: faster than the prior said); None without
    calibrated runs."""
    if prior_steps <= 0 or measured_steps <= 0 or runs <= 0:
        return None
    weight = runs / (runs + max(prior_runs, 0))
    return math.exp(math.log(prior_steps / measured_steps) * weight)


@dataclass(frozen=True)
class PowerLaw:
    """Steps per hour = exp(log_a) × dlperf^exponent."""

    log_a: float
    exponent: float
    runs: int  # the measured runs it was fitted to

    def steps_per_hour(self, dlperf: float) -> float:
        return math.exp(self.log_a + self.exponent * math.log(dlperf))


@dataclass(frozen=True)
class FitSums:
    """What a least-squares fit of log pace on log dlperf needs, as sums over runs (x = log
    dlperf, y = log steps per hour): stored per GPU model and added across models."""

    runs: int = 0
    x: float = 0.0
    xx: float = 0.0
    y: float = 0.0
    xy: float = 0.0

    @staticmethod
    def of(dlperf: float, steps_per_hour: float) -> FitSums:
        x, y = math.log(dlperf), math.log(steps_per_hour)
        return FitSums(runs=1, x=x, xx=x * x, y=y, xy=x * y)

    def __add__(self, other: FitSums) -> FitSums:
        return FitSums(self.runs + other.runs, self.x + other.x, self.xx + other.xx,
                       self.y + other.y, self.xy + other.xy)  # fmt: skip


def fit_power_law(sums: FitSums) -> PowerLaw | None:
    """The law through the runs in `sums`; None until two runs differ in dlperf."""
    n = sums.runs
    if n < 2:
        return None
    mx, my = sums.x / n, sums.y / n
    sxx = sums.xx - n * mx * mx
    if sxx <= 1e-9 * n:  # one dlperf level (to rounding): it says nothing of the exponent
        return None
    low, high = EXPONENT_RANGE
    exponent = min(max((sums.xy - n * mx * my) / sxx, low), high)
    return PowerLaw(log_a=my - exponent * mx, exponent=exponent, runs=n)
