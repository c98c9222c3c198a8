"""`tether demo [--scenario NAME] [--json]`: the local stack, a deterministic CPU job, faults.

Starts the local stack, runs one scenario of `tether_local.demo` with a live timeline, and ends
with a summary: each incident (detection time, time to the first training step after the restore
and how much of it the new process took to its first step, steps lost as a lower bound), the
spend at the simulated prices, whether the final weights are identical to an uninterrupted run,
and every invariant (docs/architecture.md#invariants) checked from stored state. `--json` prints the
summary as one JSON object on stdout (the timeline then goes to stderr). Exit 0 only if every
invariant holds and the job ended as the scenario expects; 1 otherwise.

The timeline and the summary carry what the hosts wrote (event messages, the log tail, file
names in the evidence): printed with control characters shown (`tether_cli.terminal_text`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tether_cli import output
from tether_cli.output import EXIT_FAILURE, EXIT_OK, LOCAL_EXTRA_HINT, CliError, import_local
from tether_cli.terminal_text import json_visible, visible


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    # The scenarios live in the local stack, an install extra: the parser is built without it.
    try:
        from tether_local.demo import DEFAULT_SCENARIO, SCENARIOS
    except ImportError:
        scenarios, default = f"(the scenarios {LOCAL_EXTRA_HINT})", None
    else:
        scenarios = "; ".join(f"{s.name}: {s.description}" for s in SCENARIOS.values())
        default = DEFAULT_SCENARIO
    parser = subparsers.add_parser(
        "demo",
        help="run a fault scenario on the local stack and check every invariant",
        description="Run a deterministic CPU training job on the local stack, inject a "
        "scenario's faults, and check the invariants (docs/architecture.md#invariants) from stored "
        "state. Scenarios: " + scenarios,
    )
    parser.add_argument(
        "--scenario",
        default=default,
        metavar="NAME",
        help="the scenario to run (default %(default)s)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the summary as one JSON object on stdout"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import_local("demo")
    from tether_cli.local_ship import SHIPPER
    from tether_local.demo import SCENARIOS, DemoError, run_scenario

    if args.scenario not in SCENARIOS:
        raise CliError(f"--scenario: {args.scenario!r} is not one of {', '.join(SCENARIOS)}")
    out = sys.stdout
    timeline = timeline_printer(output.console(sys.stderr if args.json else out))
    try:
        with _quiet_functions():
            summary = run_scenario(args.scenario, shipper=SHIPPER, timeline=timeline)
    except DemoError as exc:
        raise CliError(f"demo: {exc}", EXIT_FAILURE) from None
    if args.json:
        out.write(json_visible(summary.model_dump_json()) + "\n")
    else:
        _print_summary(output.console(out), summary)
    return EXIT_OK if summary.ok else EXIT_FAILURE


_STYLES = {"dead": "red", "hung": "red", "crashed": "red", "failed": "red", "finished": "green"}


def timeline_printer(console: Console) -> Any:
    """A `tether_local.demo` Timeline that prints each line: elapsed time, source, text (the
    demo's, `tether rehearse`'s and `tether local up`'s); source and text as `visible` shows
    them, on one line."""

    def timeline(elapsed_s: float, source: str, text: str) -> None:
        style = "bold red" if text.startswith(("FAULT", "ZOMBIE")) else _STYLES.get(source, "")
        shown_source = visible(source, keep_newlines=False)
        line = Text.assemble(
            (f"{elapsed_s:6.1f}s", "dim"),
            " ",
            (f"{shown_source:>12}", "cyan"),
            " ",
            visible(text, keep_newlines=False),
            style=style,
        )
        console.print(line)

    return timeline


MOTO_INTERPRETER_LOGGER = "moto.stepfunctions.parser"


@contextlib.contextmanager
def _quiet_functions() -> Any:
    """The in-process handlers log JSON lines and print EMF metrics to stdout; the demo shows
    its own timeline instead. moto's Step Functions interpreter logs every failed execution as
    an error with its whole state; the timeline says which step failed and why."""
    from functions.observability import logger

    previous = logger.log_level
    logger.setLevel(logging.WARNING)
    interpreter = logging.getLogger(MOTO_INTERPRETER_LOGGER)
    interpreter_level = interpreter.level
    interpreter.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()) as sink:
            yield sink
    finally:
        logger.setLevel(previous)
        interpreter.setLevel(interpreter_level)


def _print_summary(console: Console, summary: Any) -> None:
    incidents = Table(title=f"scenario {summary.scenario}: incidents", title_justify="left")
    columns = ("kind", "detected after", "first step after", "(process start → step)")
    for column in (*columns, "steps lost"):
        incidents.add_column(column, justify="left" if column == "kind" else "right")
    for incident in summary.incidents:
        lost = "-" if incident.lost_steps is None else str(incident.lost_steps)
        incidents.add_row(
            visible(incident.kind, keep_newlines=False),
            _seconds(incident.detected_after_s),
            _seconds(incident.resumed_after_s),
            _seconds(incident.first_step_after_start_s),
            f"≥ {lost}"
            if incident.lost_steps is not None and incident.lost_steps_lower_bound
            else lost,
        )
    console.print(incidents)
    console.print(
        f"job {summary.job_id} ended {summary.final_state} (expected {summary.expected_state}); "
        f"spent ${summary.spend_usd:.6f} of ${summary.budget_usd:g} at simulated prices"
    )
    checks = Table(title="invariants (docs/architecture.md#invariants)", title_justify="left")
    checks.add_column("invariant")
    checks.add_column("holds")
    checks.add_column("evidence")
    for name, ok in {**summary.invariants, **summary.scenario_checks}.items():
        detail = summary.invariant_details.get(name, "scenario check")
        checks.add_row(
            visible(name, keep_newlines=False),
            Text("yes", style="green") if ok else Text("NO", style="red"),
            visible(detail, keep_newlines=True),
        )
    console.print(checks)
    if summary.log_tail:
        console.print("last host's log tail:", style="bold")
        console.print(visible(summary.log_tail, keep_newlines=True))
    step = summary.compared_step
    if summary.identical_to_uninterrupted:
        console.print(
            f"final weights at step {step}: identical to an uninterrupted run", style="bold green"
        )
    else:
        console.print(
            f"final weights at step {step}: NOT identical to an uninterrupted run", style="bold red"
        )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"
