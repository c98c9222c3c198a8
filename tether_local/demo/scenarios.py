"""The demo's scenarios: what each does to the run (its faults, through the stack's chaos
controls) and what it expects. `SCENARIOS` is the catalogue `run_scenario` and the CLI read.

Killing a host in the middle of a transfer. The transfer is caught by watching its bytes (the S3
stand-in's directory, the host's disk) every few milliseconds; the moment it is seen the host is
frozen (SIGSTOP), the transfer confirmed unfinished, and only then destroyed: on a loaded machine
a transfer could otherwise end between the look and the kill. Ballast makes each checkpoint big
enough that a transfer lasts long enough to be seen.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
from tether_agent.checkpoints import MANIFEST_NAME

from functions.adapters.store import JobView
from functions.domain import agent_env
from functions.domain.job import Generation, JobState
from tether_local.demo.evidence import checkpoint_dirs, restore_candidates
from tether_local.demo.flood import drive_heartbeat_flood
from tether_local.demo.job import DEMO_POLICY, MONITOR_INTERVAL_S, SIGNED, TrainArgs
from tether_local.demo.monitor_faults import monitor_crash
from tether_local.demo.run import DemoError, DemoRun, Scenario
from tether_local.demo.storage_attacks import HostKeys, copy_checkpoint, crafted_manifests
from tether_local.hosts import marked_processes
from tether_local.invariants import Fault

# Faults land this long after a checkpoint: ~30 of the 50 steps to the next one, and past the
# script's once-a-second progress report, so the steps lost can be measured.
MID_INTERVAL_S = 1.5


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


def _hung_gpu_real_probe(run: DemoRun) -> None:
    """A real host's probe path: the agent's own NVML probe, over the fake `pynvml` its venv
    holds (`tether_local.fake_nvml`). The driver wedges: NVML calls block, the probe's deadline
    kills the child, and "unresponsive" grows until the monitor judges the host hung."""
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    g = run.wait_step(1, 50, checkpoint=50)
    instance = run.instance(g)
    seen = g.heartbeat.gpu if g.heartbeat is not None else None
    run.say(f"g1's NVML probe (fake pynvml) reads: {seen.model_dump() if seen else None}")
    env = hosts.process_env(hosts.get(instance))
    run.checks["probed_through_nvml"] = env[agent_env.GPU_PROBE] == "nvml"
    run.checks["nvml_reading_before_the_fault"] = (
        seen is not None and seen.available and seen.responsive and seen.utilization_pct == 97
    )
    run.fault("hung", g, lambda: hosts.hang_gpu(instance))
    run.wait_training(2)
    view = run.poll()
    last = g1.heartbeat if (g1 := run.generation(view, 1)) is not None else None
    error = last.gpu.error if last is not None else None
    run.say(f"g1's last heartbeat: GPU {error}")
    run.checks["hang_seen_by_the_probe_deadline"] = bool(
        error and error.startswith("probe did not answer within")
    )


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
    """g1 dies; g2 takes over; g1's host comes back and is told it is superseded. Its keys still
    work until they expire: written where g2 or the job root would be read they are refused, and
    a checkpoint it plants in its own prefix at a far higher step is never restored: g2 dies
    too, and g3 restores g2's latest recorded checkpoint."""
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
    keys = HostKeys.of(run, old)
    answers = keys.writes_outside_own_prefix(other_generation=2)
    run.say(f"the zombie's key, outside generation 1's prefix: {sorted(set(answers.values()))}")
    run.checks["zombie_key_refused_outside_its_prefix"] = set(answers.values()) == {
        "403 AccessDenied"
    }
    planted = copy_checkpoint(keys, 50, ZOMBIE_STEP)
    run.say(f"the zombie plants a complete checkpoint at step {ZOMBIE_STEP} in its own prefix")
    current = run.max_step.get(2, 0)
    g2 = run.wait_step(2, current, checkpoint=current - current % 50 + 50)
    _destroy(run, g2)
    run.wait_training(3)
    given = restore_candidates(run.stack, run.job_id).get(3, ())
    restored = run.restores.get(3)
    run.checks["third_generation_restored_the_latest_recorded"] = bool(
        given
        and given[0].generation == 2
        and restored is not None
        and restored.manifest_key == given[0].manifest_key
        and planted["manifest_key"] not in {c.manifest_key for c in given}
    )


