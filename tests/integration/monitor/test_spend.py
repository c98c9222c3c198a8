"""Spend as Vast bills it (docs/architecture.md#spend), through the real monitor and lifecycle:
stopped time at the storage rate, every instance ever rented for the job counted, spend that only
moves up, the budget judged in every active state, and an orphan without a start date still swept.
Expected figures come from the Vast simulator's ledger, never from tether's own cost model."""

from __future__ import annotations

from typing import Any

import pytest

from functions.adapters.vast import VastClient, VastError, VastUnavailable
from functions.domain.job import JobState, TimelineEvent
from tests.integration.monitor.test_monitor import rent_outside
from tests.integration.supervision_harness import Supervised
from tether_local.vast_sim import BYTES_PER_GB

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def price_every_offer(sup: Supervised, gpu: float, storage_per_gb_month: float) -> None:
    """Every offer at the same prices, traffic free: whichever the planner picks bills this."""
    sup.vast.add_offers(
        [
            {**o, "dph_base": gpu, "storage_cost": storage_per_gb_month, "inet_down_cost": 0.0,
             "inet_up_cost": 0.0, "dph_total": gpu + storage_per_gb_month * 10 / 720}
            for o in sup.vast.offers()
        ]
    )  # fmt: skip


def job_ledgers_usd(sup: Supervised, job_id: str) -> float:
    """What Vast billed for every instance labelled for the job, destroyed ones included."""
    return float(
        sum(c["amount"] for c in sup.vast.charges() if job_id in str(c["metadata"]["label"]))
    )


def stuck_replacing(sup: Supervised, job_id: str) -> None:
    """A replace whose execution died after its first step: the job is
    REPLACING and its generation 1 superseded, and nobody destroys that host."""
    now = sup.clock()
    sup.store.transition_job(
        job_id,
        JobState.REPLACING,
        expected=[JobState.RUNNING],
        now=now,
        event=TimelineEvent(job_id=job_id, at=now, kind="replacing", message="test"),
    )
    sup.store.supersede_generation(job_id, 1, host_blamed=False)


def refuse_destroys(monkeypatch: pytest.MonkeyPatch, instance_id: int) -> None:
    """Vast answers every destroy of `instance_id` with an error (the lifecycle's steps and the
    monitor's sweep alike): nobody can end that instance."""
    real = VastClient.destroy_instance

    def destroy(self: VastClient, iid: int) -> None:
        if iid == instance_id:
            raise VastError(f"destroy of {iid} refused", status=400)
        real(self, iid)

    monkeypatch.setattr(VastClient, "destroy_instance", destroy)


