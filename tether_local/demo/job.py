"""The demo's job: the tiny training command, its spec with second-scale timers, and the
configuration of the stack it runs on (see the package docstring for why those timers are safe).

The job is `examples/tiny-cpu/job.yaml`: `python tiny_train.py …` on the stock image
`python:3.12-slim` (locally its stand-in, `tether_local.hosts.images`: the standard library and
pip), in its own folder shipped as the job's code (`code: {dir: .}`, packed and uploaded as
`tether submit` does: `tether_local.demo.submit`)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from functions import settings as function_settings
from infra import names
from tether_local.stack import LocalStackConfig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = ROOT / "examples" / "tiny-cpu"
EXAMPLE_JOB = EXAMPLE_DIR / "job.yaml"  # its code.dir is EXAMPLE_DIR
TRAIN_SCRIPT = "tiny_train.py"  # in the job's code, the command's working directory
WEIGHTS_FILE = "weights.json"  # in each of its checkpoints; final_sha256.txt is its sha256
MONITOR_INTERVAL_S = 1.0
SUPERVISED_MAX_AGE_S = 4.0
VAST_DEADLINE_S = 0.5
# The heartbeat route's bucket the demo deploys with (`cdk deploy --parameters`): a fifth of the
# template's 50/s, burst 100. Locally each heartbeat is a function invocation in a worker process
# that reads moto over loopback, and a busy 2-core machine serves about 20 of those a second: at
# 50/s the heartbeat-flood scenario's junk could never outrun the bucket (nothing throttled) and
# would queue the agent's own heartbeats behind it, where API Gateway would throttle the junk and
# Lambda would serve the rest at once. At 10/s the junk still runs at three times the bucket.
DEMO_HEARTBEAT_RATE_PER_S = 10
DEMO_HEARTBEAT_BURST = 20
# A signed-looking header: the local front checks SigV4's shape, not its signature.
SIGNED = {
    "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDLOCALDEMO/20260101/us-east-1/"
    "execute-api/aws4_request, SignedHeaders=host;x-amz-date, Signature=0"
}
DEMO_POLICY: dict[str, Any] = {
    "heartbeat_interval_s": 1,
    "heartbeat_timeout_s": 6,
    "gpu_unresponsive_s": 3,
    "no_progress_s": 6,
    "startup_timeout_s": 30,
    "lease_window_s": 120,
    "max_restarts": 2,
}


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
            TRAIN_SCRIPT,
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
def demo_image() -> str:
    """The image of the demo's job (examples/tiny-cpu/job.yaml)."""
    spec: dict[str, Any] = yaml.safe_load(EXAMPLE_JOB.read_text())
    return str(spec["image"])


def demo_job(train: TrainArgs, **overrides: Any) -> dict[str, Any]:
    """examples/tiny-cpu/job.yaml with the scenario's command, second-scale timers and
    overrides (a mapping value merges into the section of that name). Its `code.dir` is
    relative to `EXAMPLE_JOB`'s folder: submit it with `tether_local.demo.submit`."""
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
    fast rents and boots, the monitor interval and the supervision max age the functions see,
    and a heartbeat bucket one machine can outrun (`DEMO_HEARTBEAT_RATE_PER_S`)."""
    return LocalStackConfig(
        root=root,
        monitor_interval_s=0,
        startup_s=0.5,
        created_s=0.2,
        restart_s=0.3,
        stop_grace_s=1.0,
        host_env={"TETHER_PROBE_TIMEOUT_S": "1"},  # the fake probe answers at once or hangs
        parameters={
            names.HEARTBEAT_RATE_PARAMETER: str(DEMO_HEARTBEAT_RATE_PER_S),
            names.HEARTBEAT_BURST_PARAMETER: str(DEMO_HEARTBEAT_BURST),
        },
        function_env={
            function_settings.MONITOR_INTERVAL_ENV: str(MONITOR_INTERVAL_S),
            function_settings.SUPERVISED_MAX_AGE_ENV: str(SUPERVISED_MAX_AGE_S),
            # A Vast call retries for half an interval, as the monitor's 30 s do of its 60 s.
            function_settings.VAST_DEADLINE_ENV: str(VAST_DEADLINE_S),
        },
    )


__all__ = [
    "DEMO_POLICY",
    "EXAMPLE_DIR",
    "EXAMPLE_JOB",
    "MONITOR_INTERVAL_S",
    "SIGNED",
    "TRAIN_SCRIPT",
    "WEIGHTS_FILE",
    "TrainArgs",
    "demo_image",
    "demo_job",
    "demo_stack_config",
]