ZOMBIE_STEP = 99_950


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


def _vast_outage_during_stop(run: DemoRun) -> None:
    """Vast answers 502 to everything while the job is cancelled: the stop's first attempt
    fails (its destroy step gives up), and once Vast is back the host is destroyed — by the
    monitor's sweep of a stopping job's instances, and by the next attempt, which ends it."""
    vast = run.stack.vast
    g = run.wait_step(1, 50, checkpoint=50)
    instance = run.instance(g)
    run.say("Vast API: 502 Bad Gateway on every request from now on")
    fault = run.fault("vast-outage", g, vast.outage)
    cancelled = httpx.post(
        f"{run.stack.api_url}/jobs/{run.job_id}/cancel", headers=SIGNED, timeout=30
    )
    if cancelled.status_code != 202:
        raise DemoError(f"cancel refused: {cancelled.status_code} {cancelled.text[:300]}")
    run.say("cancelled the job while Vast is down")

    def attempt_failed(view: JobView) -> str | None:
        failed = [e for e in view.events if e.kind == "transition_failed"]
        return failed[0].message if failed else None

    message = run.wait("the stop's first attempt to fail", attempt_failed)
    run.say(f"lifecycle: {message[:160]}")
    vast.outage(False)
    recovered_at = time.time()
    run.say(f"Vast answers again ({recovered_at - fault.at:.1f} s of outage)")

    def destroyed(_view: JobView) -> float | None:
        return vast.ledger(instance).closed_at

    closed_at = run.wait(f"instance {instance} destroyed", destroyed)
    assert run.clock is not None
    intervals = (closed_at - recovered_at) / run.clock.effective_interval_s
    run.say(
        f"instance {instance} destroyed {closed_at - recovered_at:.1f} s after Vast recovered "
        f"({intervals:.1f} monitor intervals)"
    )
    run.faults[-1] = fault.model_copy(update={"detected_at": closed_at})
    view = run.wait("the job to end", lambda v: v.job.state == JobState.CANCELLED and v)
    kinds = [e.kind for e in view.events]
    run.checks["first_attempt_failed_during_the_outage"] = "transition_failed" in kinds
    run.checks["retried_as_a_new_attempt"] = "transition_retried" in kinds
    run.checks["destroyed_within_two_intervals_of_recovery"] = (
        closed_at - recovered_at <= 2 * run.clock.effective_interval_s + OUTAGE_SLACK_S
    )


OUTAGE_SLACK_S = 2.0  # the invariants' slack: scheduling jitter of the demo machine
TRANSFER_BALLAST_MB = 96
CATCH_POLL_S = 0.01
_T = TypeVar("_T")


def _catch(what: str, probe: Callable[[], _T | None], timeout_s: float = 45) -> _T:
    """Until `probe` finds something, polling the file system only (fast, no DynamoDB reads)."""
    deadline = time.monotonic() + timeout_s
    while (found := probe()) is None:
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(CATCH_POLL_S)
    return found


def _steps_by_dir(run: DemoRun, generation: int) -> dict[Path, int]:
    """The steps of `generation`'s checkpoint directories in the S3 stand-in, by directory."""
    found = checkpoint_dirs(run.stack, run.job_id)
    return {d: cid.step for d, cid in found.items() if cid.generation == generation}


