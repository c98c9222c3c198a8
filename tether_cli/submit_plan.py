"""`tether submit`'s price, its question, and what Ctrl-C leaves behind.

Before anything is uploaded or stored, `submit` prints on stderr the host the control plane
would rent first, the job's expected total and its range, and the budget, then asks
`submit and rent a host? [y/N]` on a terminal. The price is `tether plan`'s
(`functions.domain.cost.plan_job` over the offers, with the pace and start-up learned for the
job's name, `tether_cli.plan_measures`): the control plane runs the same ranking when it rents
(`functions.domain.rent.plan_rent`), trying the offers best first while one is taken, so the
range is the expected totals of the offers it would try (`MAX_OFFERS_PER_ATTEMPT`). Offers come
from `--offers FILE` or a live Vast search with `VAST_API_KEY`; without either (or with
`--local`, whose hosts come from the local stack's simulated Vast) the price is unknown, the
reason is said, and the question is still asked.

No question when `--yes` is given, when stdin is not a terminal (scripts, CI) or with `--json`
(which prints no price either: scripts read the job document). Answering anything but `y`/`yes`
(Enter, Ctrl-D) declines: exit 1, `tether: not submitted`, nothing uploaded or stored.

Ctrl-C (exit 130, one line, `tether_cli.output.Interrupted`):
- before the job is sent: nothing is stored; a code archive whose upload had completed stays in
  the bucket under `code/` (uploads are kept and content-addressed: the next submit of the same
  code skips the upload), one cut off mid-upload is not stored at all;
- while `POST /jobs` waits for its reply: the request may already have stored the job, so the
  first Ctrl-C only says so and waits for the reply, to name the job and how to cancel it; a
  second Ctrl-C leaves at once, saying the job may exist and how to find it;
- once the reply is in: the job id and `tether cancel JOB`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any, TextIO

from functions.domain.cost import NoQualifyingOffer, OfferCost, plan_job
from functions.domain.jobspec import JobSpec
from functions.domain.offer import Offer
from functions.domain.pace import pace_estimator, startup_estimator
from functions.domain.rent import MAX_OFFERS_PER_ATTEMPT, startup_cost_usd
from functions.domain.speed_law import SpeedLaw
from tether_cli import code_ship, output, plan
from tether_cli.api_client import ApiReply, TetherApi
from tether_cli.code_pack import Packed
from tether_cli.output import EXIT_FAILURE, CliError, Interrupted, Notice
from tether_cli.plan_measures import fetch_measures
from tether_cli.terminal_text import visible

QUESTION = "submit and rent a host? [y/N] "
YES_ANSWERS = frozenset({"y", "yes"})
NOTHING_STORED = "nothing was submitted (no job stored)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`submit`'s options for its price and question."""
    parser.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="submit without asking (the price is still printed); no question is asked either "
        "when stdin is not a terminal or with --json",
    )
    parser.add_argument(
        "--offers",
        metavar="FILE",
        help="price the job with a saved Vast search (as `tether plan --offers`) instead of a "
        "live one with VAST_API_KEY",
    )


# --- the price --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmitPrice:
    """What the job is expected to cost, or why that is unknown (`unknown_why`)."""

    budget_usd: float
    tried: tuple[OfferCost, ...] = ()  # the offers the control plane tries, best first
    source: str = ""  # where the offers came from: a file, or a live Vast search
    unknown_why: str | None = None
    startup_cost_usd: float = 0.0  # what the first host costs before its first checkpoint
    skipped_records: int = 0


