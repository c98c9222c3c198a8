"""What `tether plan` says about markets: the bid, the outbid hazard and, for auto, which market
won each offer and by how much. The pricing is `functions.domain.market` and `cost.plan_job`;
this module only words it (table cells, lines under the table, `--json` fields)."""

from __future__ import annotations

from typing import Any

from functions.domain.cost import OfferCost, Plan
from functions.domain.jobspec import JobSpec
from functions.domain.market import OutbidHazard
from tether_cli import output

NO_OTHER = "—"  # auto, when only one market qualifies for the offer


def _round_usd(value: float) -> float:
    return round(value, 4)


def market_cell(cost: OfferCost) -> str:
    """The table's `market` cell: on-demand, or the bid an interruptible rent places."""
    if cost.bid_usd_per_hour is None:
        return "on-demand"
    return f"bid {cost.bid_usd_per_hour:.3f}"


def outbids_cell(cost: OfferCost) -> str:
    return f"{cost.expected_outbids:.2f}" if cost.market == "interruptible" else NO_OTHER


def won_by_cell(cost: OfferCost) -> str:
    """Auto: how much cheaper the kept market is than the other one on this offer."""
    if cost.other_market_total_usd is None:
        return NO_OTHER
    return f"{cost.other_market_total_usd - cost.expected_total_usd:.3f}"


def columns(job: JobSpec) -> list[tuple[str, str]]:
    """The market columns after `$/h` (none on demand: every row would say so)."""
    market = job.resources.market
    if market == "on-demand":
        return []
    cols = [("market", "left"), ("outbids", "right")]
    return [*cols, ("won by $", "right")] if market == "auto" else cols


def cells(job: JobSpec, cost: OfferCost) -> list[str]:
    market = job.resources.market
    if market == "on-demand":
        return []
    row = [market_cell(cost), outbids_cell(cost)]
    return [*row, won_by_cell(cost)] if market == "auto" else row


def hazard_json(hazard: OutbidHazard | None) -> dict[str, Any] | None:
    if hazard is None:
        return None
    return {
        "source": hazard.source,
        "outbids": hazard.outbids,
        "hours": round(hazard.hours, 3),
        "detail": hazard.detail,
    }


def row_json(cost: OfferCost) -> dict[str, Any]:
    """The market fields of one `--json` ranking row."""
    other = cost.other_market_total_usd
    return {
        "market": cost.market,
        "bid_usd_per_hour": None
        if cost.bid_usd_per_hour is None
        else _round_usd(cost.bid_usd_per_hour),
        "expected_outbids": round(cost.expected_outbids, 4),
        "hazard_per_hour": None if cost.hazard is None else round(cost.hazard.per_hour, 6),
        "hazard_from": hazard_json(cost.hazard),
        "other_market": None
        if other is None
        else {
            "market": "on-demand" if cost.market == "interruptible" else "interruptible",
            "expected_total_usd": _round_usd(other),
            "saving_usd": _round_usd(other - cost.expected_total_usd),
        },
    }


def plan_market_json(plan: Plan, job: JobSpec) -> dict[str, Any]:
    """The `--json` document's `market` section: what was asked and the hazard used."""
    res = job.resources
    return {
        "requested": res.market,
        "bid_margin": res.bid_margin,
        "hazard_per_hour": None if plan.hazard is None else round(plan.hazard.per_hour, 6),
        "hazard_from": hazard_json(plan.hazard),
    }


def _other_name(cost: OfferCost) -> str:
    return "on-demand" if cost.market == "interruptible" else "interruptible"


def lines(plan: Plan, job: JobSpec) -> list[str]:
    """Lines under the table: the market asked, the hazard and where from, the market of #1."""
    res = job.resources
    if plan.hazard is None:
        return [
            "Market: on-demand (resources.market: auto would also price interruptible hosts, "
            "bidding from their min_bid)."
        ]
    hazard = plan.hazard
    found = [
        f"Market: {res.market}. Bids are min_bid + {res.bid_margin:.0%}; outbid hazard "
        f"{hazard.per_hour:.3g}/h ({hazard.detail}); an outbid is priced as a replacement: "
        "lost work, start-up and the download again."
    ]
    if res.market == "auto":
        found.append(
            "Auto prices each offer both ways and keeps the cheaper; 'won by $' is how much "
            f"less than the other market on that offer ('{NO_OTHER}': only one qualifies)."
        )
    best = plan.ranking[0]
    if best.market == "interruptible" and best.bid_usd_per_hour is not None:
        line = (
            f"Market of #1: interruptible, bid ${best.bid_usd_per_hour:.3f}/h "
            f"(min_bid ${best.offer.min_bid or 0:.3f}), {best.expected_outbids:.2f} expected "
            f"outbids ({output.usd(best.breakdown.outbid_usd)})"
        )
    else:
        line = "Market of #1: on-demand"
    other = best.other_market_total_usd
    if other is not None:
        saving = other - best.expected_total_usd
        share = saving / other * 100 if other else 0.0
        line += (
            f"; {_other_name(best)} would cost {output.usd(other)} on this offer, "
            f"{output.usd(saving)} ({share:.0f}%) more"
        )
    found.append(line + ".")
    return found


def breakdown_suffix(cost: OfferCost) -> str:
    """Appended to the `Breakdown of #1` line for an interruptible host."""
    if cost.market != "interruptible":
        return ""
    return (
        f", outbids {output.usd(cost.breakdown.outbid_usd)} "
        f"({cost.expected_outbids:.2f} expected outbids)"
    )