def _killed_during_upload(run: DemoRun) -> None:
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    g = run.wait_step(1, 50, checkpoint=50)
    instance = run.instance(g)

    def complete_step() -> int:
        dirs = _steps_by_dir(run, 1)
        return max((s for d, s in dirs.items() if (d / MANIFEST_NAME).is_file()), default=0)

    def half_written() -> tuple[Path, int] | None:
        """A checkpoint newer than every complete one, with files but no manifest yet."""
        complete = complete_step()
        for directory, step in _steps_by_dir(run, 1).items():
            try:
                started = step > complete and any(directory.iterdir())
                if started and not (directory / MANIFEST_NAME).exists():
                    return directory, complete
            except OSError:  # deleted by retention while we looked
                continue
        return None

    while True:
        half, complete = _catch("g1 uploading a checkpoint", half_written)
        hosts.freeze(instance)
        if not (half / MANIFEST_NAME).exists() and _newest_recorded(run) == complete:
            break
        run.say(f"{half.name} finished uploading (or {complete} was not recorded yet) before "
                "the freeze; waiting for the next one")  # fmt: skip
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
    run.checks["killed_mid_upload"] = not (half / MANIFEST_NAME).exists()
    run.checks["restored_last_complete_checkpoint"] = _restored(run, 2, complete, written_by=1)


def _newest_recorded(run: DemoRun) -> int | None:
    """The step of the newest checkpoint the control plane recorded for the job."""
    job = run.store.get_job(run.job_id)
    found = job.recorded_checkpoints if job is not None else []
    return found[0].step if found else None


def _killed_during_restore(run: DemoRun) -> None:
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    _destroy(run, run.wait_step(1, 100, checkpoint=100))

    def rented(view: JobView) -> Generation | None:
        g = run.generation(view, 2)
        return g if g is not None and g.instance_id is not None else None

    g2 = run.wait("g2 rented", rented)
    complete = _newest_recorded(run)  # g1 is superseded: the record is final
    if complete is None:
        raise DemoError("g1 was destroyed with no checkpoint recorded")
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
    """`generation` restored the checkpoint of `step` that generation `written_by` uploaded,
    the newest of those the control plane recorded and gave it."""
    restored = run.restores.get(generation)
    given = restore_candidates(run.stack, run.job_id).get(generation, ())
    return (
        restored is not None
        and bool(given)
        and (given[0].step, given[0].generation) == (step, written_by)
        and restored.manifest_key == given[0].manifest_key
        and restored.manifest_sha256 == given[0].manifest_sha256
    )


def _forged_manifest(run: DemoRun) -> None:
    """g1, still current, turns hostile: it writes four crafted manifests in its own prefix and
    reports each in a heartbeat, so the control plane records them, newest first. g1 dies; g2
    skips every crafted one with its reason (in its heartbeats and on the timeline) and
    restores g1's last real checkpoint; g1's key is refused anywhere g2 or the job root would
    be read."""
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    g1 = run.wait_step(1, 100, checkpoint=100)
    host = hosts.get(run.instance(g1))
    hosts.freeze(host.instance_id)  # its real agent records nothing more meanwhile
    time.sleep(IN_FLIGHT_S)  # a heartbeat it sent just before lands first
    real = _newest_recorded(run)
    if real is None:
        raise DemoError("g1 has no recorded checkpoint to forge from")
    keys = HostKeys.of(run, host)
    crafted = crafted_manifests(keys, real, FORGED_STEP)
    for kind, ref in crafted.items():
        status = keys.heartbeat(run, {"step": real, "last_checkpoint": ref})
        run.say(
            f"g1 writes and reports a crafted manifest ({kind}) at step {ref['step']}: {status}"
        )
    recorded = run.store.get_job(run.job_id)
    kinds = {ref["manifest_key"]: kind for kind, ref in crafted.items()}
    newest = [c.manifest_key for c in recorded.recorded_checkpoints] if recorded else []
    run.checks["crafted_manifests_recorded"] = set(newest[: len(kinds)]) == set(kinds)
    run.fault("dead", g1, lambda: hosts.destroy(host.instance_id))  # still frozen
    run.wait_training(2)
    answers = keys.writes_outside_own_prefix(other_generation=2)
    run.checks["old_key_refused_outside_its_prefix"] = set(answers.values()) == {"403 AccessDenied"}
    g2 = run.generation(run.poll(), 2)
    report = g2.heartbeat.restore if g2 is not None and g2.heartbeat is not None else None
    skipped = {s.manifest_key: s.reason for s in report.skipped} if report else {}
    restored = run.restores.get(2)
    run.say(
        f"g2 skipped {len(skipped)} crafted manifest(s) and restored step "
        f"{restored.step if restored else '-'}"
    )
    run.checks["crafted_never_restored"] = (
        restored is not None and restored.manifest_key not in kinds and restored.step == real
    )
    run.checks["every_crafted_one_skipped_with_its_reason"] = all(
        FORGED_REASONS[kind] in skipped.get(key, "") for key, kind in kinds.items()
    )
    run.checks["skips_on_the_timeline"] = any(
        e.kind == "restore_skipped" for e in (run.view.events if run.view else [])
    )


