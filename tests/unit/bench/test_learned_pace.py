"""The regret bench's simulated measured-pace estimator (bench/lib/learned.py): what it learns
from runs, and how it estimates hours from them. Pure, hand-made offers."""

from __future__ import annotations

import math
import random

import pytest

from bench.lib.learned import PaceMemory, learn_snapshots
from bench.lib.regret import HostTruth
from functions.domain.jobspec import parse_job
from functions.domain.offer import Offer
from functions.domain.speed import prior_estimate

JOB = parse_job({
    "name": "hand", "image": "i", "run": "r", "budget_usd": 50, "expected_hours": 2,
    "reference_gpu": "RTX 4090", "expected_startup_min": 5,
    "resources": {"min_disk_gb": 100, "min_reliability": 0, "min_download_mbps": 0},
    "data": {"download_gb": 0, "upload_gb_per_checkpoint": 0},
    "checkpoint": {"interval_min": 30},
})  # fmt: skip


def _offer(offer_id: int, gpu: str, dlperf: float, usd_per_hour: float) -> Offer:
    return Offer.model_validate(
        {"id": offer_id, "machine_id": offer_id, "gpu_name": gpu, "num_gpus": 1,
         "gpu_ram": 24564, "disk_space": 200, "dph_base": usd_per_hour, "storage_cost": 0,
         "inet_down": 800, "inet_up": 800, "inet_down_cost": 0, "inet_up_cost": 0,
         "reliability2": 0.9999, "rentable": True, "rented": False, "dlperf": dlperf}
    )  # fmt: skip


FAST = _offer(1, "RTX 4090", 97.6, 0.40)  # the reference: the prior says 2 h
SLOW = _offer(2, "RTX 3090", 24.4, 0.20)  # a quarter of the dlperf: the prior says 8 h


def test_without_runs_it_is_the_prior() -> None:
    memory = PaceMemory()
    for offer in (FAST, SLOW):
        assert memory.estimate(JOB, offer) == prior_estimate(JOB, offer)


def test_a_measured_model_gets_the_geometric_mean_of_its_runs() -> None:
    memory = PaceMemory()
    memory.observe(SLOW, 3.0)
    memory.observe(_offer(3, "RTX 3090", 30.0, 0.2), 12.0)
    got = memory.estimate(JOB, SLOW)
    assert got.hours == pytest.approx(6.0)
    assert (got.source, got.runs) == ("measured", 2)
    assert memory.estimate(JOB, FAST) == prior_estimate(JOB, FAST)  # not measured: the prior


def test_refit_calibrates_the_prior_and_refits_its_exponent() -> None:
    # Measured: the 4090 as the prior says (2 h), the 3090 in 4 h, not 8: hours ∝ dlperf^-0.5.
    memory = PaceMemory(fit=True)
    memory.observe(FAST, 2.0, prior_hours=2.0)
    memory.observe(SLOW, 4.0, prior_hours=8.0)
    _, e = memory.exponent_fit() or (0.0, 0.0)
    assert e == pytest.approx(0.5)
    # An unseen model at a 16th of the 4090's dlperf, by the refitted law: 2 × (97.6 / 6.1)^0.5.
    unseen = _offer(4, "RTX 3060", 6.1, 0.05)
    assert memory.estimate(JOB, unseen).hours == pytest.approx(2.0 * 4.0)
    # A seen model: its host's prior (now the refitted law) × the model's ratio shrunk by one
    # prior run: 3090 ratio 0.5 → exp(log 0.5 / 2) = 0.7071; refitted law at SLOW = 4 h.
    assert memory.estimate(JOB, SLOW).hours == pytest.approx(4.0 * math.sqrt(0.5))


def test_one_dlperf_level_is_not_enough_to_refit() -> None:
    memory = PaceMemory(fit=True)
    memory.observe(FAST, 3.0, prior_hours=2.0)
    assert memory.exponent_fit() is None


def test_learning_rents_what_tether_would_and_measures_its_true_hours() -> None:
    # Truth: the 3090 runs at 0.5 of the reference (4 h), the 4090 at 1.0 (2 h). The prior
    # rents the 4090 ($0.80 vs $1.60 at 8 h), measures ~2 h, and stays there.
    truth = {1: HostTruth(speed=1.0, startup_min=5), 2: HostTruth(speed=0.5, startup_min=5)}
    history = [([FAST, SLOW], truth)] * 3
    snapshots = learn_snapshots(JOB, history, fit=False, runs={1, 3}, rng=random.Random(0))
    assert set(snapshots) == {1, 3}
    assert list(snapshots[1].runs) == [("RTX 4090", 1)]
    assert len(snapshots[3].runs[("RTX 4090", 1)]) == 3
    hours = snapshots[3].estimate(JOB, FAST).hours
    assert hours == pytest.approx(2.0, rel=0.2)  # measured with a 5 % noise
    assert snapshots[3].estimate(JOB, SLOW) == prior_estimate(JOB, SLOW)
