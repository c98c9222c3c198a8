"""The agent's configuration: the environment the control plane sets on a host, with the job
the first heartbeat brought (`bootstrap.py`) under the same names, validated once.

Every name comes from `functions/domain/agent_env.py` (a test keeps the two in step). The model
is checked before anything starts; a missing or malformed variable is reported by its name and
the agent exits 2 (see `main.py`). Knobs that are not part of the control-plane contract
(upload concurrency, bandwidth cap, local pruning) are command-line options in `Tuning`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

# The lease window when no TETHER_LEASE_EXPIRES_AT is given (docs/architecture.md#lease).
DEFAULT_LEASE_S = 3 * 3600


class SettingsError(Exception):
    """One line per bad variable: `NAME: reason`."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class AgentSettings(BaseModel):
    """Read from the environment by alias; field names are what the code uses."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=False)

    job_id: str = Field(
        alias="TETHER_JOB_ID", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$"
    )
    generation: int = Field(alias="TETHER_GENERATION", ge=1)
    api_url: str = Field(alias="TETHER_API_URL", pattern=r"^https?://\S+$")
    agent_token: str = Field(alias="TETHER_AGENT_TOKEN", min_length=1, repr=False)
    run: str | None = Field(default=None, alias="TETHER_RUN")
    checkpoint_dir: Path = Field(alias="TETHER_CHECKPOINT_DIR")
    marker: str = Field(
        default=".tether-complete", alias="TETHER_MARKER", min_length=1, pattern=r"^[^/\\]+$"
    )
    progress_file: Path | None = Field(default=None, alias="TETHER_PROGRESS_FILE")
    keep_last: int = Field(default=3, alias="TETHER_KEEP_LAST", ge=1, le=100)
    # The job's outputs dir (spec `outputs.dir`): uploaded at the end; unset, nothing is.
    outputs_dir: Path | None = Field(default=None, alias="TETHER_OUTPUTS_DIR")
    s3_endpoint: str = Field(alias="TETHER_S3_ENDPOINT", pattern=r"^https?://\S+$")
    s3_bucket: str = Field(alias="TETHER_S3_BUCKET", min_length=1)
    s3_prefix: str = Field(alias="TETHER_S3_PREFIX", pattern=r"^\S+/$")
    s3_access_key_id: str = Field(alias="TETHER_S3_ACCESS_KEY_ID", min_length=1)
    s3_secret_access_key: str = Field(alias="TETHER_S3_SECRET_ACCESS_KEY", min_length=1, repr=False)
    s3_session_token: str = Field(default="", alias="TETHER_S3_SESSION_TOKEN", repr=False)
    s3_credentials_expire_at: float | None = Field(
        default=None, alias="TETHER_S3_CREDENTIALS_EXPIRE_AT", gt=0
    )
    # The read-write key on jobs/<job_id>/g<generation>/ (the one above is read-only on the
    # job's prefix): checkpoints and log segments go up with it.
    s3_write_access_key_id: str = Field(alias="TETHER_S3_WRITE_ACCESS_KEY_ID", min_length=1)
    s3_write_secret_access_key: str = Field(
        alias="TETHER_S3_WRITE_SECRET_ACCESS_KEY", min_length=1, repr=False
    )
    s3_write_session_token: str = Field(
        default="", alias="TETHER_S3_WRITE_SESSION_TOKEN", repr=False
    )
    s3_write_credentials_expire_at: float | None = Field(
        default=None, alias="TETHER_S3_WRITE_CREDENTIALS_EXPIRE_AT", gt=0
    )
    # The recorded checkpoints it may restore, newest first: a JSON list, read by the restore
    # (which turns an unreadable list into a reported fresh start, never a failed start).
    restore_checkpoints: str | None = Field(
        default=None, alias="TETHER_RESTORE_CHECKPOINTS", max_length=64 * 1024
    )
    # Names (never values) of the user secrets the job needs, comma-separated; the values come
    # in the heartbeat reply and go only into the training command's environment.
    secrets: str = Field(
        default="", alias="TETHER_SECRETS", pattern=r"^([A-Z_][A-Z0-9_]*(,[A-Z_][A-Z0-9_]*)*)?$"
    )
    lease_expires_at: float | None = Field(default=None, alias="TETHER_LEASE_EXPIRES_AT", gt=0)
    heartbeat_interval_s: float = Field(
        default=15, alias="TETHER_HEARTBEAT_INTERVAL_S", gt=0, le=3600
    )
    grace_s: float = Field(default=120, alias="TETHER_GRACE_S", ge=0, le=86_400)
    # The checkpoint interval the control plane computed for this host, passed on to the
    # training command (tether_hooks saves on it by time when asked to).
    checkpoint_interval_s: float | None = Field(
        default=None, alias="TETHER_CHECKPOINT_INTERVAL_S", gt=0, le=86_400
    )
    on_dead_man: Literal["stop", "destroy"] = Field(default="stop", alias="TETHER_ON_DEAD_MAN")
    vast_url: str = Field(
        default="https://console.vast.ai", alias="TETHER_VAST_URL", pattern=r"^https?://\S+$"
    )
    gpu_probe: str = Field(
        default="nvml", alias="TETHER_GPU_PROBE", pattern=r"^(nvml|none|fake:.+)$"
    )
    probe_timeout_s: float = Field(default=10, alias="TETHER_PROBE_TIMEOUT_S", gt=0, le=600)
    work_dir: Path = Field(default=Path("/var/lib/tether"), alias="TETHER_WORK_DIR")
    # The local stack only: the job's absolute paths from the heartbeat are taken below it
    # (`bootstrap.environ_with_job`); read here so that the names stay one list.
    path_root: Path | None = Field(default=None, alias="TETHER_PATH_ROOT")
    # The job's code from git (agent/tether_agent/job_code.py); both or neither. The control plane
    # validated them (functions/domain/jobspec.py); here only their shape, so that a
    # malformed value is a configuration error (exit 2), never an argument git misreads.
    code_git: str | None = Field(
        default=None, alias="TETHER_CODE_GIT", max_length=2048, pattern=r"^[^-\s]\S*$"
    )
    code_commit: str | None = Field(
        default=None, alias="TETHER_CODE_COMMIT", pattern=r"^([0-9a-f]{40}|[0-9a-f]{64})$"
    )
    # The job's code as an archive (agent/tether_agent/code_archive.py): the sha256 of
    # jobs/<job_id>/code/<sha256>.tar.gz. Never with TETHER_CODE_GIT.
    code_archive_sha256: str | None = Field(
        default=None, alias="TETHER_CODE_ARCHIVE_SHA256", pattern=r"^[0-9a-f]{64}$"
    )
    container_id: str = Field(alias="CONTAINER_ID", pattern=r"^[0-9]+$")
    container_api_key: str = Field(alias="CONTAINER_API_KEY", min_length=1, repr=False)

    @field_validator("s3_prefix")
    @classmethod
    def _prefix_is_relative(cls, value: str) -> str:
        if value.startswith("/") or "//" in value:
            raise ValueError("must look like jobs/<job_id>/ (no leading or double slash)")
        return value

    @model_validator(mode="after")
    def _code_complete(self) -> AgentSettings:
        if (self.code_git is None) != (self.code_commit is None):
            raise ValueError("TETHER_CODE_GIT and TETHER_CODE_COMMIT must be set together")
        if self.code_git is not None and self.code_archive_sha256 is not None:
            raise ValueError("TETHER_CODE_GIT and TETHER_CODE_ARCHIVE_SHA256 exclude each other")
        return self

    @property
    def code_dir(self) -> Path | None:
        """Where the job's code is put and the command runs; None: the image as is."""
        return self.work_dir / "code" if self.code_git or self.code_archive_sha256 else None

    @property
    def secret_names(self) -> list[str]:
        return [n for n in self.secrets.split(",") if n]

    @property
    def first_lease_expires_at(self) -> float:
        return self.lease_expires_at or time.time() + DEFAULT_LEASE_S


