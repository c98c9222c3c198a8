"""The regret bench's measured-pace rule (bench/lib/learned.py): simulated runs filed as tether
files a sample, priced by tether's real `pace_estimator`. Pure, hand-made offers."""

from __future__ import annotations

import math
import random

import pytest

from bench.lib.learned import BENCH_TOTAL_STEPS, PaceMemory, learn_snapshots, with_steps
from bench.lib.regret import HostTruth
from functions.domain.jobspec import parse_job
from functions.domain.offer import Offer
from functions.domain.speed import prior_estimate

JOB = with_steps(parse_job({
    "name": "hand", "image": "i", "run": "r", "budget_usd": 50, "expected_hours": 2,
    "reference_gpu": "RTX 4090", "expected_startup_min": 5,
    "resources": {"min_disk_gb": 100, "min_reliability": 0, "min_download_mbps": 0},
    "data": {"download_gb": 0, "upload_gb_per_checkpoint": 0},
    "checkpoint": {"interval_min": 30},
}))  # fmt: skip


def _offer(offer_id: int, gpu: str, dlperf: float, usd_per_hour: float) -> Offer:
    return Offer.model_validate(
        {"id": offer_id, "machine_id": offer_id, "gpu_name": gpu, "num_gpus": 1,
         "gpu_ram": 24564, "disk_space": 200, "dph_base": usd_per_hour, "storage_cost": 0,
         "inet_down": 800, "inet_up": 800, "inet_down_cost": 0, "inet_up_cost": 0,
         "reliability2": 0.9999, "rentable": True, "rented": False, "dlperf": dlperf}
    )  # fmt: skip


FAST = _offer(1, "RTX 4090", 97.6, 0.40)  # the reference: the prior says 2 h
SLOW = _offer(2, "RTX 3090", 24.4, 0.20)  # a quarter of the dlperf: the prior says 8 h


def test_the_bench_job_is_in_steps() -> None:
    assert JOB.total_steps == BENCH_TOTAL_STEPS


def test_without_runs_it_is_the_prior() -> None:
    memory = PaceMemory()
    for offer in (FAST, SLOW):
        assert memory.estimator()(JOB, offer) == prior_estimate(JOB, offer)


def test_a_run_is_filed_as_tether_files_a_sample() -> None:
    memory = PaceMemory()
    memory.observe(JOB, SLOW, 4.0)  # the prior said 8 h: 10 000 steps, prior 5000 in 4 h
    pace = memory.measures().pace_for("RTX 3090", 1)
    assert pace is not None
    assert (pace.steps, pace.seconds, pace.runs) == (10_000, 4 * 3600, 1)
    assert pace.prior_steps == pytest.approx(5000)
    assert pace.fit_x == pytest.approx(math.log(24.4))
    # tether's estimator: the 3090's prior 8 h × 5000 / 10 000; the 4090 by the pooled factor,
    # the same.
    estimate = memory.estimator()
    assert estimate(JOB, SLOW).hours == pytest.approx(4.0)
    assert estimate(JOB, FAST).hours == pytest.approx(1.0)
    assert estimate(JOB, FAST).basis == "prior, calibrated by 1 run"


def test_two_dlperf_levels_refit_the_law() -> None:
    memory = PaceMemory()
    memory.observe(JOB, FAST, 2.0)  # as the prior said
    memory.observe(JOB, SLOW, 4.0)  # not 8 h: hours ∝ dlperf^-0.5
    law = memory.measures().power_law()
    assert law is not None and law.exponent == pytest.approx(0.5)
    unseen = _offer(4, "RTX 3060", 6.1, 0.05)  # a 16th of the 4090's dlperf: 2 × 4 h
    assert memory.estimator()(JOB, unseen).hours == pytest.approx(8.0)


def test_learning_rents_what_tether_would_and_measures_its_true_hours() -> None:
    # Truth: the 3090 runs at 0.5 of the reference (4 h), the 4090 at 1.0 (2 h). The prior
    # rents the 4090 ($0.80 vs $1.60 at 8 h), measures ~2 h, and stays there.
    truth = {1: HostTruth(speed=1.0, startup_min=5), 2: HostTruth(speed=0.5, startup_min=5)}
    history = [([FAST, SLOW], truth)] * 3
    snapshots = learn_snapshots(JOB, history, pool=True, runs={1, 3}, rng=random.Random(0))
    assert set(snapshots) == {1, 3}
    assert list(snapshots[1].paces) == [("rtx 4090", 1)]
    assert snapshots[3].paces[("rtx 4090", 1)].runs == 3
    hours = snapshots[3].estimator()(JOB, FAST).hours
    assert hours == pytest.approx(2.0, rel=0.2)  # measured with a 5 % noise
