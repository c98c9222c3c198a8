"""`tether demo`: a deterministic CPU training job on the local stack, with faults injected.

A scenario submits the tiny numpy job (`tether_agent.examples.tiny_train`: it checkpoints its
full state, RNG included) through the real API, lets the real monitor and state machine supervise
it, injects its faults through the stack's chaos controls, and then judges the run from stored
state only: DynamoDB (job, generations, timeline), the S3 stand-in (checkpoints and manifests)
and the Vast simulator's ledger (`tether_local.invariants`). Invariant 8 compares the weights of
the highest verified checkpoint with an uninterrupted reference run of the same command to the
same step, run directly (no stack) in a temporary directory.

Timers. Everything runs on real time (agents compare leases with the wall clock), so the demo's
job uses second-scale timers: a 1 s heartbeat, a 6 s heartbeat timeout, 3 s of GPU
unresponsiveness, 6 s without progress. The job spec allows that without any bypass because its
floors are relative to `policy.heartbeat_interval_s` (`functions.domain.jobspec`: e.g.
`heartbeat_timeout_s ≥ 3 × heartbeat_interval_s`); a real job keeps the safe defaults (15 s
heartbeat, 180 s timeout). The monitor runs every second (the demo's own clock thread, so
`supervisor-dead` can stop it), and the API treats the supervisor as dead after 4 s without a
monitor run.

Scenarios (`SCENARIOS`): dead-twice (default), hung-gpu, no-progress, supervisor-dead,
over-budget, vast-flaky, zombie, crash-loop, killed-during-upload, killed-during-restore.
`run_scenario(name)` starts a stack and returns a `DemoSummary`; tests pass their own stack
(`demo_stack_config()`) to share one start-up.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any, Protocol, TypeVar

import httpx
import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field

from functions import settings as function_settings
from functions.adapters.store import JobStore, JobView
from functions.domain.job import Generation, JobState, is_terminal
from functions.domain.labels import parse_label
from tether_local import invariants
from tether_local.hosts import marked_processes
from tether_local.invariants import (
    BillingSample,
    CheckpointFacts,
    Evidence,
    Fault,
    GenerationProgress,
    Incident,
    LedgerFacts,
    Restore,
)
from tether_local.stack import R2_BUCKET, LocalStack, LocalStackConfig

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_JOB = ROOT / "examples" / "tiny-cpu.yaml"
MONITOR_INTERVAL_S = 1.0
PULSE_MAX_AGE_S = 4.0
POLL_S = 0.2
# Faults land this long after a checkpoint: ~30 of the 50 steps to the next one, and past the
# script's once-a-second progress report, so the steps lost can be measured.
MID_INTERVAL_S = 1.5
# A signed-looking header: the local front checks SigV4's shape, not its signature.
SIGNED = {
    "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDLOCALDEMO/20260101/us-east-1/"
    "execute-api/aws4_request, SignedHeaders=host;x-amz-date, Signature=0"
}
VERDICT_KINDS = frozenset({"dead", "hung", "crashed", "failed", "over_budget"})
DEMO_POLICY: dict[str, Any] = {
    "heartbeat_interval_s": 1,
    "heartbeat_timeout_s": 6,
    "gpu_unresponsive_s": 3,
    "no_progress_s": 6,
    "startup_timeout_s": 30,
    "lease_window_s": 120,
    "max_restarts": 2,
}


class DemoError(RuntimeError):
    """The scenario could not be driven to its end (a timeout, a refused submit)."""


# --- the training job -----------------------------------------------------------------------


@dataclass(frozen=True)
class TrainArgs:
    steps: int
    checkpoint_every: int = 50
    step_seconds: float = 0.05
    crash_at_step: int | None = None
    seed: int = 1234
    ballast_mb: int = 0  # filler per checkpoint: not in `argv()`, it never changes the weights

    def argv(self, *, steps: int | None = None) -> list[str]:
        return [
            "-m", "tether_agent.examples.tiny_train",
            "--steps", str(steps if steps is not None else self.steps),
            "--checkpoint-every", str(self.checkpoint_every),
            "--seed", str(self.seed),
        ]  # fmt: skip

    def command(self) -> str:
        extra = ["--step-seconds", repr(self.step_seconds)]
        if self.crash_at_step is not None:
            extra += ["--crash-at-step", str(self.crash_at_step)]
        if self.ballast_mb:
            extra += ["--ballast-mb", str(self.ballast_mb)]
        return shlex.join(["python", *self.argv(), *extra])


@cache
def reference_weights_sha256(train: TrainArgs, step: int) -> str:
    """The weights of an uninterrupted run of the same command, stopped at `step`: the script
    run directly, no stack, no sleeps (they do not change the arithmetic)."""
    with tempfile.TemporaryDirectory(prefix="tether-reference-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        done = subprocess.run(
            [sys.executable, *train.argv(steps=step), "--checkpoint-dir", tmp],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if done.returncode != 0:
            raise DemoError(f"the reference run failed: {done.stdout[-500:]}{done.stderr[-500:]}")
        return (Path(tmp) / "final_sha256.txt").read_text().strip()


def weights_sha256(model_npz: Path) -> str:
    """What tiny_train writes to final_sha256.txt: sha256 of the weights' bytes."""
    with np.load(model_npz) as data:
        return hashlib.sha256(data["w"].tobytes()).hexdigest()


