"""The job over the heartbeat, before anything else (docs/architecture.md#rented-host).

Vast bounds each value of an instance's environment at 256 characters, so a rented host's
environment carries only what bootstraps the agent: the job id, the generation, the API URL, the
agent token and short settings (`BootstrapSettings`). The rest of the job (its command,
checkpoint and outputs settings, code, own `env`, secrets' names, the checkpoints it may restore
and the generation's two storage keys) comes in the reply to a heartbeat that asks for it
(`wants_job`), answered only to the current generation's token while it is told to continue.

`receive_job` sends those heartbeats (the `Heartbeater`'s back-off, phase `starting`) until the
job comes. Nothing is restored, trained or uploaded before it. The dead-man rule holds
meanwhile: the lease from the environment, renewed only by valid replies, and when it runs out
(after one try of three heartbeat intervals, for an agent started again with its rent's lease)
the agent stops its own instance, as it does when told `stop` or `superseded`. A wrong token is
refused (401) like any heartbeat: the agent keeps trying until its lease ends.

`environ_with_job` puts the job into the names the agent's settings read (`settings.py`), so the
rest of the agent, and the training command's environment, see exactly what they saw when the
instance environment carried it all. An agent started with those names already set (tests,
benchmarks: `job_in_environ`) asks for nothing.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tether_agent.agent import ExitCode
from tether_agent.heartbeat_sender import Heartbeater, Lease
from tether_agent.protocol import (
    Command,
    GpuProbe,
    HeartbeatRequest,
    JobBootstrap,
    Phase,
    StorageCredentials,
)
from tether_agent.settings import DEFAULT_LEASE_S, SettingsError, error_lines
from tether_agent.vast import stop_own_instance

log = logging.getLogger(__name__)
LEASE_RETRY_INTERVALS = 3  # an agent started with its lease run out tries this long first

# The names the job arrives under; set in the environment, the agent does not ask.
_JOB_MARKER = "TETHER_S3_ACCESS_KEY_ID"


class BootstrapSettings(BaseModel):
    """What the instance environment must carry for the agent to ask for its job (the same
    names and rules as `AgentSettings`)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=False)

    job_id: str = Field(
        alias="TETHER_JOB_ID", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$"
    )
    generation: int = Field(alias="TETHER_GENERATION", ge=1)
    api_url: str = Field(alias="TETHER_API_URL", pattern=r"^https?://\S+$")
    agent_token: str = Field(alias="TETHER_AGENT_TOKEN", min_length=1, repr=False)
    lease_expires_at: float | None = Field(default=None, alias="TETHER_LEASE_EXPIRES_AT", gt=0)
    heartbeat_interval_s: float = Field(
        default=15, alias="TETHER_HEARTBEAT_INTERVAL_S", gt=0, le=3600
    )
    on_dead_man: Literal["stop", "destroy"] = Field(default="stop", alias="TETHER_ON_DEAD_MAN")
    vast_url: str = Field(
        default="https://console.vast.ai", alias="TETHER_VAST_URL", pattern=r"^https?://\S+$"
    )
    path_root: Path | None = Field(default=None, alias="TETHER_PATH_ROOT")
    container_id: str = Field(alias="CONTAINER_ID", pattern=r"^[0-9]+$")
    container_api_key: str = Field(alias="CONTAINER_API_KEY", min_length=1, repr=False)


def job_in_environ(environ: Mapping[str, str]) -> bool:
    """The environment already carries the job (an agent run without a control plane's
    bootstrap: tests, benchmarks)."""
    return environ.get(_JOB_MARKER, "") != ""


def load_bootstrap_settings(environ: Mapping[str, str]) -> BootstrapSettings:
    names = [str(f.alias) for f in BootstrapSettings.model_fields.values() if f.alias]
    values = {name: environ[name] for name in names if environ.get(name, "") != ""}
    try:
        return BootstrapSettings.model_validate(values)
    except ValidationError as exc:
        raise SettingsError(error_lines(exc)) from None


def environ_with_job(
    environ: Mapping[str, str], job: JobBootstrap, path_root: Path | None = None
) -> dict[str, str]:
    """`environ` with the job's own `env` and the job under the agent's names. With
    `path_root` (the local stack), the job's absolute paths are taken below it. The control
    plane's copy is `functions/domain/job_bootstrap.py::environ_with_job` (a contract test keeps
    the two equal)."""
    merged = dict(environ)
    merged.update(job.env)  # as Vast's env did: over the image's; never a TETHER_* name
    storage = job.storage
    ours: dict[str, str | None] = {
        "TETHER_RUN": job.run,
        "TETHER_CHECKPOINT_DIR": _rooted(job.checkpoint_dir, path_root),
        "TETHER_MARKER": job.marker,
        "TETHER_PROGRESS_FILE": _rooted(job.progress_file, path_root),
        "TETHER_KEEP_LAST": str(job.keep_last),
        "TETHER_OUTPUTS_DIR": _rooted(job.outputs_dir, path_root),
        "TETHER_CODE_GIT": job.code_git,
        "TETHER_CODE_COMMIT": job.code_commit,
        "TETHER_CODE_ARCHIVE_SHA256": job.code_archive_sha256,
        "TETHER_SECRETS": ",".join(job.secrets) or None,
        "TETHER_RESTORE_CHECKPOINTS": _checkpoints(job),
        **storage_environ(storage),
    }
    for name, value in ours.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged


