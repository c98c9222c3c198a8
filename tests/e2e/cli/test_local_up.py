"""`tether local up` as a person runs it: the terminal shows the jobs' timeline, the functions'
logs (JSON lines, EMF metrics) go to files under the root, and Ctrl-C leaves no process."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import SIGNED, example_code, tiny_spec
from tests.paths import ROOT

pytestmark = pytest.mark.slow

TRAIN = "python tiny_train.py --steps 150 --checkpoint-every 50 --step-seconds 0.02"


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


def _workers_of(pid: int) -> list[int]:
    """Live Lambda worker processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if stat[0] != "Z" and int(stat[1]) == pid and b"tether_local.aws.lambda_worker" in cmdline:
            found.append(int(entry.name))
    return found


def test_local_up_shows_the_timeline_and_logs_the_functions_to_files(tmp_path: Path) -> None:
    root = tmp_path / "root"
    env = {**os.environ, "TETHER_LOCAL_STATE": str(tmp_path / "local-stack.json")}
    argv = [
        sys.executable, "-m", "tether_cli.main", "local", "up", "--port", "0",
        "--root", str(root), "--monitor-interval", "1", "--startup", "0.5", "--offers", "50",
    ]  # fmt: skip
    stderr = (tmp_path / "stderr.txt").open("w")
    process = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
    )
    terminal = Terminal(process)
    try:
        terminal.wait_for("serving", timeout_s=180)
        api = terminal.wait_for("API: ", 1).split()[1]
        logs = Path(terminal.wait_for("Logs: ", 1).split()[1]).parent
        spec = tiny_spec(name="watched", run=TRAIN, code=example_code(api))
        created = httpx.post(f"{api}/jobs", json=spec, headers=SIGNED, timeout=60)
        assert created.status_code == 201, created.text
        job_id = created.json()["job_id"]
        for kind in ("submitted", "rented", "generation 1 training", "job ended FINISHED"):
            assert job_id in terminal.wait_for(kind, timeout_s=120)
        workers = _workers_of(process.pid)
        assert workers, "each execution environment is a process of the stack"
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
            stderr.close()
    assert process.returncode == 0, (tmp_path / "stderr.txt").read_text()
    terminal.wait_for("stopped", timeout_s=10)

    # The terminal: the timeline, never a function's JSON log line or metrics.
    assert not [line for line in terminal.lines if line.lstrip().startswith("{")]
    # The files: each function's own log, JSON lines and EMF included.
    assert logs == root / "logs"
    by_function = {path.name: path.read_text() for path in logs.glob("*.log")}
    monitor = next(text for name, text in by_function.items() if "Monitor" in name)
    lifecycle = next(text for name, text in by_function.items() if "Lifecycle" in name)
    records = [json.loads(line) for line in monitor.splitlines() if line.startswith("{")]
    assert any(r.get("message") == "monitor run" for r in records)
    assert any("_aws" in r for r in records)  # an EMF metrics blob
    assert job_id in lifecycle and "START RequestId: " in lifecycle
    assert not [pid for pid in workers if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"