def demo_job(train: TrainArgs, **overrides: Any) -> dict[str, Any]:
    """examples/tiny-cpu.yaml with the scenario's command, second-scale timers and overrides
    (a mapping value merges into the section of that name)."""
    spec: dict[str, Any] = yaml.safe_load(EXAMPLE_JOB.read_text())
    spec["name"] = "demo"
    spec["run"] = train.command()
    spec["policy"] = {**spec.get("policy", {}), **DEMO_POLICY}
    for key, value in overrides.items():
        if isinstance(value, dict):
            spec[key] = {**spec.get(key, {}), **value}
        else:
            spec[key] = value
    return spec


def demo_stack_config(root: Path | None = None) -> LocalStackConfig:
    """The stack the demo drives: no clock of its own (the demo's clock runs the monitor),
    fast rents and boots, the monitor interval and pulse age the functions see."""
    return LocalStackConfig(
        root=root,
        monitor_interval_s=0,
        startup_s=0.5,
        created_s=0.2,
        restart_s=0.3,
        stop_grace_s=1.0,
        host_env={"TETHER_PROBE_TIMEOUT_S": "1"},  # the fake probe answers at once or hangs
        function_env={
            function_settings.MONITOR_INTERVAL_ENV: str(MONITOR_INTERVAL_S),
            function_settings.PULSE_MAX_AGE_ENV: str(PULSE_MAX_AGE_S),
        },
    )


# --- the live timeline ----------------------------------------------------------------------


class Timeline(Protocol):
    def __call__(self, elapsed_s: float, source: str, text: str) -> None: ...


def quiet(elapsed_s: float, source: str, text: str) -> None:
    """A timeline that shows nothing (tests, --json)."""


# --- the summary ----------------------------------------------------------------------------


class DemoSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scenario: str
    job_id: str
    final_state: str
    expected_state: str
    incidents: list[Incident]
    spend_usd: float
    budget_usd: float
    invariants: dict[str, bool]
    invariant_details: dict[str, str]
    scenario_checks: dict[str, bool] = Field(default_factory=dict)
    identical_to_uninterrupted: bool
    compared_step: int | None
    wall_s: float
    log_tail: str | None = None

    @property
    def ok(self) -> bool:
        return (
            all(self.invariants.values())
            and all(self.scenario_checks.values())
            and self.final_state == self.expected_state
        )


# --- driving one run ------------------------------------------------------------------------


