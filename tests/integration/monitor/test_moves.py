"""Moving a running job to a cheaper host once its own pace is known, through the real monitor
and the synthesized lifecycle under moto (Vast simulated): a first host that trains far slower
than planned is replaced as `overpriced` after its first checkpoint, blaming nobody, and the
replacement is the host the monitor judged cheaper; a host that trains as planned is judged once
and kept (functions/domain/move.py)."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.heartbeat_contract import CheckpointRef
from functions.domain.job import Generation, Job, JobState
from tests.integration.supervision_harness import Supervised

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")

SLOW_MACHINE, FAST_MACHINE = 7001, 7002


def market(sup: Supervised) -> None:
    """Two hosts only: a slow card cheap by the hour (what the prior rents first) and an RTX
    4090, four times the price."""
    template = sup.vast.offers()[0]
    for listed in sup.vast.offers():
        sup.vast.remove_offer(int(listed["id"]))

    def offer(offer_id: int, machine: int, gpu: str, dlperf: float, usd: float) -> dict[str, Any]:
        return {
            **template, "id": offer_id, "ask_contract_id": offer_id, "machine_id": machine,
            "gpu_name": gpu, "dlperf": dlperf, "dph_base": usd, "dph_total": usd,
            "storage_cost": 0.0, "inet_down_cost": 0.0, "inet_up_cost": 0.0, "num_gpus": 1,
            "gpu_ram": 24564, "reliability": 0.99, "reliability2": 0.99,
            "verification": "verified", "disk_space": 500.0, "inet_down": 1000.0,
            "inet_up": 1000.0, "cuda_max_good": 12.4, "rentable": True, "rented": False,
        }  # fmt: skip

    sup.vast.add_offers(
        [
            offer(901, SLOW_MACHINE, "RTX 3060", 20.0, 0.10),
            offer(902, FAST_MACHINE, "RTX 4090", 90.0, 0.40),
        ]
    )


def started(sup: Supervised) -> tuple[Job, Generation]:
    """A job of 3,000 steps, 3 h on an RTX 4090, on its first host (the slow one)."""
    market(sup)
    job, first = sup.provisioned(
        expected_hours=3, reference_gpu="RTX 4090", total_steps=3000, budget_usd=20,
        resources={"gpu_names": ["RTX 3060", "RTX 4090"], "max_usd_per_hour": 1.0},
    )  # fmt: skip
    assert first.machine_id == SLOW_MACHINE
    assert first.reliability == 0.99  # what staying's interruptions are priced by
    return job, first


def trained(sup: Supervised, job: Job, generation: Generation, steps: int) -> None:
    """The host trains `steps` in half an hour and saves a checkpoint at the end."""
    sup.clock.advance(120)
    sup.first_step(job.job_id, generation)
    n = generation.generation
    sup.clock.advance(1800)
    sup.heartbeat(job.job_id, n, step=steps)
    found = sup.store.get_job(job.job_id)
    assert found is not None
    ref = CheckpointRef(
        step=steps, generation=n, manifest_key=f"jobs/{job.job_id}/g{n}/ckpt-{steps}/manifest.json",
        manifest_sha256="0" * 64,
    )  # fmt: skip
    assert sup.store.record_checkpoints(
        job.job_id, n, token_hash=generation.token_hash,
        checkpoints=[*found.recorded_checkpoints, ref],
        previous_version=found.recorded_checkpoints_version,
    )  # fmt: skip


def test_a_host_far_slower_than_planned_is_left_for_a_cheaper_one(sup: Supervised) -> None:
    job, first = started(sup)
    # 50 steps in 30 min: 100 steps/h, 29 h for the rest at $0.10/h; the 4090 is expected to
    # finish in a few hours at $0.40/h.
    trained(sup, job, first, 50)

    report = sup.monitor()

    assert report["moves_judged"] == 1 and report["verdicts"] == {"overpriced": 1}
    assert report["hosts_blamed"] == 0
    assert sup.wait_for(f"{job.job_id}-replace-g2-a1")["status"] == "SUCCEEDED"
    left = sup.store.get_generation(job.job_id, 1)
    second = sup.store.get_generation(job.job_id, 2)
    assert left is not None and second is not None
    assert left.replaced_for == "overpriced" and not left.host_blamed
    assert second.machine_id == FAST_MACHINE
    assert sup.store.host_reputations([SLOW_MACHINE]) == {}  # nobody is blamed for a price
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.RUNNING and found.restarts == 0
    view = sup.store.get_job_view(job.job_id)
    assert view is not None
    (moved,) = [e for e in view.events if e.kind == "overpriced"]
    assert "moving saves" in moved.message and "offer 902 (1x RTX 4090" in moved.message
    # The replacement was priced with the pace the first host showed.
    assert sup.store.job_measures(job.name).pace_for("RTX 3060", 1) is not None

    # A job moves once (policy.max_moves 1): the second host is not judged, however it trains.
    trained(sup, job, second, 100)
    again = sup.monitor()
    assert again["moves_judged"] == 0 and again["verdicts"] == {"healthy": 1}


def test_a_host_that_trains_as_planned_is_judged_once_and_kept(sup: Supervised) -> None:
    job, first = started(sup)
    trained(sup, job, first, 500)  # 1,000 steps/h: as fast as the 4090, a quarter of its price

    report = sup.monitor()
    assert report["moves_judged"] == 1 and report["verdicts"] == {"healthy": 1}
    kept = sup.store.get_generation(job.job_id, 1)
    assert kept is not None and kept.move_checked_at == sup.clock() and kept.is_current

    sup.clock.advance(60)
    sup.heartbeat(job.job_id, 1, step=520)
    assert sup.monitor()["moves_judged"] == 0  # judged once
    assert sup.executions(job.job_id) == {f"{job.job_id}-provision-g1-a1": "SUCCEEDED"}


def test_moves_turned_off_are_never_judged(sup: Supervised) -> None:
    market(sup)
    job, first = sup.provisioned(
        expected_hours=3, reference_gpu="RTX 4090", total_steps=3000, budget_usd=20,
        resources={"gpu_names": ["RTX 3060", "RTX 4090"], "max_usd_per_hour": 1.0},
        policy={"max_moves": 0},
    )  # fmt: skip
    trained(sup, job, first, 50)
    report = sup.monitor()
    assert report["moves_judged"] == 0 and report["verdicts"] == {"healthy": 1}


def test_a_move_that_cannot_be_judged_waits_and_the_job_stays_supervised(sup: Supervised) -> None:
    job, first = started(sup)
    trained(sup, job, first, 50)
    sup.vast.outage()

    report = sup.monitor()
    assert report["moves_judged"] == 0 and report["supervised"] == 1
    waiting = sup.store.get_generation(job.job_id, 1)
    assert waiting is not None and waiting.move_checked_at is None and waiting.is_current

    sup.vast.outage(False)
    sup.clock.advance(60)
    sup.heartbeat(job.job_id, 1, step=52)
    assert sup.monitor()["moves_judged"] == 1
