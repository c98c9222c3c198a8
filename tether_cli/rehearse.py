"""`tether rehearse JOB.yaml`: the job's own command on the local stack, its host killed at the
steps you choose (`--kill-at-step 40,120`) or at random (`--kills N --seed S`), judged against an
uninterrupted run of the same command (`tether_local.demo.rehearse`, docs/rehearse.md).

A spec with `code.dir` is packed once, as `tether submit` packs it (.gitignore and .tetherignore
honoured; a directory that cannot ship exits 2): the uninterrupted run runs in that archive
extracted, and the rehearsal's hosts download the same archive, so both run exactly the code a
real submit would ship.

`--env NAME=VALUE` (repeatable) sets a variable of the job's `env` for the rehearsal only: point
a large model's script at a small variant (`--env MODEL=tiny-llama`) without editing the spec.
Prints a table of the kills (the step asked, the step the host was known to have reached, the
step training resumed at, the steps lost: a lower bound where it is one) and whether the final
checkpoint is identical, file by file, to the uninterrupted run's; `--json` prints the report as
one JSON object on stdout (the timeline then goes to stderr). Exit 0 when identical, 1 when not
(or when the rehearsal could not be driven to its end), 2 on bad input, the field named.
The differences name files the job wrote: printed with control characters shown
(`tether_cli.terminal_text`).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tether_cli import output
from tether_cli.demo import _quiet_functions, timeline_printer
from tether_cli.output import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError, import_local
from tether_cli.terminal_text import json_visible, visible
from tether_cli.validate import load_job

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "rehearse",
        help="kill your job's host on the local stack and check the resumed result",
        description="Run the job's command on the local stack on this machine, kill its host "
        "at the steps given (or at random), and check that the resumed run's final checkpoint "
        "is identical to an uninterrupted run's. Exit 0 when identical, 1 when not, 2 on bad "
        "input. Needs the [local] extra.",
    )
    parser.add_argument("job", metavar="JOB.yaml", help="the job spec (YAML or JSON)")
    kills = parser.add_mutually_exclusive_group()
    kills.add_argument(
        "--kill-at-step",
        metavar="STEPS",
        help="comma-separated steps to kill the host at, increasing (e.g. 40,120)",
    )
    kills.add_argument(
        "--kills", type=int, metavar="N", help="kill the host N times at random steps (default 1)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="the seed of the random kill steps (default 0)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a variable of the job's env for the rehearsal only (repeatable)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the report as one JSON object on stdout"
    )
    parser.set_defaults(handler=run)


def parse_steps(text: str) -> list[int]:
    """`40,120` → [40, 120]; CliError (exit 2) naming --kill-at-step otherwise."""
    steps = []
    for part in text.split(","):
        try:
            steps.append(int(part.strip()))
        except ValueError:
            raise CliError(
                f"--kill-at-step: {part.strip()!r} is not a step number (e.g. 40,120)"
            ) from None
    return steps


def parse_env(items: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise CliError(f"--env: {item!r} is not NAME=VALUE (a variable name, then =)")
        found[name] = value
    return found


def run(args: argparse.Namespace) -> int:
    kill_at = parse_steps(args.kill_at_step) if args.kill_at_step is not None else None
    env = parse_env(args.env)
    spec = load_job(args.job)
    import_local("rehearse")
    from tether_cli.local_ship import SHIPPER
    from tether_local.demo import DemoError, demo_stack_config
    from tether_local.demo.rehearse import RehearseInputError, prepare, rehearse
    from tether_local.hosts.images import UnknownImage, recipe_for
    from tether_local.stack import LocalStack

    try:
        recipe_for(spec.image)
    except UnknownImage as exc:
        raise CliError(f"image: {exc}", EXIT_USAGE) from None
    out = sys.stdout
    timeline = timeline_printer(output.console(sys.stderr if args.json else out))
    try:
        with SHIPPER.pack(spec, Path(args.job)) as code:  # exit 2 when it cannot ship
            plan = prepare(
                spec,
                env_overrides=env,
                kill_at=kill_at,
                kills=args.kills,
                seed=args.seed,
                code=code,
                timeline=timeline,
            )
            with _quiet_functions(), LocalStack(demo_stack_config()) as stack:
                report = rehearse(
                    spec, plan, stack=stack, shipper=SHIPPER, code=code, timeline=timeline
                )
    except RehearseInputError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except DemoError as exc:
        raise CliError(f"rehearse: {exc}", EXIT_FAILURE) from None
    if args.json:
        out.write(json_visible(report.model_dump_json()) + "\n")
    else:
        print_report(output.console(out), report)
    return EXIT_OK if report.identical else EXIT_FAILURE


def print_report(console: Console, report: Any) -> None:
    table = Table(title=Text(f"rehearsal of {report.job}: kills"), title_justify="left")
    for column in ("asked at step", "killed at step", "resumed at step", "steps lost"):
        table.add_column(column, justify="right")
    table.add_column("first step after", justify="right")
    for kill in report.kills:
        incident = kill.incident
        lost = "-" if incident.lost_steps is None else str(incident.lost_steps)
        if incident.lost_steps is not None and incident.lost_steps_lower_bound:
            lost = f"≥ {lost}"
        resumed = "-" if kill.resumed_step is None else str(kill.resumed_step)
        after = "-" if incident.resumed_after_s is None else f"{incident.resumed_after_s:.1f} s"
        table.add_row(str(kill.asked_step), f"≥ {kill.killed_at_step}", resumed, lost, after)
    console.print(table)
    console.print(
        Text(
            f"job {report.job_id} ended {report.final_state}; the uninterrupted run ends at "
            f"step {report.reference_step}, the rehearsal's final checkpoint is at step "
            f"{report.compared_step if report.compared_step is not None else '-'}"
        )
    )
    for difference in report.differences:  # a failed job's output tail keeps its lines
        for line in difference.split("\n"):
            console.print(Text(f"  {visible(line, keep_newlines=False)}"))
    for line in report.not_compared:
        console.print(Text(f"  not compared: {visible(line, keep_newlines=False)}"))
    if report.identical:
        console.print(
            Text("final checkpoint: identical to an uninterrupted run", style="bold green")
        )
    else:
        console.print(
            Text(
                "final checkpoint: NOT identical to an uninterrupted run (does the script save "
                "and restore its full state: weights, optimizer, RNG, data order?)",
                style="bold red",
            )
        )