class _MonitorClock:
    """Runs the monitor every interval; `stop()` is the supervisor dying.

    `effective_interval_s` is the longest time seen between two completed runs: on a loaded
    machine a run takes time of its own, and DESIGN's bounds are in monitor intervals as they
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
    _seen_events: set[str] = field(default_factory=set)
    _clock: _MonitorClock | None = None

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
        for event in view.events:
            if event.event_id not in self._seen_events:
                self._seen_events.add(event.event_id)
                self.timeline(event.at - self.started_at, event.kind, event.message)
        for g in view.generations:
            self._observe(g, now)
        for found in _checkpoints(self.stack, self.job_id, known=self.checkpoints):
            self.checkpoints[found.prefix] = found  # kept after retention deletes it
        ours = {h.instance_id for h in self._hosts()}
        billing = tuple(i for i in self.stack.vast.gpu_billing_instances() if i in ours)
        self.samples.append(BillingSample(at=now, instance_ids=billing))
        return view

    def _observe(self, g: Generation, now: float) -> None:
        seen = self.progress.setdefault(g.generation, GenerationProgress(generation=g.generation))
        hb = g.heartbeat
        if hb is None:
            return
        if hb.restored_checkpoint is not None and g.generation not in self.restores:
            ref = hb.restored_checkpoint
            self.restores[g.generation] = Restore(
                generation=g.generation, step=ref.step, manifest_key=ref.manifest_key
            )
            seen = seen.model_copy(update={"restored_step": ref.step})
        if hb.step is not None:
            self.max_step[g.generation] = max(self.max_step.get(g.generation, 0), hb.step)
        if hb.phase == "training" and seen.first_training_at is None and g.is_current:
            seen = seen.model_copy(update={"first_training_at": now})
            restored = f" from step {seen.restored_step}" if seen.restored_step else ""
            self.say(f"generation {g.generation} training{restored}", "agent")
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
        assert self._clock is not None
        self._clock.stop()

    def start_monitor(self) -> None:
        assert self._clock is not None
        self._clock.start()

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


# --- the scenarios --------------------------------------------------------------------------


def _destroy(run: DemoRun, g: Generation) -> None:
    """The host dies between two checkpoints (what the next one restores is behind)."""
    assert run.stack.hosts is not None
    time.sleep(MID_INTERVAL_S)
    hosts = run.stack.hosts
    instance = run.instance(g)
    run.fault("dead", g, lambda: hosts.destroy(instance))


def _dead_twice(run: DemoRun) -> None:
    _destroy(run, run.wait_step(1, 100, checkpoint=100))
    run.wait_training(2)
    _destroy(run, run.wait_step(2, 200, checkpoint=200))


def _hung_gpu(run: DemoRun) -> None:
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    g = run.wait_step(1, 50, checkpoint=50)
    instance = run.instance(g)
    run.fault("hung", g, lambda: hosts.hang_gpu(instance))


def _stall_training(run: DemoRun, g: Generation) -> None:
    """The training process stops making progress (SIGSTOP), the agent heartbeats on, the GPU
    idles: DESIGN §4's 'no progress while GPU utilisation stays near zero'."""
    assert run.stack.hosts is not None
    host = run.stack.hosts.get(run.instance(g))
    agent = host.process.pid if host.process is not None else None
    run.stack.hosts.idle_gpu(host.instance_id)
    for pid in marked_processes(host.marker):
        if pid != agent:
            os.kill(pid, signal.SIGSTOP)


def _no_progress(run: DemoRun) -> None:
    g = run.wait_step(1, 50, checkpoint=50)
    run.fault("no-progress", g, lambda: _stall_training(run, g))


