"""`tether validate JOB.yaml`: check a job spec without touching any account."""

from __future__ import annotations

import argparse
from typing import Any

from functions.domain.jobspec import JobSpec, SpecError, load_job_file
from functions.domain.secrets import token_warnings
from tether_cli import code_ship
from tether_cli.output import EXIT_OK, EXIT_USAGE, CliError, warn


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check a job spec and print every problem",
        description="Check a job spec. Exit 0 if it is valid; otherwise print every problem "
        "as `path: reason` and exit 2.",
    )
    parser.add_argument("job", metavar="JOB.yaml", help="the job spec (YAML or JSON)")
    parser.set_defaults(handler=run)


def load_job(path: str) -> JobSpec:
    """The job at `path`, or a CliError (exit 2) listing every problem as `path: reason`.
    An `env` value that looks like a credential draws a warning on stderr (never an error)."""
    try:
        job = load_job_file(path)
    except SpecError as exc:
        errors = exc.errors
        if len(errors) == 1 and errors[0].path == path:
            # The file itself is the problem (missing, unreadable, YAML syntax): one line.
            raise CliError(str(errors[0]), EXIT_USAGE) from None
        noun = "problem" if len(errors) == 1 else "problems"
        raise CliError(
            f"{path} is not a valid job spec ({len(errors)} {noun}):",
            EXIT_USAGE,
            details=[str(e) for e in errors],
        ) from None
    for line in token_warnings(job.env):
        warn(line)
    return job


def summary(job: JobSpec) -> str:
    """One line that says what the spec asks for, so a typo in a value is easy to spot."""
    res = job.resources
    if not res.gpu_names:
        gpus = "any GPU"
    elif len(res.gpu_names) <= 3:
        gpus = " | ".join(res.gpu_names)
    else:
        gpus = " | ".join(res.gpu_names[:3]) + f" | +{len(res.gpu_names) - 3} more"
    parts = [f"{res.gpu_count}x {gpus}"]
    if res.min_gpu_ram_gb:
        parts.append(f"≥ {res.min_gpu_ram_gb:g} GB GPU RAM")
    on = f" on {job.reference_gpu}" if job.reference_gpu is not None else ""
    parts.append(f"{job.expected_hours:g} h expected{on}")
    if job.total_steps is not None:
        parts.append(f"{job.total_steps} steps")
    if res.max_usd_per_hour is not None:
        parts.append(f"≤ ${res.max_usd_per_hour:g}/h")
    if res.market != "on-demand":
        parts.append(
            f"{res.market} (bid min_bid + {res.bid_margin:.0%}, "
            f"{res.outbid_hazard_per_hour:g} outbids/h expected)"
        )
    parts.append(f"budget ${job.budget_usd:g}")
    return f"job {job.name!r}: " + ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    job = load_job(args.job)
    where = code_ship.code_dir(job, args.job, None)
    tree = code_ship.checked_tree(where) if where is not None else None  # exit 2 past a limit
    print(f"OK {args.job}: {summary(job)}")
    if where is not None and tree is not None:
        print(
            f"code: {where.path} would ship {tree.files} files, {tree.total_bytes} bytes "
            "before compression (packed and uploaded by `tether submit`)"
        )
        for line in tree.skipped:
            warn(line)
    return EXIT_OK