class Tuning(BaseModel):
    """Agent-side knobs (command-line options), not part of the control-plane contract."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    upload_concurrency: int = Field(default=8, ge=1, le=64)
    file_concurrency: int = Field(default=4, ge=1, le=32)
    part_size_mb: int = Field(default=16, ge=5, le=5 * 1024)
    bandwidth_limit_mb_s: float | None = Field(default=None, gt=0)
    prune_local: bool = False
    poll_interval_s: float = Field(default=30, gt=0, le=3600)
    upload_nice: int = Field(default=10, ge=0, le=19)
    log_max_bytes: int = Field(default=50 * 1024 * 1024, ge=1024)
    log_backups: int = Field(default=3, ge=0, le=100)
    # Log shipping (tether_agent/logs.py); the interval defaults to two heartbeat intervals.
    log_segment_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    log_upload_interval_s: float | None = Field(default=None, gt=0, le=3600)
    # How long training waits for the heartbeat reply carrying the job's secrets.
    secrets_wait_s: float = Field(default=300, gt=0, le=3600)


ENV_NAMES: tuple[str, ...] = tuple(
    str(field.alias) for field in AgentSettings.model_fields.values() if field.alias
)


def load_settings(environ: Mapping[str, str] | None = None) -> AgentSettings:
    """Validate the agent's variables; empty strings count as unset (shells export them so)."""
    source = os.environ if environ is None else environ
    values = {name: source[name] for name in ENV_NAMES if source.get(name, "") != ""}
    try:
        return AgentSettings.model_validate(values)
    except ValidationError as exc:
        raise SettingsError(error_lines(exc)) from None


def error_lines(exc: ValidationError) -> list[str]:
    """One `NAME: reason` line per bad variable."""
    return [_error_line(err) for err in exc.errors()]


def _error_line(err: object) -> str:
    assert isinstance(err, dict)
    loc = err.get("loc", ())
    name = str(loc[0]) if loc else "environment"
    if err.get("type") == "missing":
        return f"{name}: required but not set"
    message = str(err.get("msg", "invalid"))
    return f"{name}: {message.removeprefix('Value error, ')}"
