"""Killing a local host's processes waits for them to go, however many rounds that takes: on a
loaded machine a SIGKILLed process can stay in /proc for more than a second, and a destroy that
returned with it still there broke "every process killed". What outlives the wait is named."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tether_local.hosts import local_hosts

MARKER = "kill-test:1"


class SlowToDie:
    """Stands in for /proc: one marked process that is still listed `dying_s` after its first
    SIGKILL (what a busy machine shows while the kernel tears it down)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, dying_s: float, pid: int = 4242) -> None:
        self.pid, self.dying_s = pid, dying_s
        self.killed_at: float | None = None
        self.signals: list[int] = []
        monkeypatch.setattr(local_hosts, "marked_processes", self.marked)
        monkeypatch.setattr(local_hosts, "_signal_all", self.signal)

    def marked(self, marker: str, *, prefix: bool = False) -> list[int]:
        assert marker.startswith(MARKER.split(":")[0])
        gone = self.killed_at is not None and time.monotonic() - self.killed_at >= self.dying_s
        return [] if gone else [self.pid]

    def signal(self, pids: list[int], signum: int) -> None:
        assert pids == [self.pid]
        self.signals.append(signum)
        if signum == signal.SIGKILL and self.killed_at is None:
            self.killed_at = time.monotonic()


def test_a_process_slow_to_die_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = SlowToDie(monkeypatch, dying_s=1.5)  # longer than the old 50 rounds of 20 ms
    assert local_hosts._kill_marked(MARKER) == []
    assert proc.killed_at is not None
    assert set(proc.signals) == {signal.SIGKILL}


def test_what_outlives_the_wait_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    pid = 2**22 + 7  # above any pid_max: /proc has nothing to describe it with
    SlowToDie(monkeypatch, dying_s=60.0, pid=pid)
    monkeypatch.setattr(local_hosts, "KILL_WAIT_S", 0.2)
    assert local_hosts._kill_marked(MARKER) == [f"{pid} (gone)"]


def test_a_live_process_is_described_by_state_and_command() -> None:
    described = local_hosts._described(os.getpid())
    assert described.startswith(f"{os.getpid()} [R] ")
    assert "python" in described or "pytest" in described
