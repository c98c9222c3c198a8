"""`tether plan JOB.yaml`: rank Vast offers by what the job will really cost.

Offers come from a saved Vast search reply (`--offers FILE`) or a live search with
`VAST_API_KEY`; the pace and start-up learned for the job's name come from the control plane
when one is configured (`tether_cli/plan_measures.py`). The ranking is
`functions.domain.cost.plan_job`; this module only reads inputs and prints.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.text import Text

from functions.domain.cost import NoQualifyingOffer, OfferCost, Plan, plan_job
from functions.domain.jobspec import JobSpec
from functions.domain.offer import Offer
from functions.domain.pace import pace_estimator, startup_estimator
from functions.domain.speed_law import SpeedLaw
from tether_cli import output, plan_market
from tether_cli.output import EXIT_FAILURE, EXIT_NO_OFFER, EXIT_OK, CliError
from tether_cli.plan_measures import PlanMeasures, fetch_measures
from tether_cli.terminal_text import visible
from tether_cli.validate import load_job

DEFAULT_TOP = 5


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def _minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of minutes, got {text!r}") from None
    if not 0 <= value <= 24 * 60:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1440 minutes, got {text}")
    return value


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="rank Vast offers by the job's expected total cost",
        description="Rank Vast offers by expected total cost: GPU and storage, billed start-up "
        "minutes, download and upload traffic, and interruptions. Searches Vast live with "
        "VAST_API_KEY unless --offers is given.",
    )
    parser.add_argument("job", metavar="JOB.yaml", help="the job spec (YAML or JSON)")
    parser.add_argument(
        "--offers",
        metavar="FILE",
        help='a saved Vast search reply ({"offers": [...]}) or a JSON list of offers',
    )
    parser.add_argument(
        "--top",
        type=_positive_int,
        default=DEFAULT_TOP,
        metavar="N",
        help=f"how many offers to show (default {DEFAULT_TOP})",
    )
    parser.add_argument(
        "--startup-min",
        type=_minutes,
        default=None,
        metavar="M",
        help="fixed start-up minutes before the download (default: the job's expected_startup_min)",
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="read the pace and start-up learned for the job's name from the local stack "
        "(default: from TETHER_API_URL when set, else none)",
    )
    parser.add_argument(
        "--no-measures",
        action="store_true",
        help="plan with the speed prior and the spec's start-up only",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run)


def load_offers_file(path: str) -> tuple[list[Offer], int]:
    """The offers in a Vast search reply or a bare list, and how many records were skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"--offers {path}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"--offers {path}: is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"--offers {path}: cannot be read ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"--offers {path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if isinstance(data, dict) and "offers" in data:
        data = data["offers"]
    if not isinstance(data, list):
        raise CliError(
            f'--offers {path}: expected a Vast search reply {{"offers": [...]}} or a list '
            f"of offers, got {type(data).__name__}"
        )
    offers = []
    for record in data:
        try:
            offers.append(Offer.model_validate(record))
        except ValidationError:
            continue
    return offers, len(data) - len(offers)


def search_live(job: JobSpec) -> list[Offer]:
    """Search Vast with the account key in VAST_API_KEY."""
    api_key = os.environ.get("VAST_API_KEY", "").strip()
    if not api_key:
        raise CliError(
            "VAST_API_KEY is not set: export your Vast API key, or pass --offers FILE "
            "with a saved search"
        )
    # Imported here so `validate` and offline plans never load the HTTP client.
    from functions.adapters.vast import AuthFailed, VastClient, VastError

    try:
        return VastClient(api_key).search_offers(job.resources, disk_gb=job.resources.min_disk_gb)
    except VastError as exc:
        hint = " (check VAST_API_KEY)" if isinstance(exc, AuthFailed) else ""
        raise CliError(f"Vast search failed: {exc}{hint}", EXIT_FAILURE) from None


def gpu_label(offer: Offer) -> str:
    return f"{offer.num_gpus}x {offer.gpu_name or '?'}"


def _round_usd(value: float) -> float:
    return round(value, 4)


def hours_basis(job: JobSpec) -> str:
    """What the job's `expected_hours` mean, as the plan used them."""
    if job.total_steps is not None:
        return (
            f"Work: total_steps {job.total_steps}; hours from expected_hours "
            f"{job.expected_hours:g} "
            + (f"on {job.resources.gpu_count}x {job.reference_gpu}, scaled by speed" if
               job.reference_gpu else "as given, on any host")
            + f", calibrated by the pace measured for {job.name} where any was (per GPU "
            "model and count; `from` says which)."
        )  # fmt: skip
    if job.reference_gpu is None:
        return (
            f"Hours: expected_hours {job.expected_hours:g} as given, on any host (no "
            "reference_gpu; set one to scale the hours by each host's speed)."
        )
    return (
        f"Hours: expected_hours {job.expected_hours:g} on {job.resources.gpu_count}x "
        f"{job.reference_gpu}, scaled per offer by its dlperf (else total_flops) under an "
        "uncertain law: hours ∝ (reference ÷ offer speed)^a, the mean over a from flat (0) to "
        "proportional (1)."
    )


def startup_from(cost: OfferCost) -> str:
    """Where an offer's fixed start-up minutes come from, short for the table: `spec`, or
    `machine×3` / `gpu×2` (learned, from that many runs)."""
    if cost.startup is None or cost.startup.source == "spec":
        return "spec"
    return f"{cost.startup.source}×{cost.startup.runs}"


def startup_line(cost: OfferCost, job: JobSpec, override: float | None) -> str:
    """Where the top offer's start-up minutes come from, in words."""
    fixed = cost.startup.minutes if cost.startup else job.expected_startup_min
    download = cost.startup_min - fixed
    if cost.startup is None or cost.startup.source == "spec":
        where = "--startup-min" if override is not None else "the spec's expected_startup_min"
    else:
        kind = "this machine" if cost.startup.source == "machine" else cost.offer.gpu_name
        where = f"learned on {kind} for {job.name}, {cost.startup.runs} run(s)"
    return (
        f"Start-up of #1: {cost.startup_min:.1f} min = {fixed:.1f} fixed ({where}) + "
        f"{download:.1f} download."
    )


def plan_json(plan: Plan, top: int, job: JobSpec, learned: PlanMeasures) -> dict[str, Any]:
    """The `--json` document (its shape is a contract: scripts read it)."""
    naive = plan.naive_choice
    return {
        "hours_basis": {
            "expected_hours": job.expected_hours,
            "reference_gpu": job.reference_gpu,
            "gpu_count": job.resources.gpu_count,
            "total_steps": job.total_steps,
        },
        "measures": {"source": learned.source, "detail": learned.detail},
        "ranking": [
            {
                "offer_id": cost.offer.id,
                "gpu": gpu_label(cost.offer),
                "usd_per_hour": _round_usd(cost.usd_per_hour),
                "expected_total_usd": _round_usd(cost.expected_total_usd),
                "expected_hours": round(cost.expected_hours, 3),
                "hours_from": {
                    "source": cost.speed.source,
                    "runs": cost.speed.runs,
                    "detail": cost.speed.detail,
                },
                "startup_min": round(cost.startup_min, 2),
                "startup_from": {
                    "source": cost.startup.source if cost.startup else "spec",
                    "runs": cost.startup.runs if cost.startup else 0,
                    "fixed_min": round(cost.startup.minutes, 2) if cost.startup else None,
                },
                "breakdown": {
                    "compute_usd": _round_usd(cost.breakdown.compute_usd),
                    "startup_usd": _round_usd(cost.breakdown.startup_usd),
                    "download_usd": _round_usd(cost.breakdown.download_usd),
                    "upload_usd": _round_usd(cost.breakdown.upload_usd),
                    "interruption_usd": _round_usd(cost.breakdown.interruption_usd),
                    "outbid_usd": _round_usd(cost.breakdown.outbid_usd),
                },
                **plan_market.row_json(cost),
            }
            for cost in plan.ranking[:top]
        ],
        "naive_choice": None
        if naive is None
        else {
            "offer_id": naive.offer.id,
            "expected_total_usd": _round_usd(naive.expected_total_usd),
        },
        "checkpoint_interval_min": round(plan.checkpoint_interval_min, 1),
        "market": plan_market.plan_market_json(plan, job),
    }


def _print_table(
    job: JobSpec, plan: Plan, top: int, source: str, learned: PlanMeasures, override: float | None
) -> None:
    console = output.stdout_console()
    shown = plan.ranking[:top]
    table = output.table(
        f"{job.name}: top {len(shown)} of {len(plan.ranking)} qualifying offers "
        f"({plan.considered} considered, {source})",
        [
            ("#", "right"),
            ("offer", "right"),
            ("GPU", "left"),
            ("location", "left"),
            ("$/h", "right"),
            *plan_market.columns(job),
            ("start-up min", "right"),
            ("hours", "right"),
            ("from", "left"),
            ("traffic $", "right"),
            ("expected total $", "right"),
        ],
    )
    naive = plan.naive_choice
    for rank, cost in enumerate(shown, start=1):
        marker = " (cheapest $/h)" if naive is not None and cost.offer.id == naive.offer.id else ""
        table.add_row(
            str(rank),
            str(cost.offer.id),
            visible(gpu_label(cost.offer) + marker, keep_newlines=False),  # the host's word
            visible(cost.offer.geolocation or "?", keep_newlines=False),
            f"{cost.usd_per_hour:.3f}",
            *plan_market.cells(job, cost),
            f"{cost.startup_min:.1f} {startup_from(cost)}",
            f"{cost.expected_hours:.2f}",
            cost.speed.basis,
            f"{cost.breakdown.traffic_usd:.3f}",
            f"{cost.expected_total_usd:.3f}",
        )
    if not console.is_terminal:
        # A pipe or a log gets the whole table; a terminal cuts it at its own width.
        wide = console.options.update_width(10_000)
        console.width = max(console.width, console.measure(table, options=wide).maximum)
    console.print(table)

    best = plan.ranking[0]
    console.print()
    console.print(Text(hours_basis(job)))
    console.print(Text(f"Measured: {learned.detail}."))
    if best.speed.source != "spec":
        console.print(Text(f"Hours of #1: {best.expected_hours:.2f} ({best.speed.detail})."))
    console.print(Text(visible(startup_line(best, job, override), keep_newlines=False)))
    console.print(Text(visible(_comparison(best, naive), keep_newlines=False)))
    console.print(
        Text(
            f"Breakdown of #1: compute {output.usd(best.breakdown.compute_usd)}, start-up "
            f"{output.usd(best.breakdown.startup_usd)}, download "
            f"{output.usd(best.breakdown.download_usd)}, upload "
            f"{output.usd(best.breakdown.upload_usd)}, interruptions "
            f"{output.usd(best.breakdown.interruption_usd)} "
            f"({best.expected_restarts:.2f} expected restarts)"
            f"{plan_market.breakdown_suffix(best)}."
        )
    )
    for line in plan_market.lines(plan, job):
        console.print(Text(line))
    interval = f"Recommended checkpoint interval: {plan.checkpoint_interval_min:.0f} min"
    if job.checkpoint.interval_min is not None:
        interval += f" (the job sets {job.checkpoint.interval_min:g} min; costs assume that)"
    console.print(Text(interval + "."))


def _comparison(best: OfferCost, naive: OfferCost | None) -> str:
    if naive is None or naive.offer.id == best.offer.id:
        return (
            f"The cheapest offer by $/h ({best.offer.id}) is also the cheapest in total: "
            f"{output.usd(best.expected_total_usd)}."
        )
    saving = naive.expected_total_usd - best.expected_total_usd
    share = saving / naive.expected_total_usd * 100 if naive.expected_total_usd else 0.0
    return (
        f"Cheapest by $/h: offer {naive.offer.id} ({gpu_label(naive.offer)}, "
        f"${naive.usd_per_hour:.3f}/h) would cost {output.usd(naive.expected_total_usd)} in "
        f"total; offer {best.offer.id} saves {output.usd(saving)} ({share:.0f}%)."
    )


def run(args: argparse.Namespace) -> int:
    job = load_job(args.job)
    if args.offers is not None:
        offers, skipped = load_offers_file(args.offers)
        if skipped:
            output.warn(f"skipped {skipped} offer record(s) in {args.offers} that do not parse")
        source = args.offers
    else:
        offers = search_live(job)
        source = "live Vast search"

    learned = fetch_measures(job, local=args.local, skip=args.no_measures)
    try:
        plan = plan_job(
            job,
            offers,
            startup_min=args.startup_min,
            estimate=pace_estimator(learned.measures, law=SpeedLaw()),
            estimate_startup=startup_estimator(learned.measures),
        )
    except NoQualifyingOffer as exc:
        worst = exc.worst
        if worst is None:
            raise CliError(f"no offer qualifies for {job.name}: {exc}", EXIT_NO_OFFER) from None
        raise CliError(
            f"no offer qualifies for {job.name}: {worst[0]} excluded the most "
            f"({worst[1]} of {exc.considered} offers). Offers each constraint excluded:",
            EXIT_NO_OFFER,
            details=[f"{name}: {count}" for name, count in exc.excluded.items()],
        ) from None

    best = plan.ranking[0]
    if best.expected_total_usd > job.budget_usd:
        output.warn(
            f"the best offer's expected total {output.usd(best.expected_total_usd)} is over "
            f"budget_usd {output.usd(job.budget_usd)}: the job would be stopped before it ends"
        )
    if args.json:
        output.print_json(plan_json(plan, args.top, job, learned))
    else:
        _print_table(job, plan, args.top, source, learned, args.startup_min)
    return EXIT_OK
