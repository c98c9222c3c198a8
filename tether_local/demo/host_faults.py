"""The host's own faults, driven through the local hosts' chaos controls: destroyed between two
checkpoints (`dead-twice`), its GPU hung (`hung-gpu`, and `hung-gpu-real-probe` through the
agent's NVML probe), training stalled with the GPU idle (`no-progress`), the training command
crashing (`crash-loop`). `destroy` and `MID_INTERVAL_S` are shared with the other scenarios.
"""

from __future__ import annotations

import os
import signal
import time

from functions.adapters.store import JobView
from functions.domain import agent_env
from functions.domain.job import Generation
from tether_local.demo.invariants import Fault
from tether_local.demo.job import DEMO_POLICY
from tether_local.demo.run import DemoRun
from tether_local.hosts.local_hosts import marked_processes

# Faults land this long after a checkpoint: ~30 of the 50 steps to the next one, and past the
# script's once-a-second progress report, so the steps lost can be measured.
MID_INTERVAL_S = 1.5


def destroy(run: DemoRun, g: Generation) -> None:
    """The host dies between two checkpoints (what the next one restores is behind)."""
    assert run.stack.hosts is not None
    time.sleep(MID_INTERVAL_S)
    hosts = run.stack.hosts
    instance = run.instance(g)
    run.fault("dead", g, lambda: hosts.destroy(instance))


def dead_twice(run: DemoRun) -> None:
    destroy(run, run.wait_step(1, 100, checkpoint=100))
    run.wait_training(2)
    destroy(run, run.wait_step(2, 200, checkpoint=200))


def hung_gpu(run: DemoRun) -> None:
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    g = run.wait_step(1, 50, checkpoint=50)
    instance = run.instance(g)
    run.fault("hung", g, lambda: hosts.hang_gpu(instance))


def hung_gpu_real_probe(run: DemoRun) -> None:
    """A real host's probe path: the agent's own NVML probe, over the fake `pynvml` its venv
    holds (`tether_local.hosts.fake_nvml`). The driver wedges: NVML calls block, the probe's
    deadline kills the child, and "unresponsive" grows until the monitor judges the host hung."""
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
    idles: the hung rule's 'no progress while GPU utilisation stays near zero'
    (docs/architecture.md#health-policy)."""
    assert run.stack.hosts is not None
    host = run.stack.hosts.get(run.instance(g))
    agent = host.process.pid if host.process is not None else None
    run.stack.hosts.idle_gpu(host.instance_id)
    for pid in marked_processes(host.marker):
        if pid != agent:
            os.kill(pid, signal.SIGSTOP)


def no_progress(run: DemoRun) -> None:
    g = run.wait_step(1, 50, checkpoint=50)
    run.fault("no-progress", g, lambda: _stall_training(run, g))


def crash_loop(run: DemoRun) -> None:
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


__all__ = [
    "MID_INTERVAL_S",
    "crash_loop",
    "dead_twice",
    "destroy",
    "hung_gpu",
    "hung_gpu_real_probe",
    "no_progress",
]