def _supervisor_dead(run: DemoRun) -> None:
    g = run.wait_step(1, 50, checkpoint=50)
    instance = run.instance(g)
    fault = run.fault("supervisor-dead", g, run.stop_monitor)

    def stopped_itself(_view: JobView) -> bool:
        record = run.stack.vast.instance(instance)
        return record is not None and record["intended_status"] == "stopped"

    lease = g.lease_expires_at
    run.say(f"monitor stopped; the host's lease runs out in {max(lease - time.time(), 0):.0f} s")
    run.wait("the host to stop itself (dead-man switch)", stopped_itself, timeout_s=40)
    stopped_at = time.time()
    run.say(f"the agent stopped its own instance {instance} after {stopped_at - fault.at:.1f} s")
    time.sleep(2 * MONITOR_INTERVAL_S)  # nothing bills GPU time while nobody supervises
    run.checks["host_stopped_itself"] = True
    run.checks["no_gpu_billing_after_stop"] = not [
        s
        for s in run.samples
        if s.at > stopped_at + run.stack.config.stop_grace_s and s.instance_ids
    ]
    run.supervisor_dead_s = time.time() - fault.at
    run.faults[-1] = fault.model_copy(update={"detected_at": stopped_at})
    run.say("monitor restarted")
    run.start_monitor()


def _over_budget(run: DemoRun) -> None:
    g = run.wait_step(1, 1)
    run.faults.append(
        Fault(kind="over-budget", at=time.time(), generation=g.generation, step_at_fault=0)
    )


def _vast_flaky(run: DemoRun) -> None:
    vast = run.stack.vast
    g = run.wait_step(1, 50, checkpoint=50)
    run.say("Vast API: 429s, 502s and dropped connections from now on")
    vast.inject("rate_limit", 3)
    vast.inject("server_error", 2)
    vast.inject("connection_error", 1)
    vast.inject("offer_gone", 1)
    _destroy(run, g)


def _zombie(run: DemoRun) -> None:
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    g1 = run.wait_step(1, 50, checkpoint=50)
    _destroy(run, g1)
    run.wait_training(2)
    run.wait_step(2, 90)
    old = hosts.get(run.instance(g1))
    run.say(f"ZOMBIE: instance {old.instance_id} comes back with its generation-1 agent")
    zombie_at = time.time()
    hosts.zombie(old.instance_id)
    gone = run.wait(
        "the zombie's agent to stop",
        lambda _v: not marked_processes(old.marker) and time.time(),
        timeout_s=30,
    )
    run.say(f"the zombie stopped itself after {gone - zombie_at:.1f} s (superseded)")
    run.checks["zombie_stopped_itself"] = True
    run.checks["zombie_never_billed"] = not [
        s for s in run.samples if s.at >= zombie_at and old.instance_id in s.instance_ids
    ]


def _crash_loop(run: DemoRun) -> None:
    policy = DEMO_POLICY["max_restarts"]
    for generation in range(1, policy + 2):

        def crashed(view: JobView, number: int = generation) -> Generation | None:
            g = run.generation(view, number)
            hb = g.heartbeat if g is not None else None
            return g if hb is not None and hb.exit_code not in (None, 0) else None

        g = run.wait(f"g{generation} to crash", crashed)
        run.faults.append(
            Fault(
                kind="crash",
                at=time.time(),
                generation=g.generation,
                step_at_fault=run.max_step.get(g.generation, 0),
            )
        )


# Killing a host in the middle of a transfer. The transfer is caught by watching its bytes (the S3
# stand-in's directory, the host's disk) every few milliseconds; the moment it is seen the host is
# frozen (SIGSTOP), the transfer confirmed unfinished, and only then destroyed: on a loaded machine
# a transfer could otherwise end between the look and the kill. Ballast makes each checkpoint big
# enough that a transfer lasts long enough to be seen.
TRANSFER_BALLAST_MB = 96
CATCH_POLL_S = 0.01
MANIFEST = "manifest.json"
_T = TypeVar("_T")


