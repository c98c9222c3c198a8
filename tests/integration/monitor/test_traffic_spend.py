"""Traffic spend on Vast's word, not the host's (docs/architecture.md#spend), through the real
monitor: the agent's byte counts never lower what the monitor believes was spent, and while
Vast's charges cannot be read the job's traffic is bounded from above by its host's link.
Expected figures come from the Vast simulator's ledger, never from tether's own cost model."""

from __future__ import annotations

import pytest

from functions.api.job_service import job_detail
from functions.domain.job import Job, JobState
from tests.integration.supervision_harness import Supervised

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")

LINK_MBPS = 100.0  # the offer's inet_down and inet_up
TRAFFIC_USD_PER_GB = 0.052  # the highest traffic price in the real offer records
GPU_USD_PER_HOUR = 0.10
# What the host really moves: its whole link, both ways (0 bytes in its heartbeats).
HOST_BYTES_PER_S = LINK_MBPS * 1_000_000 / 8
INTERVAL_S = 60.0


def traffic_priced_offers(sup: Supervised, traffic_usd_per_gb: float) -> None:
    """Every offer alike: $0.10/h GPU, $0.01/h for 10 GB of disk, a 100 Mbit/s link both
    ways at `traffic_usd_per_gb`."""
    sup.vast.add_offers(
        [
            {**o, "dph_base": GPU_USD_PER_HOUR, "storage_cost": 0.72,
             "dph_total": GPU_USD_PER_HOUR + 0.01, "inet_down": LINK_MBPS, "inet_up": LINK_MBPS,
             "inet_down_cost": traffic_usd_per_gb, "inet_up_cost": traffic_usd_per_gb}
            for o in sup.vast.offers()
        ]
    )  # fmt: skip


def busy_host(sup: Supervised, budget_usd: float, traffic_usd_per_gb: float) -> tuple[Job, int]:
    """A provisioned job whose host moves `HOST_BYTES_PER_S` each way, billed by Vast."""
    traffic_priced_offers(sup, traffic_usd_per_gb)
    job, generation = sup.provisioned(budget_usd=budget_usd)
    instance_id = generation.instance_id or 0
    sup.vast.set_traffic_rate(
        instance_id, down_bytes_per_s=HOST_BYTES_PER_S, up_bytes_per_s=HOST_BYTES_PER_S
    )
    return job, instance_id


def supervise_until_stopped(sup: Supervised, job: Job, runs: int) -> tuple[int | None, float]:
    """A monitor run a minute, the host heartbeating 0 bytes, until the job is stopped (or
    `runs` have passed). Returns the run that stopped it and what Vast had billed by then."""
    instance_id = sup.store.get_generation(job.job_id, 1).instance_id  # type: ignore[union-attr]
    for run in range(1, runs + 1):
        sup.clock.advance(INTERVAL_S)
        sup.heartbeat(job.job_id, 1)  # bytes_downloaded = bytes_uploaded = 0
        billed = sup.vast.ledger(instance_id or 0).total_usd
        sup.monitor()
        sup.settle(job.job_id)
        found = sup.store.get_job(job.job_id)
        assert found is not None
        if found.state != JobState.RUNNING:
            return run, billed
    return None, sup.vast.ledger(instance_id or 0).total_usd


def test_traffic_the_host_hides_is_bounded_while_vast_charges_are_unread(
    sup: Supervised,
) -> None:
    """Reproduction: a $1 job whose host reports 0 bytes while Vast bills its traffic, the
    charges call failing: after 30 minutes Vast had billed $2.83, the monitor had seen $0.03,
    the job was RUNNING and its lease renewed on every run.

    The host's 100 Mbit/s both ways at $0.052/GB bills ~$4.36/h (+ $0.11/h GPU and disk). While
    the charges are unread the monitor bounds traffic by the link: 2 × 100 Mbit/s × 2
    directions × $0.052/GB = $9.36/h; over budget when bound + one interval at that rate passes
    $1, i.e. from ~5.4 minutes. So the job is stopped by the 6th run (6 minutes), when Vast has
    billed at most ~$0.45 — below the budget."""
    job, instance_id = busy_host(sup, budget_usd=1.0, traffic_usd_per_gb=TRAFFIC_USD_PER_GB)
    sup.vast.charges_outage()  # every charges read fails; the instances do not

    stopped_at, billed = supervise_until_stopped(sup, job, runs=30)

    found = sup.store.get_job(job.job_id)
    assert found is not None
    assert stopped_at is not None and stopped_at <= 6, (stopped_at, found.state, billed)
    assert found.stop_reason == "over_budget"
    assert billed <= 0.5
    assert sup.vast.instance(instance_id) is None  # the stop destroyed it
    view = sup.store.get_job_view(job.job_id)
    assert view is not None
    assert any("upper bound" in e.message for e in view.events if e.kind == "over_budget")