def submit_price(
    job: JobSpec,
    *,
    offers_path: str | None,
    local: bool,
    environ: Mapping[str, str] | None = None,
    search: Callable[[JobSpec], list[Offer]] = plan.search_live,
) -> SubmitPrice:
    """The price of `job` as the control plane would rent it now (module docstring)."""
    env = os.environ if environ is None else environ
    unknown = SubmitPrice(budget_usd=job.budget_usd)
    skipped = 0
    if offers_path is not None:
        offers, skipped = plan.load_offers_file(offers_path)  # a bad file: exit 2, as plan
        source = offers_path
    elif local:
        return _unknown(
            unknown,
            "the local stack rents from its own simulated Vast, which submit does not search "
            "(--offers FILE prices a saved search)",
        )
    elif not env.get("VAST_API_KEY", "").strip():
        return _unknown(
            unknown,
            "VAST_API_KEY is not set on this machine, so Vast's offers cannot be read here "
            "(the control plane searches with the account's key when it rents; --offers FILE "
            "prices a saved search)",
        )
    else:
        try:
            offers = search(job)
        except CliError as exc:
            return _unknown(unknown, exc.message)
        source = "a live Vast search, now"
    learned = fetch_measures(job, local=local, skip=False, environ=env)
    try:
        ranked = plan_job(
            job,
            offers,
            estimate=pace_estimator(learned.measures, law=SpeedLaw()),
            estimate_startup=startup_estimator(learned.measures),
        )
    except NoQualifyingOffer as exc:
        return _unknown(
            unknown,
            f"no offer qualifies now ({exc.describe()}); the control plane waits for one",
        )
    best = ranked.ranking[0]
    return SubmitPrice(
        budget_usd=job.budget_usd,
        tried=tuple(ranked.ranking[:MAX_OFFERS_PER_ATTEMPT]),
        source=source,
        startup_cost_usd=startup_cost_usd(best, job.checkpoint.interval_min),
        skipped_records=skipped,
    )


def _unknown(price: SubmitPrice, why: str) -> SubmitPrice:
    return SubmitPrice(budget_usd=price.budget_usd, unknown_why=why)


def price_lines(price: SubmitPrice) -> list[str]:
    """The price for people, one fact a line (the offers' text shown, not obeyed)."""
    budget = (
        f"budget    {output.usd(price.budget_usd)}: the job is stopped when its spend reaches it"
    )
    if not price.tried:
        return [f"price     unknown: {price.unknown_why}", budget]
    best = price.tried[0]
    offer = best.offer
    market = (
        f"interruptible, bid ${best.bid_usd_per_hour:.3f}/h"
        if best.bid_usd_per_hour is not None
        else "on-demand"
    )
    where = f", {offer.geolocation}" if offer.geolocation else ""
    parts = best.breakdown
    lines = [
        f"host      offer {offer.id} ({plan.gpu_label(offer)}{where}), "
        f"${best.usd_per_hour:.3f}/h {market}, first of {len(price.tried)} the control plane "
        f"tries in order (from {price.source})",
        f"expected  {output.usd(best.expected_total_usd)} over {best.expected_hours:.2f} h "
        f"(compute {output.usd(parts.compute_usd)}, start-up {output.usd(parts.startup_usd)}, "
        f"traffic {output.usd(parts.traffic_usd)}, interruptions "
        f"{output.usd(parts.interruption_usd + parts.outbid_usd)})",
    ]
    totals = [cost.expected_total_usd for cost in price.tried]
    if len(totals) > 1:
        lines.append(
            f"range     {output.usd(min(totals))} to {output.usd(max(totals))}: the expected "
            f"totals of the {len(totals)} offers it tries, should the cheaper be taken first"
        )
    else:
        lines.append("range     one qualifying offer: if it is taken, the job waits for another")
    lines.append(budget)
    if best.expected_total_usd > price.budget_usd:
        lines.append(
            f"warning   the expected total is over the budget: the job would be stopped at "
            f"{output.usd(price.budget_usd)} before it ends"
        )
    if price.startup_cost_usd > price.budget_usd:
        lines.append(
            f"warning   the budget does not cover start-up and one checkpoint interval "
            f"({output.usd(price.startup_cost_usd)}): no host would be rented"
        )
    return [visible(line, keep_newlines=False) for line in lines]


# --- the question -----------------------------------------------------------------------------


def should_ask(args: argparse.Namespace, stdin: TextIO) -> bool:
    return not (args.yes or args.json) and stdin.isatty()


def confirmed(stdin: TextIO, stderr: TextIO) -> bool:
    """Ask on stderr, read one line: only `y` or `yes` is a yes (Enter and Ctrl-D are no)."""
    stderr.write(QUESTION)
    stderr.flush()
    answer = stdin.readline()
    if not answer:  # Ctrl-D: end the prompt's line
        stderr.write("\n")
    return answer.strip().lower() in YES_ANSWERS


