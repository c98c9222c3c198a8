"""`tether submit | jobs | status | cancel | logs`: the job API from the command line.

Each command talks to the API found by `api_client.resolve_api_url` (`--local`, `TETHER_API_URL`
or the deployed stack's outputs, in the region of `--region` or the one rule of
`aws_context.resolve_region`), signed with the user's AWS credentials, or with `--local` the
local stack's own key (no AWS account needed). `--json` prints the
API's own document (for `logs`, one JSON object per segment line) for scripts.

What a host wrote (log segments, timeline messages, exit reasons, checkpoint paths) is printed
with its control characters shown, not obeyed (`tether_cli.terminal_text.visible`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from functions.domain.job import JobState
from functions.domain.jobspec import JobSpec
from tether_cli import code_ship, output, submit_plan
from tether_cli.api_client import (
    IDEMPOTENCY_KEY_PATTERN,
    ApiReply,
    TetherApi,
    resolve_api_url,
    target_flags,
)
from tether_cli.aws_context import region_argument
from tether_cli.env_flags import ENV_FLAG_HELP, with_env_flags
from tether_cli.job_status import ago, status_lines
from tether_cli.output import EXIT_FAILURE, EXIT_OK, CliError
from tether_cli.terminal_text import visible
from tether_cli.validate import load_job, summary

# What renting a marketplace host means for the data (the README says it too).
HOST_VISIBILITY = (
    "marketplace hosts can see everything on the machine (the host's operator has root on it): "
    "fine for public models and data and non-sensitive fine-tunes, not for regulated or secret "
    "data."
)

LOG_PAGE = 50
DEFAULT_FOLLOW_INTERVAL_S = 5.0


def connect(args: argparse.Namespace) -> TetherApi:
    """The API client for a command's `--local` / `--region` choice (api_client says as whom)."""
    return TetherApi(resolve_api_url(local=args.local, region=getattr(args, "region", None)))


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    submit = _add(
        subparsers,
        "submit",
        "validate a job spec locally, then submit it",
        "Validate JOB.yaml locally (exit 2 on any problem), then submit it. The request "
        "carries an Idempotency-Key, so a retried submit never creates a second job. "
        + HOST_VISIBILITY,
    )
    submit.add_argument("job", metavar="JOB.yaml", help="the job spec (YAML or JSON)")
    submit.add_argument(
        "--code",
        metavar="DIR",
        help="ship this directory as the job's code (overrides the spec's code.dir): packed "
        "honouring .gitignore and .tetherignore, uploaded, verified by every host",
    )
    submit.add_argument(
        "--idempotency-key",
        type=_idempotency_key,
        metavar="KEY",
        help="reuse a key to make re-running this command safe (default: a new random key)",
    )
    submit_plan.add_arguments(submit)
    submit.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help=ENV_FLAG_HELP
    )
    submit.set_defaults(handler=run_submit)

    jobs = _add(subparsers, "jobs", "list jobs, newest first", "List jobs, newest first.")
    jobs.add_argument(
        "--state",
        type=_state,
        metavar="STATE",
        help=f"only jobs in this state ({', '.join(s.value.lower() for s in JobState)})",
    )
    jobs.add_argument(
        "--limit", type=_bounded_int(1, 1000), default=50, metavar="N", help="at most N jobs"
    )
    jobs.set_defaults(handler=run_jobs)

    status = _add(
        subparsers,
        "status",
        "a job's state, host, spend, checkpoint, health and timeline",
        "Show a job: state, host, spend vs budget, last checkpoint, health and timeline.",
    )
    status.add_argument("job_id", metavar="JOB", help="the job id (from `tether submit`)")
    status.set_defaults(handler=run_status)

    cancel = _add(
        subparsers,
        "cancel",
        "stop a job and destroy its host",
        "Cancel a job: it stops, its host is destroyed, its checkpoints stay in R2. "
        "Safe to repeat while the job is stopping.",
    )
    cancel.add_argument("job_id", metavar="JOB", help="the job id")
    cancel.set_defaults(handler=run_cancel)

    logs = _add(
        subparsers,
        "logs",
        "print a job's training log (--follow to tail it)",
        "Print a job's training log from R2, across every host it ran on. --follow keeps "
        "printing new output, across host replacements, until the job ends.",
    )
    logs.add_argument("job_id", metavar="JOB", help="the job id")
    logs.add_argument("-f", "--follow", action="store_true", help="tail until the job ends")
    logs.add_argument(
        "--interval",
        type=_seconds,
        default=DEFAULT_FOLLOW_INTERVAL_S,
        metavar="S",
        help=f"seconds between polls with --follow (default {DEFAULT_FOLLOW_INTERVAL_S:g})",
    )
    logs.set_defaults(handler=run_logs)


