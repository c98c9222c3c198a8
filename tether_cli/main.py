"""`tether`: the user's command line.

Each command is a module with `register(subparsers)`, which adds its sub-parser and sets
`handler` to a `run(args) -> int` function. Later commands (`submit`, `jobs`, `status`, `demo`,
`local`, …) join by adding their module to `COMMANDS`.

Nothing here prints a traceback: argument mistakes exit 2 with one line, `CliError`s exit with
their own code, and anything unexpected is reported in one line with exit 1. Ctrl-C exits 130
with one line, `tether: interrupted` (a command that leaves something behind, as `submit` can,
says what), also while the commands are still being imported. A reader that leaves early
(`tether logs JOB | head`) ends the command quietly with 141, as `yes | head` ends `yes`: no
traceback, no "Exception ignored" when Python flushes stdout at exit.
"""

# ruff: noqa: E402 (the imports of the commands come after the Ctrl-C guard below)
from __future__ import annotations

import os
import select
import signal
import threading
from types import FrameType


def _interrupted_while_loading(_signum: int, _frame: FrameType | None) -> None:
    """Ctrl-C before any command has started (the imports below take a second): nothing to
    undo, so one line and out."""
    os.write(2, b"tether: interrupted\n")
    os._exit(130)


# Python's own handler would raise KeyboardInterrupt out of the imports: a long traceback.
# (Left alone when SIGINT is ignored, as a shell starts background jobs, or handled already.)
_SIGINT_BEFORE = signal.getsignal(signal.SIGINT)
_LOADING_IN_MAIN_THREAD = (
    threading.current_thread() is threading.main_thread()
    and _SIGINT_BEFORE is signal.default_int_handler
)
if _LOADING_IN_MAIN_THREAD:
    signal.signal(signal.SIGINT, _interrupted_while_loading)

import argparse
import importlib.metadata
import sys
from collections.abc import Callable
from types import ModuleType
from typing import NoReturn

from tether_cli import demo, deploy, download, jobs, local, output, plan, rehearse, ssh, validate
from tether_cli.aws_context import aws_failure

if _LOADING_IN_MAIN_THREAD:
    signal.signal(signal.SIGINT, _SIGINT_BEFORE)

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
    try:
        parser = build_parser()
    except Exception as exc:  # the commands' modules load the AWS SDK, which reads its config
        failure = aws_failure(exc)
        output.error(failure.message)
        return failure.exit_code
    try:
        args = parser.parse_args(argv)
        handler: Handler | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(sys.stderr)
            return output.EXIT_USAGE
        code = handler(args)
        sys.stdout.flush()  # here, not at exit: a reader that has left is handled below
        return code
    except UsageError as exc:
        output.error(f"{exc.message} (see `{exc.prog} --help`)")
        return output.EXIT_USAGE
    except output.Notice as exc:
        output.notice(exc.message)
        for line in exc.details:
            output.error_detail(line)
        return exc.exit_code
    except output.CliError as exc:
        output.error(exc.message)
        for line in exc.details:
            output.error_detail(line)
        return exc.exit_code
    except SystemExit as exc:  # --help and --version exit through argparse
        return exc.code if isinstance(exc.code, int) else output.EXIT_USAGE
    except KeyboardInterrupt as exc:
        output.notice(exc.message if isinstance(exc, output.Interrupted) else "interrupted")
        return output.EXIT_INTERRUPTED
    except BrokenPipeError as exc:
        if not _silence_closed_outputs():
            output.error(f"unexpected BrokenPipeError: {exc}")  # not our output's reader
            return output.EXIT_FAILURE
        return output.EXIT_CLOSED_PIPE
    except ConnectionResetError as exc:
        output.error(f"the connection was reset by the other side ({exc}); try again")
        return output.EXIT_FAILURE
    except Exception as exc:
        output.error(f"unexpected {type(exc).__name__}: {exc}")
        return output.EXIT_FAILURE


def closed_outputs() -> list[int]:
    """Which of stdout (1) and stderr (2) are pipes or sockets whose reader has gone (poll
    reports an error on the writing end)."""
    if not hasattr(select, "poll"):  # Windows: assume the broken pipe was ours
        return [1, 2]
    gone = []
    for fd in (1, 2):
        poller = select.poll()
        try:
            poller.register(fd, select.POLLOUT)
            events = poller.poll(0)
        except (OSError, ValueError):
            continue
        if any(mask & (select.POLLERR | select.POLLHUP) for _fd, mask in events):
            gone.append(fd)
    return gone


def _silence_closed_outputs() -> bool:
    """Point every output whose reader left at /dev/null (so nothing more is written to it, and
    Python's flush at exit finds nothing to complain about); False when none had."""
    gone = closed_outputs()
    if not gone:
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in gone:
        os.dup2(devnull, fd)
    os.close(devnull)
    return True


if __name__ == "__main__":
    sys.exit(main())