# --- the flow ---------------------------------------------------------------------------------


class SubmitProgress:
    """How far a submit has got, and its SIGINT handler, which says what Ctrl-C leaves behind
    at each point (module docstring) by raising `Interrupted` with it."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.code_state = "no code uploaded"
        self.sending = False  # POST /jobs is out: the job may be stored
        self.held = False  # a Ctrl-C came while sending: say which job once the reply is in
        self.view: Mapping[str, Any] | None = None  # the reply: the job is stored

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        if self.view is not None:
            raise Interrupted(stored_message(self.view))
        if not self.sending:
            raise Interrupted(f"{NOTHING_STORED}; {self.code_state}")
        if self.held:
            raise Interrupted(
                "the job may have been stored: `tether jobs` lists it and `tether cancel JOB` "
                f"stops it (Idempotency-Key {self.key})"
            )
        self.held = True
        sys.stderr.write(
            "tether: waiting for the API's reply to say which job was stored "
            "(Ctrl-C again to leave without knowing)\n"
        )
        sys.stderr.flush()

    def stored(self, view: Mapping[str, Any]) -> None:
        """The reply is in; a Ctrl-C held while it was awaited ends the command now."""
        self.view = view
        self.sending = False
        if self.held:
            raise Interrupted(stored_message(view))


@contextlib.contextmanager
def interrupts(key: str) -> Iterator[SubmitProgress]:
    """`SubmitProgress` as the SIGINT handler for the block (in the main thread, the one that
    receives signals; elsewhere Ctrl-C stays a plain KeyboardInterrupt)."""
    progress = SubmitProgress(key)
    if threading.current_thread() is not threading.main_thread():
        yield progress
        return
    previous = signal.signal(signal.SIGINT, progress)
    try:
        yield progress
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass
class Submitted:
    reply: ApiReply
    code_line: str | None


def submit_job(
    args: argparse.Namespace,
    job: JobSpec,
    *,
    progress: SubmitProgress,
    where: code_ship.CodeDir | None,
    archive: Packed | None,
    connect: Callable[[argparse.Namespace], TetherApi],
) -> Submitted:
    """Price, ask, upload the code, `POST /jobs`: what `tether submit` does after validating
    and packing, inside `interrupts` (module docstring for the question and for Ctrl-C)."""
    if not args.json:
        price = submit_price(job, offers_path=args.offers, local=args.local)
        if price.skipped_records:
            output.warn(
                f"skipped {price.skipped_records} offer record(s) in {args.offers} that do "
                "not parse"
            )
        for line in price_lines(price):
            sys.stderr.write(line + "\n")
        if should_ask(args, sys.stdin) and not confirmed(sys.stdin, sys.stderr):
            raise Notice("not submitted (declined): no code uploaded, no job stored", EXIT_FAILURE)
    with connect(args) as api:
        spec = job.model_dump(mode="json")
        code_line = None
        if where is not None and archive is not None:
            progress.code_state = "the code upload was cut off (an incomplete upload is not stored)"
            spec, uploaded = code_ship.ship(api, job, where, archive, quiet=args.json)
            code_line = code_ship.describe(archive, uploaded)
            progress.code_state = (
                f"the code archive (sha256 {archive.sha256[:12]}…) stays in the bucket under "
                "code/: uploads are kept, and a submit of the same code skips the upload"
            )
        progress.sending = True
        reply = api.submit(spec, progress.key)
        progress.stored(reply.body)
    return Submitted(reply, code_line)


def stored_message(view: Mapping[str, Any]) -> str:
    job_id = visible(str(view.get("job_id")), keep_newlines=False)
    state = visible(str(view.get("state")), keep_newlines=False)
    return (
        f"job {job_id} was submitted ({state}) and will rent a host: `tether cancel {job_id}` "
        "stops it"
    )


__all__ = [
    "SubmitPrice",
    "SubmitProgress",
    "Submitted",
    "add_arguments",
    "confirmed",
    "interrupts",
    "price_lines",
    "should_ask",
    "submit_job",
    "submit_price",
]