def _catch(what: str, probe: Callable[[], _T | None], timeout_s: float = 45) -> _T:
    """Until `probe` finds something, polling the file system only (fast, no DynamoDB reads)."""
    deadline = time.monotonic() + timeout_s
    while (found := probe()) is None:
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(CATCH_POLL_S)
    return found


def _steps_by_dir(base: Path, generation: int) -> dict[Path, int]:
    return {
        d: int(d.name.partition("-g")[0])
        for d in base.glob(f"*-g{generation}")
        if d.name.partition("-g")[0].isdigit()
    }


def _killed_during_upload(run: DemoRun) -> None:
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    g = run.wait_step(1, 50, checkpoint=50)
    instance = run.instance(g)
    base = _s3_root(run.stack) / "jobs" / run.job_id / "checkpoints"

    def complete_step() -> int:
        dirs = _steps_by_dir(base, 1)
        return max((s for d, s in dirs.items() if (d / MANIFEST).is_file()), default=0)

    def half_written() -> tuple[Path, int] | None:
        """A checkpoint newer than every complete one, with files but no manifest yet."""
        complete = complete_step()
        for directory, step in _steps_by_dir(base, 1).items():
            try:
                started = step > complete and any(directory.iterdir())
                if started and not (directory / MANIFEST).exists():
                    return directory, complete
            except OSError:  # deleted by retention while we looked
                continue
        return None

    while True:
        half, complete = _catch("g1 uploading a checkpoint", half_written)
        hosts.freeze(instance)
        if not (half / MANIFEST).exists():
            break
        run.say(f"{half.name} finished uploading before the freeze; waiting for the next one")
        hosts.thaw(instance)
    files = sorted(p.name for p in half.iterdir())
    run.say(f"g1 is uploading {half.name} ({', '.join(files)}; no manifest yet)")
    run.fault("dead", g, lambda: hosts.destroy(instance))
    run.wait_training(2)
    restored = run.restores.get(2)
    run.say(
        f"g2 restored step {restored.step if restored else '-'}; "
        f"step {complete} was the last complete one"
    )
    run.checks["killed_mid_upload"] = not (half / MANIFEST).exists()
    run.checks["restored_last_complete_checkpoint"] = _restored(run, 2, complete, written_by=1)


def _killed_during_restore(run: DemoRun) -> None:
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    _destroy(run, run.wait_step(1, 100, checkpoint=100))
    base = _s3_root(run.stack) / "jobs" / run.job_id / "checkpoints"
    complete = max(s for d, s in _steps_by_dir(base, 1).items() if (d / MANIFEST).is_file())

    def rented(view: JobView) -> Generation | None:
        g = run.generation(view, 2)
        return g if g is not None and g.instance_id is not None else None

    g2 = run.wait("g2 rented", rented)
    instance = run.instance(g2)
    disk = hosts.get(instance).disk

    def staging() -> Path | None:
        return next(iter(disk.rglob(".tether-restore-*")), None)

    restoring = _catch("g2 restoring a checkpoint", staging)
    hosts.freeze(instance)
    if not restoring.exists():
        raise DemoError(f"g2 finished restoring {restoring.name} before it could be killed")
    run.say(f"g2 is downloading into {restoring.name}")
    run.fault("dead", g2, lambda: hosts.destroy(instance))
    run.wait_training(3)
    seen = run.progress.get(2)
    run.checks["killed_mid_restore"] = 2 not in run.restores and not (
        seen and seen.first_training_at
    )
    run.checks["third_generation_restored"] = _restored(run, 3, complete, written_by=1)


