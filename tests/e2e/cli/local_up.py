"""`tether local up` as a person runs it, in a terminal of its own: started in the background,
its timeline read line by line as it comes, stopped with Ctrl-C. What the e2e tests that drive
the stack from outside share."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.paths import ROOT

TETHER = (sys.executable, "-m", "tether_cli.main")  # this checkout's CLI, as `tether` runs it
# A stack that answers quickly: any free port, a monitor run a second, half-second start-ups.
QUICK_FLAGS = ("--port", "0", "--monitor-interval", "1", "--startup", "0.5", "--offers", "50")


class Terminal:
    """The stdout of a `tether local up` process, line by line, as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert process.stdout is not None
        stdout = process.stdout
        threading.Thread(target=self._pump, args=(stdout,), daemon=True).start()

    def _pump(self, stdout: object) -> None:
        for line in stdout:  # type: ignore[attr-defined]
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, what: str, timeout_s: float) -> str:
        """The first line (from the start) containing `what`; fails past `timeout_s` (a bound
        for a broken run, not a speed assertion)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for line in self.lines:
                if what in line:
                    return line
            try:
                got = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {what!r} within {timeout_s:g} s:\n" + self.text) from None
            if got is None:
                raise AssertionError(f"the process ended before {what!r}:\n" + self.text)
            self.lines.append(got)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass
class LocalUp:
    process: subprocess.Popen[str]
    terminal: Terminal
    stderr_file: Path

    @property
    def stderr(self) -> str:
        return self.stderr_file.read_text()


@contextmanager
def local_up(
    tether: Sequence[str],
    root: Path,
    env: Mapping[str, str],
    stderr_file: Path,
    stop_timeout_s: float = 60,
) -> Iterator[LocalUp]:
    """`<tether> local up --root <root>` with `QUICK_FLAGS`, its stderr to `stderr_file`;
    stopped by Ctrl-C on the way out (killed if it outlives `stop_timeout_s`), whatever the
    block raised. Its exit status is the caller's to check, once the block is done."""
    argv = [*tether, "local", "up", "--root", str(root), *QUICK_FLAGS]
    stderr = stderr_file.open("w")
    try:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=dict(env), stdout=subprocess.PIPE, stderr=stderr, text=True
        )
        try:
            yield LocalUp(process, Terminal(process), stderr_file)
        finally:
            process.send_signal(signal.SIGINT)  # Ctrl-C
            try:
                process.wait(timeout=stop_timeout_s)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=30)
    finally:
        stderr.close()
