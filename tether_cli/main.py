"""`tether`: the user's command line.

Each command is a module with `register(subparsers)`, which adds its sub-parser and sets
`handler` to a `run(args) -> int` function. Later commands (`submit`, `jobs`, `status`, `demo`,
`local`, …) join by adding their module to `COMMANDS`.

Nothing here prints a traceback: argument mistakes exit 2 with one line, `CliError`s exit with
their own code, and anything unexpected is reported in one line with exit 1.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Callable
from types import ModuleType
from typing import NoReturn

from tether_cli import demo, deploy, download, jobs, local, output, plan, rehearse, ssh, validate

COMMANDS: tuple[ModuleType, ...] = (
    validate,
    plan,
    jobs,
    download,
    ssh,
    deploy,
    local,
    demo,
    rehearse,
)

Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    def __init__(self, message: str, prog: str) -> None:
        super().__init__(message)
        self.message = message
        self.prog = prog


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a mistake raises UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)


def version() -> str:
    """The installed package's version (pyproject.toml's, as pip recorded it)."""
    try:
        return importlib.metadata.version("tether")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, never installed
        return "unknown (not installed)"


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="tether",
        description="Keep fine-tuning jobs alive on cheap, unreliable Vast.ai hosts.",
    )
    parser.add_argument("--version", action="version", version=f"tether {version()}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", dest="command")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        handler: Handler | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(sys.stderr)
            return output.EXIT_USAGE
        return handler(args)
    except UsageError as exc:
        output.error(f"{exc.message} (see `{exc.prog} --help`)")
        return output.EXIT_USAGE
    except output.CliError as exc:
        output.error(exc.message)
        for line in exc.details:
            output.error_detail(line)
        return exc.exit_code
    except SystemExit as exc:  # --help and --version exit through argparse
        return exc.code if isinstance(exc.code, int) else output.EXIT_USAGE
    except KeyboardInterrupt:
        output.error("interrupted")
        return 130
    except Exception as exc:
        output.error(f"unexpected {type(exc).__name__}: {exc}")
        return output.EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