def _restored(run: DemoRun, generation: int, step: int, written_by: int) -> bool:
    """`generation` restored the checkpoint of `step` that generation `written_by` uploaded."""
    restored = run.restores.get(generation)
    return (
        restored is not None
        and restored.step == step
        and f"-g{written_by}/{MANIFEST}" in restored.manifest_key
    )


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "dead-twice",
            "the host is destroyed twice mid-training; each time a new one resumes the work",
            TrainArgs(steps=300),
            _dead_twice,
        ),
        Scenario(
            "hung-gpu",
            "the GPU stops answering; the host is replaced as hung",
            TrainArgs(steps=300),
            _hung_gpu,
        ),
        Scenario(
            "no-progress",
            "training stalls with the GPU idle; the host is replaced as hung",
            TrainArgs(steps=160),
            _no_progress,
        ),
        Scenario(
            "supervisor-dead",
            "the monitor stops: the lease runs out and the host stops itself; the monitor "
            "returns and the job resumes",
            TrainArgs(steps=600),
            _supervisor_dead,
            spec_overrides={"policy": {"lease_window_s": 10}},
        ),
        Scenario(
            "over-budget",
            "the budget runs out mid-training: the job stops, spend stays within one interval",
            TrainArgs(steps=100_000),
            _over_budget,
            expected_state=JobState.OVER_BUDGET,
            spec_overrides={
                "budget_usd": 0.0004,
                "expected_startup_min": 0,
                "data": {"download_gb": 0},
                "checkpoint": {"interval_min": 0.05},
            },
        ),
        Scenario(
            "vast-flaky",
            "the Vast API throttles, fails and drops connections while a host is replaced",
            TrainArgs(steps=160),
            _vast_flaky,
        ),
        Scenario(
            "zombie",
            "a destroyed host returns after its replacement: superseded, never billed, its late "
            "checkpoints never restored",
            TrainArgs(steps=200),
            _zombie,
        ),
        Scenario(
            "crash-loop",
            "the training command exits 1: restarted up to max_restarts, then FAILED",
            TrainArgs(steps=200, crash_at_step=75),
            _crash_loop,
            expected_state=JobState.FAILED,
        ),
        Scenario(
            "killed-during-upload",
            "the host dies while it uploads a checkpoint: the half-written one never gets a "
            "manifest, the next host restores the one before it",
            TrainArgs(steps=200, ballast_mb=TRANSFER_BALLAST_MB),
            _killed_during_upload,
            spec_overrides={"data": {"upload_gb_per_checkpoint": 0.1}},
        ),
        Scenario(
            "killed-during-restore",
            "the replacement host dies while it downloads the checkpoint; a third one restores "
            "it and finishes",
            TrainArgs(steps=200, ballast_mb=TRANSFER_BALLAST_MB),
            _killed_during_restore,
            spec_overrides={"data": {"upload_gb_per_checkpoint": 0.1}},
        ),
    )
}
DEFAULT_SCENARIO = "dead-twice"


# --- running a scenario ---------------------------------------------------------------------


def run_scenario(
    name: str = DEFAULT_SCENARIO,
    *,
    stack: LocalStack | None = None,
    timeline: Timeline = quiet,
) -> DemoSummary:
    """Run one scenario end to end and judge it. Starts (and stops) a stack unless given one
    made with `demo_stack_config()`."""
    scenario = SCENARIOS.get(name)
    if scenario is None:
        raise ValueError(f"scenario: {name!r} is not one of {', '.join(SCENARIOS)}")
    if stack is not None:
        return _run_on(stack, scenario, timeline)
    started = time.time()
    timeline(0.0, "demo", "starting the local stack…")
    with LocalStack(demo_stack_config()) as own:
        timeline(time.time() - started, "demo", f"local stack up in {time.time() - started:.1f} s")
        return _run_on(own, scenario, timeline)