def test_three_hours_running_and_nine_stopped_are_billed_as_vast_bills_them(
    sup: Supervised, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reproduction: a host ran 3 h and then sat stopped 9 h (superseded, its agent stopped
    it; the replace stalled). Vast billed $1.32 ($0.40/h GPU for 3 h, $0.01/h disk for 12 h);
    tether counted $0.41/h for all 12 h, $4.92, enough to end a $5 job as over budget.

    A stalled replace is now retried and its old host swept, so here Vast refuses every destroy
    of that host: it sits stopped for 9 h while the replace's attempts, and then the stop of the
    job they gave up on, keep failing, and the monitor keeps counting what it bills."""
    price_every_offer(sup, gpu=0.40, storage_per_gb_month=0.72)  # 10 GB: $0.01/h of disk
    job, generation = sup.provisioned(budget_usd=5)
    instance_id = generation.instance_id or 0
    for _ in range(3 * 4):  # 3 h running, a monitor run every 15 minutes
        sup.clock.advance(900)
        sup.heartbeat(job.job_id, 1)
        sup.monitor()
    refuse_destroys(monkeypatch, instance_id)
    stuck_replacing(sup, job.job_id)
    sup.stop_instance(instance_id)  # the superseded agent stops its machine
    sup.clock.advance(900)
    sup.monitor()  # sees the stop; then a run every hour
    sup.settle(job.job_id)
    for seconds in [3600] * 8 + [2700]:  # 15 min + 8 h 45 min: 9 h stopped
        sup.clock.advance(seconds)
        sup.monitor()
        sup.settle(job.job_id)

    found = sup.store.get_job(job.job_id)
    assert found is not None and found.stop_reason != "over_budget"  # under its budget
    assert found.state == JobState.STOPPING  # the replace given up on; its stop cannot destroy
    assert sup.vast.instance(instance_id) is not None  # still there: Vast refuses its destroy
    billed = sup.vast.ledger(instance_id).total_usd
    assert billed == pytest.approx(1.32, abs=0.01)
    # errs high by at most the one interval before the stop was first seen
    assert billed <= found.spent_usd <= billed + 0.40 * 900 / 3600 + 1e-6


def test_the_budget_is_judged_while_a_replacement_is_stuck(sup: Supervised) -> None:
    """Reproduction: a replace stalled after RUNNING → REPLACING with the old host still
    running (its agent dead): no budget rule ran outside RUNNING, and 10 h later the job was
    still REPLACING at $0.70 of $0.20. Now the budget is judged in every active state, and a
    job found over it while REPLACING is stopped: the stop takes precedence over the replace's
    next attempt (which would rent again), and its host is destroyed."""
    job, generation = sup.provisioned(budget_usd=0.2)
    instance_id = generation.instance_id or 0
    sup.heartbeat(job.job_id, 1)
    budget_lasts_s = 0.2 / generation.usd_per_hour * 3600
    sup.clock.advance(budget_lasts_s - 30)  # within one 60 s interval of the budget
    stuck_replacing(sup, job.job_id)  # the replace began; its execution died
    report = sup.monitor()
    executions = sup.settle(job.job_id)

    assert report["verdicts"] == {"over_budget": 1} and report["transitions_started"] == 1
    assert executions == {
        f"{job.job_id}-provision-g1-a1": "SUCCEEDED",
        f"{job.job_id}-stop-a1": "SUCCEEDED",
    }  # no attempt of the replace was started
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.OVER_BUDGET
    assert sup.vast.instance(instance_id) is None
    billed = sup.vast.ledger(instance_id).total_usd
    assert billed <= 0.2 + generation.usd_per_hour * 60 / 3600  # within one interval


def test_every_instance_ever_rented_for_the_job_is_counted(sup: Supervised) -> None:
    """Reproduction: instances rented for a job but recorded on no generation — a second
    instance of one generation (destroyed by the monitor as a stray) and a rent that lost its
    race (destroyed by the lifecycle before any monitor run saw it) — billed, and were never
    in the job's spend."""
    job, _ = sup.provisioned()
    stray = rent_outside(sup, f"tether:{job.job_id}:g1")
    lost_race = rent_outside(sup, f"tether:{job.job_id}:g2")
    sup.clock.advance(600)
    vast = VastClient(sup.vast.api_key, client=sup.vast_http())
    vast.destroy_instance(lost_race)  # what provision does with a rent that lost its race
    sup.heartbeat(job.job_id, 1)
    report = sup.monitor()  # keeps the stray's sighting on the job, then destroys it (orphan)

    assert report["orphans_destroyed"] == 1 and sup.vast.instance(stray) is None
    sup.clock.advance(60)
    sup.heartbeat(job.job_id, 1)
    sup.monitor()
    assert sup.spent_usd(job.job_id) == pytest.approx(job_ledgers_usd(sup, job.job_id), rel=1e-3)
    assert sup.vast.ledger(stray).total_usd > 0 and sup.vast.ledger(lost_race).total_usd > 0


def test_spend_never_moves_backwards(sup: Supervised, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reproduction: a run that read Vast's charges (which know the image pull) stored more than
    the next run, which could not read them, measured; and of two overlapping runs the one
    with the older facts could write last. Either moved `spent_usd` down."""
    sup.vast.add_offers([{**o, "inet_down_cost": 0.02} for o in sup.vast.offers()])
    job, generation = sup.provisioned()
    sup.clock.advance(60)
    sup.heartbeat(job.job_id, 1)
    sup.vast.record_traffic(generation.instance_id or 0, down_bytes=10 * BYTES_PER_GB)
    sup.monitor()
    with_charges = sup.store.get_job(job.job_id)
    assert with_charges is not None and with_charges.spent_usd > 0.2  # the 10 GB pull

    def unavailable(self: VastClient, **_: Any) -> Any:
        raise VastUnavailable("charges: 502")

    monkeypatch.setattr(VastClient, "charges", unavailable)
    sup.clock.advance(60)
    sup.heartbeat(job.job_id, 1)
    sup.monitor()
    after_outage = sup.store.get_job(job.job_id)
    sup.clock.advance(-90)  # an overlapping run whose facts were read earlier
    sup.monitor()
    after_overlap = sup.store.get_job(job.job_id)

    assert after_outage is not None and after_overlap is not None
    assert after_outage.spent_usd >= with_charges.spent_usd
    assert after_overlap.spent_usd >= after_outage.spent_usd


def test_an_orphan_without_a_start_date_is_swept(sup: Supervised) -> None:
    """Reproduction: an orphan whose `start_date` Vast sends as null was never swept (its age
    counted as 0). Now its age counts from its first sighting."""
    orphan = rent_outside(sup, "tether:gone-job-0123abcd:g1")
    sup.vast.garble(orphan, start_date=None)

    first = sup.monitor()
    sup.clock.advance(61)
    second = sup.monitor()

    assert first["orphans_destroyed"] == 0 and second["orphans_destroyed"] == 1
    assert sup.vast.instance(orphan) is None
