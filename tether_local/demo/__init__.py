"""`tether demo`: a deterministic CPU training job on the local stack, with faults injected.

A scenario submits the tiny standard-library job (`examples/tiny-cpu/job.yaml`:
`python tiny_train.py` on the stock `python:3.12-slim`, its folder shipped as the job's code; it
checkpoints its full state, RNG included) through the real API as `tether submit` does, lets
the real monitor and state machine supervise it, injects its faults through the stack's chaos
controls, and then judges the run from stored state only: DynamoDB (job, generations,
timeline), the S3 stand-in (checkpoints and manifests) and the Vast simulator's ledger
(`tether_local.demo.invariants`). Invariant 8 compares the weights of the highest verified
checkpoint with an uninterrupted reference run of the same command to the same step, run
directly (no stack) on the same image stand-in, from the example's folder.

Timers. Everything runs on real time (agents compare leases with the wall clock), so the demo's
job uses second-scale timers: a 1 s heartbeat, a 6 s heartbeat timeout, 3 s of GPU
unresponsiveness, 6 s without progress. The job spec allows that without any bypass because its
floors are relative to `policy.heartbeat_interval_s` (`functions.domain.jobspec`: e.g.
`heartbeat_timeout_s ≥ 3 × heartbeat_interval_s`); a real job keeps the safe defaults (15 s
heartbeat, 180 s timeout). The monitor runs every second (the demo's own clock thread, so
`supervisor-dead` can stop it), and the API renews no lease once 4 s passed without a monitor
run that completed the job's evaluation. A Vast call retries for 0.5 s (`TETHER_VAST_DEADLINE_S`;
30 s for the monitor and 20 s for the lifecycle in AWS), so a Vast outage fails a lifecycle step
within seconds.

Scenarios (`SCENARIOS`): dead-twice (default), hung-gpu, hung-gpu-real-probe, no-progress,
monitor-crash, supervisor-dead, over-budget, vast-flaky, vast-outage-during-stop, zombie,
crash-loop, killed-during-upload, killed-during-restore, forged-manifest, heartbeat-flood.
`run_scenario(name)` starts a stack and returns a `DemoSummary`; tests pass their own stack
(`demo_stack_config()`) to share one start-up.

Modules: `job` (the training command, its spec and the stack's configuration), `run` (one run's
polling and bookkeeping), `submit` (the `CodeShipper` the caller passes: `tether submit`'s own
packing, upload and submit, from the CLI above), `scenarios` (the catalogue), the drivers of its
faults by family (`host_faults`, `service_faults`, `transfer_kills`, `hostile_hosts`,
`monitor_faults`, with `storage_attacks`), `flood` (the junk heartbeats of `heartbeat-flood`),
`driver` (`run_scenario`), `evidence` (stored state, checkpoints verified with the agent's own
manifest rules), `invariants` (the pure checks over that evidence), `summary` (the verdict),
and `rehearse` (`tether rehearse`: a user's own job on the same machinery, imported from its
module). The names below are the demo's public face: the CLI, the tests and the benchmarks use
only these.
"""

from tether_local.demo.driver import run_scenario
from tether_local.demo.flood import JUNK_STEP, Flood, FloodReport, junk_requests
from tether_local.demo.job import (
    DEMO_POLICY,
    MONITOR_INTERVAL_S,
    SIGNED,
    TrainArgs,
    demo_job,
    demo_stack_config,
)
from tether_local.demo.run import DemoError, Scenario
from tether_local.demo.scenarios import DEFAULT_SCENARIO, MID_INTERVAL_S, SCENARIOS
from tether_local.demo.submit import CodeShipper, PackedCode
from tether_local.demo.summary import DemoSummary, reference_weights_sha256

__all__ = [
    "DEFAULT_SCENARIO",
    "DEMO_POLICY",
    "JUNK_STEP",
    "MID_INTERVAL_S",
    "MONITOR_INTERVAL_S",
    "SCENARIOS",
    "SIGNED",
    "CodeShipper",
    "DemoError",
    "DemoSummary",
    "Flood",
    "FloodReport",
    "PackedCode",
    "Scenario",
    "TrainArgs",
    "demo_job",
    "demo_stack_config",
    "junk_requests",
    "reference_weights_sha256",
    "run_scenario",
]