def _add(
    subparsers: argparse._SubParsersAction[Any], name: str, help_: str, description: str
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help_, description=description
    )
    parser.add_argument(
        "--local", action="store_true", help="talk to `tether local up` instead of AWS"
    )
    parser.add_argument(
        "--region",
        type=region_argument,
        help="the AWS region of the deployed stack (default: AWS_REGION, else "
        "AWS_DEFAULT_REGION, else your AWS config's profile)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    return parser


# --- argument types (a bad value exits 2 with one line) ---------------------------------------


def _idempotency_key(text: str) -> str:
    if not IDEMPOTENCY_KEY_PATTERN.match(text):
        raise argparse.ArgumentTypeError("must be 1–128 characters of letters, digits, _ . : -")
    return text


def _state(text: str) -> str:
    try:
        return JobState(text.upper()).value
    except ValueError:
        known = ", ".join(s.value.lower() for s in JobState)
        raise argparse.ArgumentTypeError(f"unknown state {text!r} (one of {known})") from None


def _bounded_int(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0.1 and 3600 seconds, got {text}")
    return value


# --- submit -----------------------------------------------------------------------------------


def run_submit(args: argparse.Namespace) -> int:
    # exit 2 with every problem (the spec's, then --env's) before anything is sent
    job = with_env_flags(load_job(args.job), args.env)
    key = args.idempotency_key or f"cli-{uuid.uuid4()}"
    where = code_ship.code_dir(job, args.job, args.code)
    # Ctrl-C says what it leaves behind; the price, the question, the upload and the request
    # are tether_cli/submit_plan.py.
    with submit_plan.interrupts(key) as progress:
        # Packed before the API is called: a directory that cannot ship stores and uploads nothing.
        archive = code_ship.packed(where) if where is not None else None
        try:
            sent = submit_plan.submit_job(
                args, job, progress=progress, where=where, archive=archive, connect=connect
            )
        finally:
            if archive is not None:
                code_ship.cleanup(archive)
        return _print_submitted(args, job, key, sent.reply, sent.code_line)


def _print_submitted(
    args: argparse.Namespace, job: JobSpec, key: str, reply: ApiReply, code_line: str | None
) -> int:
    view = dict(reply.body)
    replayed = reply.headers.get("idempotent-replayed") == "true"
    if args.json:
        output.print_json({**view, "idempotency_key": key, "replayed": replayed})
        return EXIT_OK
    verb = "already submitted (same Idempotency-Key)" if replayed else "submitted"
    console = output.stdout_console()
    console.print(Text.assemble(f"{verb}: ", (str(view["job_id"]), "bold"), f" ({view['state']})"))
    console.print(f"plan: {summary(job)}")
    if code_line:
        console.print(code_line)
    console.print(
        "      the control plane ranks live Vast offers by full cost (`tether plan` shows the "
        "ranking now) and rents the best; `tether status` shows the host it chose"
    )
    flags = target_flags(args)
    console.print(
        f"next: tether status {view['job_id']}{flags}   ·   tether logs -f {view['job_id']}{flags}"
    )
    console.print(f"note: {HOST_VISIBILITY}")
    return EXIT_OK


# --- jobs -------------------------------------------------------------------------------------


JOBS_PAGE = 200  # jobs asked for per request (the API's largest page)


def read_jobs(
    api: Any,
    *,
    state: str | None,
    limit: int,
    on_request: Callable[[int, int], None] = lambda requests, found: None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Up to `limit` jobs, following the API's tokens; and the token to go on from (None: no
    more). Filtered by state, one request reads a bounded stretch of the history and may return
    few jobs or none with a token, so a rare state in a long history takes many requests:
    `on_request(requests made, jobs found)` is told after each."""
    found: list[dict[str, Any]] = []
    next_token: str | None = None
    requests = 0
    while len(found) < limit:
        page = api.list_jobs(
            state=state, limit=min(JOBS_PAGE, limit - len(found)), next_token=next_token
        )
        requests += 1
        found.extend(page.get("jobs") or [])
        next_token = page.get("next")
        on_request(requests, len(found))
        if not next_token:
            break
    return found, next_token


def run_jobs(args: argparse.Namespace) -> int:
    stderr = output.stderr_console()
    what = f"jobs in state {args.state}" if args.state else "jobs"
    with connect(args) as api:
        if not stderr.is_terminal:  # a script's stderr gets no progress line
            found, next_token = read_jobs(api, state=args.state, limit=args.limit)
        else:
            with stderr.status(f"reading the job list: {what}…") as status:

                def told(requests: int, count: int) -> None:
                    status.update(
                        f"reading the job list: {requests} request(s), {count} {what} so far…"
                    )

                found, next_token = read_jobs(
                    api, state=args.state, limit=args.limit, on_request=told
                )
    if args.json:
        output.print_json({"jobs": found, "next": next_token})
        return EXIT_OK
    if not found:
        stderr.print("no jobs" + (f" in state {args.state}" if args.state else ""))
        return EXIT_OK
    now = time.time()
    table = output.table(
        None,
        [
            ("JOB", "left"), ("STATE", "left"), ("SPENT", "right"), ("BUDGET", "right"),
            ("USED", "right"), ("GEN", "right"), ("UPDATED", "right"),
        ],
    )  # fmt: skip
    for job in found:
        spent, budget = float(job.get("spent_usd") or 0), float(job.get("budget_usd") or 0)
        table.add_row(
            visible(str(job["job_id"]), keep_newlines=False),
            visible(str(job["state"]), keep_newlines=False),
            output.usd(spent),
            output.usd(budget),
            f"{spent / budget:.0%}" if budget else "-",
            str(job.get("generation") or "-"),
            ago(job.get("updated_at"), now),
        )
    output.stdout_console().print(table)
    if next_token:
        stderr.print(f"(more jobs: raise --limit above {args.limit})")
    return EXIT_OK


# --- status -----------------------------------------------------------------------------------


def run_status(args: argparse.Namespace) -> int:
    with connect(args) as api:
        view = api.get_job(args.job_id)
    if args.json:
        output.print_json(view)
        return EXIT_OK
    for line in status_lines(view, time.time(), target_flags(args)):
        output.stdout_console().print(line)
    return EXIT_OK


# --- cancel -----------------------------------------------------------------------------------


def run_cancel(args: argparse.Namespace) -> int:
    with connect(args) as api:
        view = api.cancel_job(args.job_id)
    if args.json:
        output.print_json(view)
        return EXIT_OK
    output.stdout_console().print(
        f"cancel requested: {view['job_id']} is {view['state']}; its host is being destroyed "
        f"(`tether status {view['job_id']}{target_flags(args)}` shows when it has ended)"
    )
    return EXIT_OK


# --- logs -------------------------------------------------------------------------------------


def run_logs(args: argparse.Namespace) -> int:
    at_line_start = True
    with connect(args) as api:
        pieces = log_segments(api, args.job_id, follow=args.follow, interval_s=args.interval)
        for piece in pieces:
            if isinstance(piece, LogGap):
                if args.json:
                    record = {"generation": piece.generation, "missing": True}
                    sys.stdout.write(json.dumps({**record, "reason": piece.reason}) + "\n")
                else:  # in its place among the segments, on a line of its own
                    note = f"[tether] generation {piece.generation}: no log — {piece.reason}\n"
                    sys.stdout.write(
                        ("" if at_line_start else "\n") + visible(note, keep_newlines=True)
                    )
                    at_line_start = True
            else:
                segment, text = piece
                if args.json:
                    record = {k: segment[k] for k in ("name", "generation", "sequence")}
                    # ensure_ascii: every control character (C0, DEL, C1) is a \u escape.
                    sys.stdout.write(json.dumps({**record, "text": text}) + "\n")
                elif text:
                    sys.stdout.write(visible(text, keep_newlines=True))
                    at_line_start = text.endswith("\n")
            sys.stdout.flush()
    return EXIT_OK


@dataclass(frozen=True)
class LogGap:
    """A generation that is over with no log segment, and why (the API's `missing`)."""

    generation: int
    reason: str


def log_segments(
    api: TetherApi,
    job_id: str,
    *,
    follow: bool,
    interval_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[tuple[dict[str, Any], str] | LogGap]:
    """Every segment's text, in order, and in its place each generation that has no log
    (`LogGap`, once each); with `follow`, new ones too until the job has ended and a listing
    after that finds nothing new (the agent uploads its last segment before it reports the
    end)."""
    cursor: str | None = None
    refused_at: str | None = None
    said_missing: set[int] = set()
    while True:
        page = api.job_logs(job_id, after=cursor, limit=LOG_PAGE)
        gaps = sorted(
            (int(m["generation"]), str(m.get("reason") or "no reason given"))
            for m in page.get("missing") or []
            if int(m["generation"]) not in said_missing
        )
        refetch = False
        for segment in page.get("segments") or []:
            while gaps and gaps[0][0] < int(segment["generation"]):
                said_missing.add(gaps[0][0])
                yield LogGap(*gaps.pop(0))
            data = api.fetch(segment["url"])
            if data is None:  # the URL expired while we were busy: list again from here
                if refused_at == segment["name"]:  # a fresh URL failed too: not an expiry
                    raise CliError(
                        f"log segment {segment['name']} cannot be downloaded (its URL is refused)",
                        EXIT_FAILURE,
                    )
                refused_at, refetch = segment["name"], True
                break
            cursor = segment["name"]
            yield segment, data.decode("utf-8", errors="replace")
        if not refetch:
            for generation, reason in gaps:
                said_missing.add(generation)
                yield LogGap(generation, reason)
        if refetch or page.get("more"):
            continue
        if not follow or (page.get("ended") and not page.get("segments")):
            return
        if not page.get("ended"):  # once ended, the last listing needs no wait
            sleep(interval_s)
