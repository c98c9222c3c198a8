"""The GPU probe cannot block the agent: a probe child stuck in the driver (uninterruptible sleep:
it survives SIGKILL) is abandoned after a bounded wait, never doubled, and reported unresponsive
for as long as it lives. And whatever a probe returns, the heartbeat's GPU state is valid."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Sequence
from typing import IO

import pytest
from tether_agent import gpu
from tether_agent.protocol import GpuProbe

SCRIPT_UNUSED = "raise SystemExit('never run: the test spawns its own children')"


class WedgedChild:
    """A probe child in uninterruptible sleep: no output, SIGKILL does not end it, and waiting
    for it never returns (each `communicate` gives up after its timeout), until `release()`."""

    def __init__(self) -> None:
        self.stdout: IO[bytes] | None = None
        self.stderr: IO[bytes] | None = None
        self.kills = 0
        self._released = threading.Event()

    def communicate(
        self, input: bytes | None = None, timeout: float | None = None
    ) -> tuple[bytes, bytes]:
        if not self._released.wait(timeout):
            raise subprocess.TimeoutExpired("probe", timeout or 0)
        return b"", b""

    def kill(self) -> None:
        self.kills += 1

    def poll(self) -> int | None:
        return -9 if self._released.is_set() else None

    def release(self) -> None:
        self._released.set()


class Spawner:
    def __init__(self) -> None:
        self.children: list[WedgedChild] = []

    def __call__(self, argv: Sequence[str]) -> WedgedChild:
        child = WedgedChild()
        self.children.append(child)
        return child


def in_thread(fn: gpu.Probe | gpu.GpuMonitor) -> object:
    """Call `probe()`/`probe_once()` in a thread: a blocking probe fails the test, not hangs it."""
    out: list[object] = []
    call = fn.probe_once if isinstance(fn, gpu.GpuMonitor) else fn.probe
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the probe blocked"
    return out[0]


def test_a_child_that_survives_its_kill_is_abandoned_and_no_second_one_starts() -> None:
    spawn = Spawner()
    probe = gpu.ChildProcessProbe(SCRIPT_UNUSED, [], timeout_s=0.05, reap_s=0.05, spawn=spawn)
    monitor = gpu.GpuMonitor(probe, interval_s=1)

    first = in_thread(monitor)
    assert isinstance(first, GpuProbe)
    assert first.available and not first.responsive and first.utilization_pct is None
    assert first.error == "probe did not answer within 0.05s"
    assert len(spawn.children) == 1 and spawn.children[0].kills == 1
    assert probe.abandoned == 1

    # While it lives: no new child, still unresponsive, the streak keeps growing.
    second = in_thread(monitor)
    assert isinstance(second, GpuProbe)
    assert not second.responsive and "has not exited" in (second.error or "")
    assert len(spawn.children) == 1
    assert second.unresponsive_s >= first.unresponsive_s > 0

    # It exits at last (the driver let go): probing resumes with one new child.
    spawn.children[0].release()
    in_thread(monitor)
    assert len(spawn.children) == 2
    assert probe.abandoned == 2  # (the new one is wedged too)


def test_a_child_that_dies_of_its_kill_is_reaped_and_the_next_probe_runs() -> None:
    spawn = Spawner()

    def spawn_then_die(argv: Sequence[str]) -> WedgedChild:
        child = spawn(argv)
        child.kill = child.release  # type: ignore[method-assign]  # SIGKILL works: it exits
        return child

    probe = gpu.ChildProcessProbe(SCRIPT_UNUSED, [], 0.05, reap_s=30, spawn=spawn_then_die)
    for _ in range(3):
        reading = in_thread(probe)
        assert isinstance(reading, gpu.Reading) and not reading.responsive
    assert len(spawn.children) == 3 and probe.abandoned == 0


def test_the_streak_counts_from_the_first_unanswered_probe_and_grows_between_probes() -> None:
    spawn = Spawner()
    probe = gpu.ChildProcessProbe(SCRIPT_UNUSED, [], timeout_s=0.2, reap_s=0.01, spawn=spawn)
    monitor = gpu.GpuMonitor(probe, interval_s=1)
    state = in_thread(monitor)
    assert isinstance(state, GpuProbe)
    assert state.unresponsive_s >= 0.2  # the probe began one deadline ago
    earlier = monitor.current().unresponsive_s
    threading.Event().wait(0.05)
    assert monitor.current().unresponsive_s > earlier  # each heartbeat sees it grow


class Scripted:
    def __init__(self, *readings: gpu.Reading | Exception) -> None:
        self.readings = list(readings)

    def probe(self) -> gpu.Reading:
        item = self.readings.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


@pytest.mark.parametrize(
    ("reading", "util", "used"),
    [
        (gpu.Reading(True, True, 250.0, -5.0, 1e12), 100.0, 0.0),
        (gpu.Reading(True, True, float("nan"), float("inf"), 10.0), None, None),
        (gpu.Reading(True, True, "97", "x", None), 97.0, None),  # type: ignore[arg-type, unused-ignore]
    ],
)
def test_any_reading_becomes_a_valid_heartbeat_state(
    reading: gpu.Reading, util: float | None, used: float | None
) -> None:
    state = gpu.GpuMonitor(Scripted(reading), interval_s=1).probe_once()
    assert state.utilization_pct == util and state.memory_used_mb == used


def test_an_unresponsive_reading_carries_no_utilisation() -> None:
    state = gpu.GpuMonitor(
        Scripted(gpu.Reading(True, False, 0.0, error="GPU is lost")), interval_s=1
    ).probe_once()
    assert not state.responsive and state.utilization_pct is None  # never a stale or fake 0 %


def test_a_probe_that_raises_says_so_and_is_not_a_hung_gpu() -> None:
    monitor = gpu.GpuMonitor(
        Scripted(RuntimeError("bug"), gpu.Reading(True, True, 40.0)), interval_s=1
    )
    broken = monitor.probe_once()
    assert not broken.available and broken.responsive
    assert broken.error == "probe error: RuntimeError: bug"
    assert monitor.probe_once().utilization_pct == 40.0  # and probing goes on