def test_with_vast_charges_readable_the_job_stops_on_the_real_figure(sup: Supervised) -> None:
    """The same host with the charges readable: its traffic is Vast's bwd and bwu, not the 0
    its heartbeats report, and the job is stopped on that figure: ~$4.47/h in all passes $1
    at ~13.4 minutes, so the 14th run stops it, later than on the bound. The rule projects the
    next interval at the GPU and disk $/h only, so the real figure may pass the budget by one
    interval of traffic ($0.08 here)."""
    job, _ = busy_host(sup, budget_usd=1.0, traffic_usd_per_gb=TRAFFIC_USD_PER_GB)

    stopped_at, billed = supervise_until_stopped(sup, job, runs=30)

    found = sup.store.get_job(job.job_id)
    assert found is not None and found.stop_reason == "over_budget"
    assert stopped_at is not None and 7 <= stopped_at <= 14, stopped_at
    assert 0.9 <= billed <= 1.0 + 4.47 * INTERVAL_S / 3600
    assert sup.spent_usd(job.job_id) >= billed - 1e-6  # what Vast billed, not the host's 0
    view = sup.store.get_job_view(job.job_id)
    assert view is not None
    assert not any("upper bound" in e.message for e in view.events)


def test_the_lease_is_not_renewed_after_ten_runs_without_vast_charges(sup: Supervised) -> None:
    """Free traffic (no bound to stop on), charges unread: the first 9 runs renew the lease as
    before (a short charges outage passes), from the 10th (10 minutes unread,
    `charges_unread_runs_max`) the run is recorded but the lease is not renewed: the
    heartbeat answers `supervisor silent` once the last renewal is older than its max age."""
    job, _ = busy_host(sup, budget_usd=100.0, traffic_usd_per_gb=0.0)
    sup.vast.charges_outage()
    supervised = []
    for _ in range(12):
        sup.clock.advance(INTERVAL_S)
        sup.heartbeat(job.job_id, 1)
        sup.monitor()
        generation = sup.store.get_generation(job.job_id, 1)
        assert generation is not None
        supervised.append(generation.supervised_at)
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.RUNNING  # not stopped: a free link
    assert len(set(supervised[:9])) == 9  # runs 1-9 renewed
    assert supervised[9:] == [supervised[8]] * 3  # runs 10-12 did not
    sup.clock.advance(180)
    reply = sup.agent_beat(job.job_id, 1)
    assert reply["reason"] == "supervisor silent: lease not renewed"


def test_charges_read_again_end_the_bound(sup: Supervised) -> None:
    """A charges outage of 3 runs on a $100 job: the runs during it carry an upper bound on the
    generation (shown by `tether status`); the first run that reads the charges again drops it
    and counts the real figure, and the lease was renewed throughout."""
    job, _ = busy_host(sup, budget_usd=100.0, traffic_usd_per_gb=TRAFFIC_USD_PER_GB)
    sup.clock.advance(INTERVAL_S)
    sup.monitor()
    sup.vast.charges_outage()
    bounds = []
    for _ in range(3):
        sup.clock.advance(INTERVAL_S)
        sup.monitor()
        generation = sup.store.get_generation(job.job_id, 1)
        assert generation is not None
        bounds.append(generation.traffic_bound_usd)
    assert bounds[0] > 0 and bounds[0] < bounds[1] < bounds[2]
    shown = job_detail(sup.store.get_job_view(job.job_id), sup.clock())  # type: ignore[arg-type]
    assert shown["spend"]["upper_bound_usd"] > shown["spend"]["spent_usd"]
    sup.vast.charges_outage(False)
    sup.clock.advance(INTERVAL_S)
    sup.monitor()
    generation = sup.store.get_generation(job.job_id, 1)
    assert generation is not None and generation.traffic_bound_usd == 0
    shown = job_detail(sup.store.get_job_view(job.job_id), sup.clock())  # type: ignore[arg-type]
    assert "upper_bound_usd" not in shown["spend"]
    assert generation.supervised_at == sup.clock()
    billed = sup.vast.ledger(generation.instance_id or 0).total_usd
    assert sup.spent_usd(job.job_id) >= billed - 1e-6