IN_FLIGHT_S = 0.5
FORGED_STEP = 100_000  # above any real step: as the newest recorded, each would win
FORGED_REASONS = {
    "bad-json": "malformed manifest",
    "dotdot-path": "unsafe path in manifest: ../../../../escape",
    "huge-size": "manifest says 1000000000000000",
    "wrong-sha256": "sha256 mismatch",
}


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
            "hung-gpu-real-probe",
            "a real host's probe path (the agent's NVML probe over a fake pynvml): the driver "
            "wedges, NVML calls block; the host is replaced as hung",
            TrainArgs(steps=300),
            _hung_gpu_real_probe,
            host_gpu="fake-nvml",
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
            "monitor-crash",
            "the monitor fails after its first step on every run (its secret cannot be read): "
            "no lease is renewed, the host stops itself; the monitor is fixed and the job "
            "resumes",
            TrainArgs(steps=600),
            monitor_crash,
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
            "a destroyed host returns after its replacement: superseded, never billed, its key "
            "refused outside its own prefix, its late checkpoint never restored",
            TrainArgs(steps=600),
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
            "vast-outage-during-stop",
            "Vast answers 502 to everything while the job is cancelled: the stop fails, is "
            "retried as a new attempt, and the host is destroyed soon after Vast is back",
            TrainArgs(steps=100_000),
            _vast_outage_during_stop,
            expected_state=JobState.CANCELLED,
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
            "heartbeat-flood",
            "junk heartbeats (bad tokens, unknown jobs, malformed bodies) at three times the "
            "heartbeat route's throttle for 10 s: all refused, nothing stored, the agent's own "
            "heartbeats get through, no host replaced or blamed",
            TrainArgs(steps=600),
            drive_heartbeat_flood,
        ),
        Scenario(
            "killed-during-restore",
            "the replacement host dies while it downloads the checkpoint; a third one restores "
            "it and finishes",
            TrainArgs(steps=200, ballast_mb=TRANSFER_BALLAST_MB),
            _killed_during_restore,
            spec_overrides={"data": {"upload_gb_per_checkpoint": 0.1}},
        ),
        Scenario(
            "forged-manifest",
            "the current host writes crafted manifests (bad JSON, ../ paths, a huge size, a "
            "wrong sha256) and reports them: recorded, each skipped with its reason by the "
            "next host, which restores the last real checkpoint",
            TrainArgs(steps=300),
            _forged_manifest,
            spec_overrides={"checkpoint": {"keep_last": 8}},
        ),
    )
}
DEFAULT_SCENARIO = "dead-twice"


__all__ = ["DEFAULT_SCENARIO", "MID_INTERVAL_S", "SCENARIOS", "TRANSFER_BALLAST_MB"]
