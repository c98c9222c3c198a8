"""Killing a local host's processes waits for them to go, however many rounds that takes: on a
loaded machine a SIGKILLed process can stay in /proc for more than a second, and a destroy that
returned with it still there broke "every process killed". What outlives the wait is named. A
child the agent was starting as it was killed is killed too: with the agent's process group,
and by scanning until /proc has shown nothing marked several times in a row."""

from __future__ import annotations

import os
import signal
import subprocess
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


class ChildMidExec:
    """Stands in for /proc: a marked agent that, as it is killed, leaves a child in the middle
    of its exec: the first scan after the kill does not list it (its environment is being
    replaced), the later ones do."""

    AGENT, CHILD = 4242, 4243

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.alive = {self.AGENT, self.CHILD}
        self.scans_since_agent_died = 0
        monkeypatch.setattr(local_hosts, "marked_processes", self.marked)
        monkeypatch.setattr(local_hosts, "_signal_all", self.signal)

    def marked(self, marker: str, *, prefix: bool = False) -> list[int]:
        if self.AGENT in self.alive:
            return [self.AGENT]
        self.scans_since_agent_died += 1
        mid_exec = self.scans_since_agent_died == 1
        return [] if mid_exec else sorted(self.alive)

    def signal(self, pids: list[int], signum: int) -> None:
        if signum == signal.SIGKILL:
            self.alive -= set(pids)


def test_a_child_mid_exec_when_the_agent_dies_is_killed_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    procs = ChildMidExec(monkeypatch)
    assert local_hosts._kill_marked(MARKER) == []
    assert procs.alive == set()


def test_the_agents_process_group_is_killed_with_it() -> None:
    """A child in the agent's group goes with it, whatever /proc shows of its environment."""
    agent = subprocess.Popen(
        ["sh", "-c", "sleep 600 & echo $!; wait"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert agent.stdout is not None
    child = int(agent.stdout.readline())
    local_hosts._kill_group(agent)
    assert agent.wait(timeout=10) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while not _gone(child):
        assert time.monotonic() < deadline, local_hosts.describe_process(child)
        time.sleep(0.02)


def test_an_exited_agents_group_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the agent has exited its pid may be another process's: no group signal then."""
    agent = subprocess.Popen(["true"], start_new_session=True)
    agent.wait(timeout=10)
    sent: list[int] = []
    monkeypatch.setattr(os, "killpg", lambda pgid, _sig: sent.append(pgid))
    local_hosts._kill_group(agent)
    local_hosts._kill_group(None)
    assert sent == []


def _gone(pid: int) -> bool:
    """Exited: out of /proc, or a zombie left for init to reap."""
    described = local_hosts.describe_process(pid)
    return described == f"{pid} (gone)" or described.startswith(f"{pid} [Z]")


def test_a_live_process_is_described_by_state_and_command() -> None:
    described = local_hosts.describe_process(os.getpid())
    assert described.startswith(f"{os.getpid()} [R] ")
    assert "python" in described or "pytest" in described