def _run_on(stack: LocalStack, scenario: Scenario, timeline: Timeline) -> DemoSummary:
    run = DemoRun(stack=stack, scenario=scenario, timeline=timeline)
    run._clock = _MonitorClock(stack, MONITOR_INTERVAL_S)
    run.say(f"scenario {scenario.name}: {scenario.description}")
    spec = demo_job(scenario.train, **scenario.spec_overrides)
    try:
        created = httpx.post(stack.api_url + "/jobs", json=spec, headers=SIGNED, timeout=60)
        if created.status_code != 201:
            raise DemoError(f"submit refused: {created.status_code} {created.text[:300]}")
        run.job_id = str(created.json()["job_id"])
        run.say(f"submitted job {run.job_id}: {scenario.train.command()}")
        run.start_monitor()
        scenario.drive(run)
        view = run.wait(
            f"the job to end {scenario.expected_state.value}",
            lambda v: is_terminal(v.job.state),
            timeout_s=scenario.timeout_s,
        )
        run.wait("every instance of the job destroyed", lambda _v: not _live_instances(run), 20)
    finally:
        run._clock.close()
    view = run.poll()
    return _summarize(run, view)


def _live_instances(run: DemoRun) -> list[int]:
    return [
        int(i["id"])
        for i in run.stack.vast.instances()
        if (parsed := parse_label(i.get("label"))) is not None and parsed[0] == run.job_id
    ]


def _summarize(run: DemoRun, view: JobView) -> DemoSummary:
    stack, job = run.stack, view.job
    run.checkpoints.update({c.prefix: c for c in _checkpoints(stack, run.job_id)})
    checkpoints = list(run.checkpoints.values())
    verified = [c for c in checkpoints if c.verified]
    best = max(verified, key=lambda c: (c.step, c.generation), default=None)
    weights = reference = None
    if best is not None:
        npz = next(iter(sorted((_s3_root(stack) / best.prefix).rglob("model.npz"))), None)
        weights = weights_sha256(npz) if npz is not None else None
        reference = reference_weights_sha256(run.scenario.train, best.step)
    ledgers = _ledgers(stack, run.job_id)
    labels: dict[str, int] = {}
    for ledger in ledgers:
        labels[str(ledger.label)] = labels.get(str(ledger.label), 0) + 1
    assert stack.hosts is not None
    evidence = Evidence(
        job=job,
        generations=tuple(view.generations),
        ledgers=tuple(ledgers),
        billing_samples=tuple(run.samples),
        checkpoints=tuple(checkpoints),
        restores=tuple(run.restores.values()),
        host_envs={h.instance_id: dict(h.received_env) for h in stack.hosts.for_job(run.job_id)},
        account_secrets=tuple(stack.account_secrets()),
        bad_input_statuses=_bad_inputs(stack, run.job_id),
        labels_rented=labels,
        weights_sha256=weights,
        reference_sha256=reference,
        monitor_interval_s=(
            run._clock.effective_interval_s if run._clock is not None else MONITOR_INTERVAL_S
        ),
        supervisor_dead_for_s=run.supervisor_dead_s,
        ended_at=time.time(),
    )
    results = invariants.check_invariants(evidence)
    verdicts = [(e.at, e.kind) for e in view.events if e.kind in VERDICT_KINDS]
    found = invariants.incidents(run.faults, verdicts, run.progress)
    tail = None
    if job.state == JobState.FAILED:
        last = max(stack.hosts.for_job(run.job_id), key=lambda h: h.generation or 0, default=None)
        tail = "\n".join(last.log_text().splitlines()[-10:]) if last is not None else None
    identical = results["8_identical_to_uninterrupted"].ok
    run.say(
        f"job {job.state.value}; weights at step {best.step if best else '-'} "
        + ("identical to the uninterrupted run" if identical else "DIFFER from the reference")
    )
    return DemoSummary(
        scenario=run.scenario.name,
        job_id=run.job_id,
        final_state=job.state.value,
        expected_state=run.scenario.expected_state.value,
        incidents=found,
        spend_usd=round(sum(ledger.total_usd for ledger in ledgers), 6),
        budget_usd=job.budget_usd,
        invariants={name: check.ok for name, check in results.items()},
        invariant_details={name: check.detail for name, check in results.items()},
        scenario_checks=dict(run.checks),
        identical_to_uninterrupted=identical,
        compared_step=best.step if best else None,
        wall_s=round(time.time() - run.started_at, 1),
        log_tail=tail,
    )


