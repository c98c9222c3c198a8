"""One scenario's run on a stack: the demo's own monitor clock, polling the job's stored state
into the timeline, and the bookkeeping the scenarios and the judge share (faults, restores,
progress, billing samples, checkpoints seen)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from functions.adapters.store import JobStore, JobView
from functions.domain.job import Generation, JobState
from tether_local.demo.evidence import checkpoint_facts
from tether_local.demo.invariants import (
    BillingSample,
    CheckpointFacts,
    Fault,
    GenerationProgress,
    Restore,
)
from tether_local.demo.job import TrainArgs
from tether_local.demo.timeline import JobTimeline, Timeline, quiet
from tether_local.hosts.local_hosts import HostGpu
from tether_local.stack import LocalStack

POLL_S = 0.2


class DemoError(RuntimeError):
    """The scenario could not be driven to its end (a timeout, a refused submit)."""


class MonitorClock:
    """Runs the monitor every interval; `stop()` is the supervisor dying.

    `effective_interval_s` is the longest time seen between two completed runs: on a loaded
    machine a run takes time of its own, and the invariants' bounds are in monitor intervals as they
    really were, not as configured."""

    def __init__(self, stack: LocalStack, interval_s: float) -> None:
        self.stack = stack
        self.interval_s = interval_s
        self.effective_interval_s = interval_s
        self._last_run_end: float | None = None
        self.running = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-monitor", daemon=True)

    def start(self) -> None:
        self._last_run_end = None
        self.running.set()
        if not self._thread.is_alive():
            self._thread.start()

    def stop(self) -> None:
        self.running.clear()
        self._last_run_end = None  # the gap while the supervisor is dead is not an interval

    def close(self) -> None:
        self.running.clear()
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._closed.wait(self.interval_s):
            if self.running.is_set():
                self.stack.tick()
                now = time.monotonic()
                if not self.running.is_set():  # stopped during this run
                    self._last_run_end = None
                    continue
                if self._last_run_end is not None:
                    gap = now - self._last_run_end
                    self.effective_interval_s = max(self.effective_interval_s, gap)
                self._last_run_end = now


@dataclass
class DemoRun:
    """One scenario's job on a stack: polling, fault bookkeeping, the timeline."""

    stack: LocalStack
    scenario: Scenario
    timeline: Timeline
    job_id: str = ""
    started_at: float = field(default_factory=time.time)
    faults: list[Fault] = field(default_factory=list)
    progress: dict[int, GenerationProgress] = field(default_factory=dict)
    restores: dict[int, Restore] = field(default_factory=dict)
    max_step: dict[int, int] = field(default_factory=dict)
    samples: list[BillingSample] = field(default_factory=list)
    view: JobView | None = None
    checkpoints: dict[str, CheckpointFacts] = field(default_factory=dict)
    supervisor_dead_s: float = 0.0
    checks: dict[str, bool] = field(default_factory=dict)
    clock: MonitorClock | None = None
    _lines: JobTimeline | None = None

    @property
    def store(self) -> JobStore:
        return JobStore(self.stack.table_name())

    def say(self, text: str, source: str = "demo") -> None:
        self.timeline(time.time() - self.started_at, source, text)

    # polling

    def poll(self) -> JobView:
        view = self.store.get_job_view(self.job_id, max_events=1000)
        if view is None:
            raise DemoError(f"job {self.job_id} disappeared")
        self.view = view
        now = time.time()
        if self._lines is None:
            self._lines = JobTimeline(self.timeline, self.started_at)
        training = self._lines.feed(view, now)  # the timeline's lines
        for g in view.generations:
            self._observe(g, now, first_training=g.generation in training)
        for found in checkpoint_facts(self.stack, self.job_id, known=self.checkpoints):
            self.checkpoints[found.prefix] = found  # kept after retention deletes it
        ours = {h.instance_id for h in self._hosts()}
        billing = tuple(i for i in self.stack.vast.gpu_billing_instances() if i in ours)
        self.samples.append(BillingSample(at=now, instance_ids=billing))
        return view

    def _observe(self, g: Generation, now: float, *, first_training: bool) -> None:
        seen = self.progress.setdefault(g.generation, GenerationProgress(generation=g.generation))
        hb = g.heartbeat
        if hb is None:
            return
        if hb.restored_checkpoint is not None and g.generation not in self.restores:
            ref = hb.restored_checkpoint
            self.restores[g.generation] = Restore(
                generation=g.generation,
                step=ref.step,
                manifest_key=ref.manifest_key,
                manifest_sha256=ref.manifest_sha256,
            )
            seen = seen.model_copy(update={"restored_step": ref.step})
        if hb.step is not None:
            self.max_step[g.generation] = max(self.max_step.get(g.generation, 0), hb.step)
        if first_training and seen.first_training_at is None:
            seen = seen.model_copy(update={"first_training_at": now})
        if g.first_step_at is not None and seen.first_step_at is None:
            # the API's record of the agent's report (the stack's clock is this machine's)
            started = g.resumed_started_at
            seen = seen.model_copy(
                update={
                    "first_step_at": g.first_step_at,
                    "first_step_after_start_s": (
                        None if started is None else max(0.0, g.first_step_at - started)
                    ),
                }
            )
        self.progress[g.generation] = seen

    def wait(self, what: str, probe: Callable[[JobView], Any], timeout_s: float = 45) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            view = self.poll()
            value = probe(view)
            if value:
                return value
            if time.monotonic() > deadline:
                state = view.job.state.value
                raise DemoError(f"timed out after {timeout_s:g} s waiting for {what} (job {state})")
            time.sleep(POLL_S)

    # what scenarios use

    def generation(self, view: JobView, number: int | None = None) -> Generation | None:
        wanted = view.job.current_generation if number is None else number
        return next((g for g in view.generations if g.generation == wanted), None)

    def wait_step(self, generation: int, step: int, checkpoint: int = 0) -> Generation:
        """Until `generation` is training at ≥ `step` with a checkpoint ≥ `checkpoint` uploaded."""

        def reached(view: JobView) -> Generation | None:
            g = self.generation(view, generation)
            hb = g.heartbeat if g is not None else None
            if g is None or hb is None or hb.phase != "training" or (hb.step or 0) < step:
                return None
            uploaded = hb.last_checkpoint.step if hb.last_checkpoint else 0
            return g if uploaded >= checkpoint else None

        found: Generation = self.wait(f"g{generation} at step {step}", reached)
        return found

    def wait_training(self, generation: int) -> None:
        self.wait(
            f"g{generation} training",
            lambda _v: (p := self.progress.get(generation)) and p.first_training_at,
        )

    def fault(self, kind: str, g: Generation, action: Callable[[], None]) -> Fault:
        step = max(self.max_step.get(g.generation, 0), self._host_step(g))
        self.say(
            f"FAULT {kind} on generation {g.generation} (instance {g.instance_id}, step {step})"
        )
        fault = Fault(kind=kind, at=time.time(), generation=g.generation, step_at_fault=step)
        action()
        self.faults.append(fault)
        return fault

    def _host_step(self, g: Generation) -> int:
        """The step the training script last reported on the host (ahead of heartbeats)."""
        assert self.stack.hosts is not None
        if g.instance_id is None:
            return 0
        for path in self.stack.hosts.get(g.instance_id).disk.rglob("progress.json"):
            try:
                return int(json.loads(path.read_text())["step"])
            except (OSError, ValueError, KeyError, TypeError):
                return 0
        return 0

    def instance(self, g: Generation) -> int:
        if g.instance_id is None:
            raise DemoError(f"generation {g.generation} has no instance")
        return g.instance_id

    def stop_monitor(self) -> None:
        assert self.clock is not None
        self.clock.stop()

    def start_monitor(self) -> None:
        assert self.clock is not None
        self.clock.start()

    def _hosts(self) -> list[Any]:
        assert self.stack.hosts is not None
        return self.stack.hosts.for_job(self.job_id)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    train: TrainArgs
    drive: Callable[[DemoRun], None]
    expected_state: JobState = JobState.FINISHED
    spec_overrides: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float = 60
    host_gpu: HostGpu = "fake-probe"  # the GPU of the scenario's hosts (`tether_local.hosts`)


__all__ = ["DemoError", "DemoRun", "MonitorClock", "Scenario", "Timeline", "quiet"]