def storage_environ(storage: StorageCredentials) -> dict[str, str | None]:
    """The generation's two keys under the agent's names."""
    return {
        "TETHER_S3_ENDPOINT": storage.endpoint,
        "TETHER_S3_BUCKET": storage.bucket,
        "TETHER_S3_PREFIX": storage.read.prefix,
        "TETHER_S3_ACCESS_KEY_ID": storage.read.access_key_id,
        "TETHER_S3_SECRET_ACCESS_KEY": storage.read.secret_access_key,
        "TETHER_S3_SESSION_TOKEN": storage.read.session_token or None,
        "TETHER_S3_CREDENTIALS_EXPIRE_AT": repr(float(storage.read.expires_at)),
        "TETHER_S3_WRITE_ACCESS_KEY_ID": storage.write.access_key_id,
        "TETHER_S3_WRITE_SECRET_ACCESS_KEY": storage.write.secret_access_key,
        "TETHER_S3_WRITE_SESSION_TOKEN": storage.write.session_token or None,
        "TETHER_S3_WRITE_CREDENTIALS_EXPIRE_AT": repr(float(storage.write.expires_at)),
    }


def _rooted(path: str | None, root: Path | None) -> str | None:
    if path is None or root is None or not path.startswith("/"):
        return path
    return str(root / path.lstrip("/"))


def _checkpoints(job: JobBootstrap) -> str | None:
    if not job.restore:
        return None
    return "[" + ",".join(r.model_dump_json(exclude_none=True) for r in job.restore) + "]"


@dataclass(frozen=True)
class Received:
    """The job and the lease its heartbeats renewed (the agent goes on with both)."""

    job: JobBootstrap
    lease: Lease


class _Waiting:
    """What the bootstrap heartbeats have brought so far."""

    def __init__(self) -> None:
        self.came = threading.Event()
        self.job: JobBootstrap | None = None
        self.command: tuple[Command, str | None] | None = None
        self.signalled: int | None = None
        self.phase: Phase = "starting"

    def offer(self, job: JobBootstrap) -> None:
        if self.job is None:
            self.job = job
            self.came.set()

    def told(self, command: Command, reason: str | None) -> None:
        if self.command is None:
            log.warning("control plane says %s (%s)", command, reason or "no reason given")
            self.command = (command, reason)
        self.came.set()


def receive_job(settings: BootstrapSettings, *, poll_s: float = 0.2) -> Received | int:
    """Heartbeats asking for the job until it comes; else the agent's exit code, once the
    instance is stopped (`superseded`, `stop`, the lease ran out) or a signal came."""
    lease = Lease(settings.lease_expires_at or time.time() + DEFAULT_LEASE_S)
    waiting = _Waiting()

    def request() -> HeartbeatRequest:
        return HeartbeatRequest(
            job_id=settings.job_id,
            generation=settings.generation,
            phase=waiting.phase,
            gpu=GpuProbe(available=False),
            agent_time=time.time(),
            wants_job=waiting.job is None,
        )

    heartbeater = Heartbeater(
        settings.api_url,
        settings.agent_token,
        settings.heartbeat_interval_s,
        request,
        lease,
        on_command=waiting.told,
        on_credentials=lambda _: None,  # the job's own storage keys come with it
        on_job=waiting.offer,
    )
    previous = _handle_signals(waiting)
    started = time.monotonic()
    heartbeater.start()
    try:
        log.info("asking the control plane for the job (generation %d)", settings.generation)
        while not waiting.came.wait(poll_s):
            if waiting.signalled is not None:
                break
            retried = time.monotonic() - started >= LEASE_RETRY_INTERVALS * (
                settings.heartbeat_interval_s
            )
            if lease.expired() and retried:
                break
        job = waiting.job
        if job is not None and waiting.command is None and waiting.signalled is None:
            heartbeater.stop(final=False)
            log.info("job received: restore candidates %d", len(job.restore))
            return Received(job=job, lease=lease)
        return _give_up(settings, waiting, heartbeater)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _give_up(settings: BootstrapSettings, waiting: _Waiting, heartbeater: Heartbeater) -> int:
    """No job: say `stopping`, and stop the instance unless a signal came (the host is being
    stopped from outside then)."""
    waiting.phase = "stopping"
    command = waiting.command[0] if waiting.command else None
    heartbeater.stop(final=command != "superseded")
    if waiting.signalled is not None and command is None:
        log.warning("stopped by signal %d before the job came", waiting.signalled)
        return 128 + waiting.signalled
    if command == "superseded":
        code = ExitCode.SUPERSEDED
    elif command == "stop":
        code = ExitCode.STOPPED
    else:
        code = ExitCode.LEASE_EXPIRED
        log.error("lease expired before the job came (%s)", heartbeater.last_error or "no job")
    stop_own_instance(
        settings.vast_url,
        settings.container_id,
        settings.container_api_key,
        settings.on_dead_man,
        backoff_s=min(1.0, settings.heartbeat_interval_s),
    )
    return int(code)


def _handle_signals(waiting: _Waiting) -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        waiting.signalled = signum
        waiting.came.set()

    return {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
