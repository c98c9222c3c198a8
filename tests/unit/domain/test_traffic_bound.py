"""Traffic on Vast's word (docs/architecture.md#spend): counted from Vast's bwd and bwu charges,
the host's byte counts only a lower bound, and bounded from above by the host's link while the
charges are unread ("unread" is a fact of its own, not "no charges")."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.job import Heartbeat
from functions.domain.offer import Offer
from functions.domain.reconcile import InstanceFacts, JobSnapshot, SupervisionSettings, reconcile
from functions.domain.spend import (
    ChargesUnread,
    GenerationPrices,
    VastCharges,
    link_usd_per_hour,
    spend_of,
    traffic_bound_usd,
    vast_charges,
)
from tests.unit.domain.builders import NOW, gen, job

SETTINGS = SupervisionSettings(interval_s=60, orphan_grace_s=60)
UNREAD = ChargesUnread(reason="charges call failed: 502")
LABEL = "tether:t-0123abcd:g1"


def prices(**fields: Any) -> GenerationPrices:
    values: dict[str, Any] = {
        "gpu_usd_per_hour": 0.4, "storage_usd_per_hour": 0.1,
        "inet_down_usd_per_gb": 0.052, "inet_up_usd_per_gb": 0.052,
    }  # fmt: skip
    return GenerationPrices(**(values | fields))


# --- the bound --------------------------------------------------------------------------------


def test_a_1_gbit_link_at_the_highest_real_price_bounds_traffic_at_93_60_an_hour() -> None:
    # 1000 Mbit/s × 2 (margin) = 0.25 GB/s each way = 900 GB/h × $0.052 = $46.80/h each way
    link = prices(inet_down_mbps=1000, inet_up_mbps=1000)
    assert link_usd_per_hour(link) == pytest.approx(93.60)
    assert traffic_bound_usd(link, 600) == pytest.approx(15.60)  # ten minutes unread
    assert traffic_bound_usd(link, 0) == 0 and traffic_bound_usd(link, -5) == 0


def test_each_direction_at_its_own_rate_and_price() -> None:
    link = prices(inet_down_mbps=800, inet_up_mbps=200, inet_down_usd_per_gb=0.01,
                  inet_up_usd_per_gb=0.04)  # fmt: skip
    # down 1600 Mbit/s = 720 GB/h × $0.01 = $7.20; up 400 Mbit/s = 180 GB/h × $0.04 = $7.20
    assert link_usd_per_hour(link) == pytest.approx(14.40)


def test_an_unknown_link_rate_is_taken_from_the_other_direction_or_as_25_gbit() -> None:
    only_down = prices(inet_down_mbps=1000)
    assert link_usd_per_hour(only_down) == pytest.approx(93.60)
    # neither known: 25,000 Mbit/s each way, no margin: 11,250 GB/h × $0.052 × 2
    assert link_usd_per_hour(prices()) == pytest.approx(1170.0)


def test_free_traffic_has_no_bound() -> None:
    free = prices(inet_down_usd_per_gb=0, inet_up_usd_per_gb=0)
    assert link_usd_per_hour(free) == 0 and traffic_bound_usd(free, 3600) == 0


def test_the_offer_link_rates_are_kept_with_its_prices() -> None:
    offer = Offer.model_validate({"id": 1, "dph_base": 0.4, "inet_down": 653.6, "inet_up": 628.1,
                                  "inet_down_cost": 0.052, "inet_up_cost": 0.052})  # fmt: skip
    kept = GenerationPrices.from_offer(offer, disk_gb=10)
    assert (kept.inet_down_mbps, kept.inet_up_mbps) == (653.6, 628.1)
    without = GenerationPrices.from_offer(
        Offer.model_validate({"id": 2, "dph_base": 0.4}), disk_gb=10
    )
    assert without.inet_down_mbps is None and without.inet_up_mbps is None


# --- a generation's spend ---------------------------------------------------------------------

LINK_PRICES = {
    "gpu_usd_per_hour": 0.4, "storage_usd_per_hour": 0.1, "inet_down_usd_per_gb": 0.052,
    "inet_up_usd_per_gb": 0.052, "inet_down_mbps": 1000, "inet_up_mbps": 1000,
}  # fmt: skip


def test_unread_charges_bound_traffic_since_the_last_read() -> None:
    g = gen(prices=LINK_PRICES, created_at=NOW - 3600, charges_read_at=NOW - 300)
    read = spend_of(g, NOW)
    unread = spend_of(g, NOW, charges_read=False)
    assert read.traffic_bound_usd == 0
    assert unread.traffic_bound_usd == pytest.approx(93.60 * 300 / 3600)  # $7.80
    assert unread.total_usd == read.total_usd  # the bound is not spend, only its ceiling
    assert unread.upper_usd == pytest.approx(read.total_usd + 7.80)


def test_never_read_charges_bound_traffic_since_the_rent() -> None:
    g = gen(prices=LINK_PRICES, created_at=NOW - 600)
    assert spend_of(g, NOW, charges_read=False).traffic_bound_usd == pytest.approx(15.60)


def test_an_ended_generation_bills_no_traffic_after_its_end() -> None:
    g = gen(prices=LINK_PRICES, created_at=NOW - 600, ended_at=NOW - 300)
    assert spend_of(g, NOW, charges_read=False).traffic_bound_usd == pytest.approx(7.80)


def test_vast_traffic_counts_however_few_bytes_the_host_reports() -> None:
    beat = Heartbeat.model_validate({
        "at": NOW, "agent_time": NOW, "phase": "training", "step": 3,
        "gpu": {"available": True}, "bytes_downloaded": 10**9, "bytes_uploaded": 0,
    })  # fmt: skip
    g = gen(prices=LINK_PRICES, heartbeat=beat, vast_traffic_usd=2.0)
    assert spend_of(g, NOW).traffic_usd == 2.0  # Vast's $2, not the host's 1 GB ($0.052)
    assert spend_of(g.model_copy(update={"vast_traffic_usd": 0.01}), NOW).traffic_usd == (
        pytest.approx(0.052)  # the host's count where larger: a lower bound
    )


def test_traffic_lines_of_a_charge_are_read_and_unreadable_ones_counted() -> None:
    def line(kind: str, amount: object) -> dict[str, Any]:
        return {"type": kind, "amount": amount, "items": []}

    rows: list[dict[str, Any]] = [
        {"type": "instance", "source": "instance-100", "amount": 3.0,
         "items": [line("gpu", 1.0), line("bwd", 1.5), line("bwu", "0.5")]},
        {"type": "instance", "source": "instance-101", "amount": 1.0,
         "items": [line("bwd", "n/a")]},
    ]  # fmt: skip
    read = vast_charges(rows)
    assert read.amounts == {100: 3.0} and read.traffic == {100: 2.0}
    assert read.unreadable == 1


# --- the monitor's decision -------------------------------------------------------------------


def decide(charges: VastCharges | ChargesUnread, budget_usd: float = 100, **fields: Any) -> Any:
    values: dict[str, Any] = {"prices": LINK_PRICES, "created_at": NOW - 3600} | fields
    snapshot = JobSnapshot(job=job(budget_usd=budget_usd), generations=(gen(**values),))
    running = InstanceFacts(id=100, label=LABEL, actual_status="running", start_date=NOW - 3600)
    return reconcile([snapshot], [running], charges, now=NOW, settings=SETTINGS).decisions[0]


def test_no_charges_is_not_unread() -> None:
    """Read, and Vast billed nothing yet: spend is the estimate, no bound, the lease renewed.
    Unread: the same spend, its ceiling raised by the link for the hour since the rent."""
    none = decide(VastCharges())
    unread = decide(UNREAD)
    assert none.spend_upper_usd == none.spend_usd and none.renew_lease
    assert none.observation.traffic_bound_usd == 0 and none.observation.charges_read_at == NOW
    assert unread.spend_usd == none.spend_usd
    assert unread.spend_upper_usd == pytest.approx(unread.spend_usd + 93.60)
    assert unread.observation.charges_read_at is None
    assert not unread.renew_lease  # an hour unread: past ten runs


def test_a_job_that_might_be_over_budget_is_stopped_on_the_bound() -> None:
    """$9.50 budget, $0.50 spent, charges unread for 5 minutes on a 1 Gbit/s host: $0.50 +
    the $7.80 bound + one interval at $94.10/h ($1.57) = $9.87, past $9.50: stopped. Read, it
    runs on."""
    fields = {"charges_read_at": NOW - 300, "created_at": NOW - 3600}
    unread = decide(UNREAD, budget_usd=9.5, **fields)
    read = decide(VastCharges(), budget_usd=9.5, **fields)
    assert unread.transition is not None and unread.transition.action == "stop"
    assert "upper bound" in unread.verdict.reason
    assert read.transition is None


def test_charges_read_again_reset_the_bound_to_the_real_figure() -> None:
    """After an outage, the first run that reads the charges counts what Vast billed (its
    traffic kept on the generation) and drops the bound."""
    unread = decide(UNREAD, charges_read_at=NOW - 300)
    charges = VastCharges(amounts={100: 6.0}, traffic={100: 5.0}, labels={100: LABEL})
    again = decide(charges, charges_read_at=NOW - 300)
    assert unread.spend_upper_usd > unread.spend_usd
    assert again.spend_upper_usd == again.spend_usd == pytest.approx(6.0)
    assert again.observation.vast_traffic_usd == 5.0 and again.observation.charges_read_at == NOW
    # the next run cannot read them: the $5 of traffic read stays counted under the bound
    g = gen(prices=LINK_PRICES, created_at=NOW - 3600, vast_traffic_usd=5.0,
            charges_read_at=NOW - 60)  # fmt: skip
    later = reconcile([JobSnapshot(job=job(budget_usd=100), generations=(g,))], [], UNREAD,
                      now=NOW, settings=SETTINGS).decisions[0]  # fmt: skip
    assert later.spend_usd == pytest.approx(0.5 + 5.0)  # an hour of $0.50/h, and Vast's $5
    assert later.spend_upper_usd == pytest.approx(5.5 + 93.60 / 60)


@pytest.mark.parametrize(
    ("unread_s", "renewed"), [(0, True), (540, True), (599, True), (600, False), (3600, False)]
)
def test_the_lease_is_renewed_for_fewer_than_ten_unread_runs(
    unread_s: float, renewed: bool
) -> None:
    d = decide(UNREAD, charges_read_at=NOW - unread_s)
    assert d.renew_lease is renewed
    assert decide(VastCharges(), charges_read_at=NOW - unread_s).renew_lease
