"""The demo's scenarios: `SCENARIOS` is the catalogue `run_scenario` and the CLI read, each
entry what the run trains, its spec's overrides, what it expects, and the function that drives
its faults (through the stack's chaos controls). The drivers live by family: `host_faults`
(the host dies, hangs, stalls or crashes), `market_faults` (an interruptible host outbid),
`service_faults` (the monitor, Vast, the budget),
`transfer_kills` (killed mid-upload or mid-restore), `hostile_hosts` (zombie, forged
manifests), `monitor_faults` and `flood`.
"""

from __future__ import annotations

from functions.domain.job import JobState
from tether_local.demo.flood import drive_heartbeat_flood
from tether_local.demo.host_faults import (
    MID_INTERVAL_S,
    crash_loop,
    dead_twice,
    hung_gpu,
    hung_gpu_real_probe,
    no_progress,
)
from tether_local.demo.hostile_hosts import forged_manifest, zombie
from tether_local.demo.job import TrainArgs
from tether_local.demo.market_faults import outbid
from tether_local.demo.monitor_faults import monitor_crash
from tether_local.demo.run import Scenario
from tether_local.demo.service_faults import (
    over_budget,
    supervisor_dead,
    vast_flaky,
    vast_outage_during_stop,
)
from tether_local.demo.transfer_kills import (
    TRANSFER_BALLAST_MB,
    killed_during_restore,
    killed_during_upload,
)

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "dead-twice",
            "the host is destroyed twice mid-training; each time a new one resumes the work",
            TrainArgs(steps=300),
            dead_twice,
        ),
        Scenario(
            "hung-gpu",
            "the GPU stops answering; the host is replaced as hung",
            TrainArgs(steps=300),
            hung_gpu,
        ),
        Scenario(
            "hung-gpu-real-probe",
            "a real host's probe path (the agent's NVML probe over a fake pynvml): the driver "
            "wedges, NVML calls block; the host is replaced as hung",
            TrainArgs(steps=300),
            hung_gpu_real_probe,
            host_gpu="fake-nvml",
        ),
        Scenario(
            "no-progress",
            "training stalls with the GPU idle; the host is replaced as hung",
            TrainArgs(steps=160),
            no_progress,
        ),
        Scenario(
            "supervisor-dead",
            "the monitor stops: the lease runs out and the host stops itself; the monitor "
            "returns and the job resumes",
            TrainArgs(steps=600),
            supervisor_dead,
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
            over_budget,
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
            vast_flaky,
        ),
        Scenario(
            "zombie",
            "a destroyed host returns after its replacement: superseded, never billed, its key "
            "refused outside its own prefix, its late checkpoint never restored",
            TrainArgs(steps=600),
            zombie,
        ),
        Scenario(
            "crash-loop",
            "the training command exits 1: restarted up to max_restarts, then FAILED",
            TrainArgs(steps=200, crash_at_step=75),
            crash_loop,
            expected_state=JobState.FAILED,
        ),
        Scenario(
            "vast-outage-during-stop",
            "Vast answers 502 to everything while the job is cancelled: the stop fails, is "
            "retried as a new attempt, and the host is destroyed soon after Vast is back",
            TrainArgs(steps=100_000),
            vast_outage_during_stop,
            expected_state=JobState.CANCELLED,
        ),
        Scenario(
            "killed-during-upload",
            "the host dies while it uploads a checkpoint: the half-written one never gets a "
            "manifest, the next host restores the one before it",
            TrainArgs(steps=200, ballast_mb=TRANSFER_BALLAST_MB),
            killed_during_upload,
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
            killed_during_restore,
            spec_overrides={"data": {"upload_gb_per_checkpoint": 0.1}},
        ),
        Scenario(
            "forged-manifest",
            "the current host writes crafted manifests (bad JSON, ../ paths, a huge size, a "
            "wrong sha256) and reports them: recorded, each skipped with its reason by the "
            "next host, which restores the last real checkpoint",
            TrainArgs(steps=300),
            forged_manifest,
            spec_overrides={"checkpoint": {"keep_last": 8}},
        ),
        Scenario(
            "outbid",
            "the job runs on an interruptible (bid) host; outbid, the monitor waits and the host "
            "wins its machine back and trains on; outbid again, the wait runs out and the host "
            "is replaced",
            TrainArgs(steps=300),
            outbid,
            # The wait is worth the replacement's start-up: 15 s here (no download).
            spec_overrides={
                "resources": {"market": "interruptible"},
                "expected_startup_min": 0.25,
                "data": {"download_gb": 0},
            },
            timeout_s=90,
        ),
    )
}
DEFAULT_SCENARIO = "dead-twice"


__all__ = ["DEFAULT_SCENARIO", "MID_INTERVAL_S", "SCENARIOS", "TRANSFER_BALLAST_MB"]