# --- evidence from the S3 stand-in, the ledger and the API ------------------------------------


def _s3_root(stack: LocalStack) -> Path:
    return stack.root / "s3" / R2_BUCKET


def _checkpoints(
    stack: LocalStack, job_id: str, known: Mapping[str, CheckpointFacts] | None = None
) -> list[CheckpointFacts]:
    """The job's checkpoint directories, each manifest verified against the bytes (those in
    `known` already verified are not read again)."""
    base = _s3_root(stack)
    found = []
    for directory in sorted((base / "jobs" / job_id / "checkpoints").glob("*-g*")):
        head, _, gen = directory.name.partition("-g")
        if not head.isdigit() or not gen.isdigit():
            continue
        seen = (known or {}).get(str(directory.relative_to(base)) + "/")
        if seen is not None and seen.verified:
            continue
        manifest = directory / "manifest.json"
        verified, written_at = _verify(directory, manifest)
        if not manifest.is_file():
            verified = False
        found.append(
            CheckpointFacts(
                prefix=str(directory.relative_to(base)) + "/",
                step=int(head),
                generation=int(gen),
                has_manifest=manifest.is_file(),
                verified=verified,
                written_at=written_at,
            )
        )
    return found


def _verify(directory: Path, manifest: Path) -> tuple[bool, float | None]:
    try:
        data = json.loads(manifest.read_text())
        written_at = datetime.fromisoformat(str(data["created_at"])).timestamp()
        for entry in data["files"]:
            path = directory / str(entry["path"])
            blob = path.read_bytes()
            if len(blob) != int(entry["size"]):
                return False, written_at
            if hashlib.sha256(blob).hexdigest() != entry["sha256"]:
                return False, written_at
    except (OSError, ValueError, KeyError, TypeError):
        return False, None
    return True, written_at


def _ledgers(stack: LocalStack, job_id: str) -> list[LedgerFacts]:
    found = []
    for charge in stack.vast.charges():
        metadata = charge.get("metadata") or {}
        parsed = parse_label(metadata.get("label"))
        if parsed is None or parsed[0] != job_id:
            continue
        ledger = stack.vast.ledger(int(metadata["instance_id"]))
        found.append(
            LedgerFacts(
                instance_id=ledger.instance_id,
                label=ledger.label,
                opened_at=ledger.opened_at,
                closed_at=ledger.closed_at,
                gpu_usd_per_hour=ledger.gpu_usd_per_hour,
                storage_usd_per_hour=ledger.storage_usd_per_hour,
                total_usd=ledger.total_usd,
            )
        )
    return found


def _bad_inputs(stack: LocalStack, job_id: str) -> dict[str, int]:
    """Invariant 5, sampled: a few bad requests of each kind, each must get a 4xx."""
    url = stack.api_url
    with httpx.Client(timeout=30) as client:
        return {
            "spec_negative_budget": client.post(
                url + "/jobs", json={"name": "x", "budget_usd": -1}, headers=SIGNED
            ).status_code,
            "spec_not_json": client.post(
                url + "/jobs", content=b"{not json", headers=SIGNED
            ).status_code,
            "query_bad_state": client.get(url + "/jobs?state=BOGUS", headers=SIGNED).status_code,
            "heartbeat_forged_token": client.post(
                url + "/agent/heartbeat",
                json={"job_id": job_id, "generation": 1, "phase": "training"},
                headers={"Authorization": "Bearer forged"},
            ).status_code,
            "unsigned_request": client.get(url + f"/jobs/{job_id}").status_code,
        }


__all__ = [
    "DEFAULT_SCENARIO",
    "SCENARIOS",
    "DemoError",
    "DemoSummary",
    "Scenario",
    "TrainArgs",
    "demo_job",
    "demo_stack_config",
    "reference_weights_sha256",
    "run_scenario",
]
