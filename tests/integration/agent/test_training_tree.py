"""A launcher that starts its workers out of the training's process group (torchrun puts each
in a session of its own) leaves none of them running once the agent stops the training, nor
once the agent dies: the final SIGKILL reaches every process below the command
(`guard.descendants`), not only the group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tether_agent.guard import descendants
from tether_agent.runner import GUARD, TrainingProcess

# As torchrun past its own grace: workers in sessions of their own, SIGTERM ignored by all.
LAUNCHER = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = [sys.executable, "-c",
          "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
workers = [subprocess.Popen(worker, start_new_session=True) for _ in range(2)]
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(" ".join(str(w.pid) for w in workers))
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


class _Log:
    def write(self, data: bytes) -> None:
        pass


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, session, …"""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if (fields := _stat(pid)) is not None and fields[0] != "Z"]


def _workers(pids_file: Path) -> list[int]:
    deadline = time.monotonic() + 60
    while not pids_file.exists():
        assert time.monotonic() < deadline, "the launcher started no workers"
        time.sleep(0.05)
    return [int(pid) for pid in pids_file.read_text().split()]


def _gone_within(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _alive(pids)


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def test_a_stop_kills_the_workers_a_launcher_put_out_of_the_group(tmp_path: Path) -> None:
    pids_file = tmp_path / "workers"
    with Path(os.devnull).open("wb") as console:
        training = TrainingProcess(
            [sys.executable, "-c", LAUNCHER, str(pids_file)],
            dict(os.environ),
            _Log(),
            console,
            orphan_grace_s=30,
        )
        training.start()
        workers: list[int] = []
        try:
            workers = _workers(pids_file)
            assert training.pid is not None
            assert set(workers) <= set(descendants(training.pid))
            group = [(_stat(w) or ["", "", "0"])[2] for w in workers]
            assert str(training.pid) not in group  # out of the training's group, as torchrun's
            assert training.terminate(grace_s=0.5) == 128 + signal.SIGKILL
            left = _gone_within(workers, 10)
        finally:
            _kill(workers)
    assert left == [], f"workers still running after the stop: {left}"


def test_the_guard_kills_the_workers_a_launcher_put_out_of_the_group_when_the_agent_dies(
    tmp_path: Path,
) -> None:
    pids_file = tmp_path / "workers"
    agent = subprocess.Popen(  # stands in for the agent: runs the guard, then is SIGKILLed
        [
            sys.executable,
            "-c",
            "import os, subprocess, sys, time; subprocess.Popen([sys.executable, '-I', "
            f"{str(GUARD)!r}, '--agent-pid', str(os.getpid()), '--grace-s', '0.5', '--', "
            f"sys.executable, '-c', {LAUNCHER!r}, {str(pids_file)!r}], "
            "start_new_session=True); time.sleep(600)",
        ]
    )
    workers: list[int] = []
    try:
        workers = _workers(pids_file)
        agent.kill()
        agent.wait(timeout=10)
        left = _gone_within(workers, 20)  # the guard polls every 0.5 s, then 0.5 s of grace
    finally:
        _kill(workers)
        agent.kill()
        agent.wait()
    assert left == [], f"workers still running after the agent died: {left}"
