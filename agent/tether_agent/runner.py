"""The user's training command: its own process group, output teed to the console and a
rotated log file, signals forwarded to the whole group.

With `orphan_grace_s` the command runs under the guard (`guard.py`), the leader of its group:
if the agent dies, the guard stops the training (SIGTERM, the grace, SIGKILL) and nothing of it is
left running. A SIGKILL reaches every process below the command, also those a launcher started
out of the group (torchrun's workers, each in a session of its own)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

from tether_agent.guard import descendants, kill_tree

log = logging.getLogger(__name__)
GUARD = Path(__file__).with_name("guard.py")


class RotatingLog:
    """Append-only byte log rotated at `max_bytes` into `<name>.1 … <name>.<backups>`."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = path
        self._max_bytes = max_bytes
        self._backups = backups
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO = path.open("ab")

    def write(self, data: bytes) -> None:
        if self._file.tell() + len(data) > self._max_bytes and self._file.tell() > 0:
            self._rotate()
        self._file.write(data)
        self._file.flush()

    def _rotate(self) -> None:
        self._file.close()
        for index in range(self._backups, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{index}")
            newer = self.path.with_name(f"{self.path.name}.{index - 1}") if index > 1 else self.path
            if newer.exists():
                if index == self._backups:
                    older.unlink(missing_ok=True)
                newer.replace(older)
        if self._backups == 0:
            self.path.unlink(missing_ok=True)
        self._file = self.path.open("ab")

    def close(self) -> None:
        self._file.close()


class LogSink(Protocol):
    """Where the training output goes besides the console (a RotatingLog, a TeeLog)."""

    def write(self, data: bytes) -> None: ...


class TrainingProcess:
    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_file: LogSink,
        console: BinaryIO | None = None,
        *,
        orphan_grace_s: float | None = None,
        orphan_log: Path | None = None,
        cwd: Path | None = None,
    ) -> None:
        self._argv = list(argv)
        self._cwd = cwd
        self._orphan_grace_s = orphan_grace_s
        self._orphan_log = orphan_log
        self._output: BinaryIO | None = None
        self._env = dict(env)
        self._log_file = log_file
        self._console = console if console is not None else sys.stdout.buffer
        self._process: subprocess.Popen[bytes] | None = None
        self._pump: threading.Thread | None = None
        self.exited = threading.Event()

    def start(self) -> None:
        log.info("starting training: %s", " ".join(self._argv))
        read_fd, write_fd = os.pipe()  # stdout and stderr together
        argv = self._argv
        keep: tuple[int, ...] = ()
        if self._orphan_grace_s is not None:
            # The guard keeps a copy of the read end, to drain the output if the agent dies.
            argv = [
                sys.executable, "-I", str(GUARD),
                "--agent-pid", str(os.getpid()),
                "--grace-s", repr(float(self._orphan_grace_s)),
                "--drain-fd", str(read_fd),
                *(["--log", str(self._orphan_log)] if self._orphan_log else []),
                "--", *self._argv,
            ]  # fmt: skip
            keep = (read_fd,)
        try:
            self._process = subprocess.Popen(
                argv,
                env=self._env,
                cwd=self._cwd,
                stdout=write_fd,
                stderr=write_fd,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: signals reach every worker
                pass_fds=keep,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self._output = os.fdopen(read_fd, "rb")
        self._pump = threading.Thread(target=self._pump_output, name="training-output", daemon=True)
        self._pump.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _pump_output(self) -> None:
        assert self._process is not None and self._output is not None
        for line in iter(self._output.readline, b""):
            try:
                self._console.write(line)
                self._console.flush()
            except (OSError, ValueError):
                pass  # a closed console must not stop training
            self._log_file.write(line)
        self._output.close()
        self._process.wait()
        self.exited.set()

    def poll(self) -> int | None:
        if not self.exited.is_set():
            return None
        assert self._process is not None
        return exit_status(self._process.returncode)

    def wait(self, timeout: float | None = None) -> int | None:
        if not self.exited.wait(timeout):
            return None
        return self.poll()

    def signal(self, signum: int) -> None:
        if self._process is None or self.exited.is_set():
            return
        self._killpg(signum)

    def _killpg(self, signum: int) -> None:
        assert self._process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signum)

    def terminate(self, grace_s: float) -> int:
        """SIGTERM the group, wait `grace_s`, then SIGKILL it; returns the exit status."""
        self.signal(signal.SIGTERM)
        code = self.wait(grace_s)
        assert self._process is not None
        if code is None:
            log.warning("training ignored SIGTERM for %.0fs: SIGKILL", grace_s)
            kill_tree(self._process.pid, descendants(self._process.pid))
            code = self.wait(30)
        # Workers the group leader left behind must not survive it.
        self._killpg(signal.SIGKILL)
        return code if code is not None else 128 + signal.SIGKILL


def exit_status(returncode: int) -> int:
    """A signal death becomes 128+N, as a shell reports it."""
    return 128 - returncode if returncode < 0 else returncode
