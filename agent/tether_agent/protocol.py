"""The agent ⇄ API heartbeat contract (docs/architecture.md#heartbeat), mirrored from the control
plane.

The agent is a separate distribution and cannot import `functions`; these models must stay
identical to `functions/domain/heartbeat_contract.py` (a contract test compares the JSON schemas).
Times are epoch seconds (float). The reply carries `server_time` so the agent can turn the
absolute lease into a local deadline without trusting its own clock.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Phase = Literal["starting", "restoring", "training", "uploading", "stopping", "finished", "failed"]
Command = Literal["continue", "stop", "superseded"]


# DynamoDB stores no number nearer zero than 1e-130 (`agent_time: 1e-166` was a 500). Nothing
# the agent measures means anything below this: such a value reads as 0, then meets its bounds.
SMALLEST_NUMBER = 1e-9


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _flush_to_zero(cls, value: Any) -> Any:
        if isinstance(value, float) and value != 0 and abs(value) < SMALLEST_NUMBER:
            return 0.0
        return value


# Upper bounds keep every number storable (DynamoDB holds 38 digits up to 1e125) and sane;
# past them a heartbeat is a client mistake (400), never a failed write (500).
MAX_GENERATION = 1_000_000
MAX_STEP = 10**15
MAX_BYTES = 10**18
MAX_EPOCH_S = 1e11  # year 5138: a clock off by centuries still fits
MAX_MB = 1e9
MAX_SECONDS = 1e9
MAX_REASON = 300  # characters of one skipped candidate's reason
MAX_RESTORE_CANDIDATES = 16  # the recorded checkpoints a generation is given, at most
MAX_SECRETS = 32  # user secrets one job may list
# The end of a failed training command's output the heartbeat carries: its last lines, at most
# this many, and at most this many characters of them.
MAX_EXIT_OUTPUT_LINES = 20
MAX_EXIT_OUTPUT = 2048


class GpuProbe(_Wire):
    available: bool = Field(
        description="False when the host has no NVML/GPU: not a health failure."
    )
    responsive: bool = True
    utilization_pct: float | None = Field(default=None, ge=0, le=100)
    memory_used_mb: float | None = Field(default=None, ge=0, le=MAX_MB)
    memory_total_mb: float | None = Field(default=None, ge=0, le=MAX_MB)
    unresponsive_s: float = Field(default=0, ge=0, le=MAX_SECONDS)
    error: str | None = Field(default=None, max_length=1024)


class CheckpointRef(_Wire):
    step: int = Field(ge=0, le=MAX_STEP)
    generation: int = Field(ge=1, le=MAX_GENERATION)
    manifest_key: str = Field(min_length=1, max_length=1024)
    manifest_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 of the manifest's bytes as uploaded; the control plane records "
        "only checkpoints that carry it, and restore trusts a manifest only if it matches.",
    )


MAX_OUTPUT_FILES = 100_000  # the most files one outputs manifest lists


class OutputsRef(_Wire):
    """The job's result as uploaded by a generation: the outputs dir's files under
    `g<generation>/outputs/files/` and, written last, their manifest (size and sha256 of each)."""

    generation: int = Field(ge=1, le=MAX_GENERATION)
    manifest_key: str = Field(min_length=1, max_length=1024)
    manifest_sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="sha256 of the manifest's bytes as uploaded."
    )
    files: int = Field(ge=0, le=MAX_OUTPUT_FILES)
    bytes: int = Field(ge=0, le=MAX_BYTES)


class SkippedCheckpoint(_Wire):
    """A restore candidate the agent passed over, and why (any exception on it is a skip)."""

    manifest_key: str = Field(min_length=1, max_length=1024)
    reason: str = Field(min_length=1, max_length=MAX_REASON)


class RestoreReport(_Wire):
    """How the agent's restore went, sent in every heartbeat once it is over.

    `restored`: a recorded checkpoint verified and was restored (after skipping `skipped`);
    `fresh`: none was usable (or none was recorded), training starts from scratch;
    `unreadable`: storage could not be read, so no candidate could be judged (the agent fails
    the generation rather than throw the recorded work away)."""

    outcome: Literal["restored", "fresh", "unreadable"]
    candidates: int = Field(ge=0, le=MAX_RESTORE_CANDIDATES)
    skipped: list[SkippedCheckpoint] = Field(
        default_factory=list, max_length=MAX_RESTORE_CANDIDATES
    )


# Checkpoints the agent found below the checkpoint dir, or unmarked in it (never uploaded), at most
# this many, each path relative to the checkpoint dir and cut to this length.
MAX_MISPLACED = 4
MAX_MISPLACED_PATH = 300
MisplacedPath = Annotated[str, Field(min_length=1, max_length=MAX_MISPLACED_PATH)]


class ResumeReport(_Wire):
    """Where training resumed on this host and when it got going (agent clock), sent in every
    heartbeat once the training process has started.

    `step`: the restored checkpoint's step, 0 for a fresh start; `started_at`: when the training
    process started; `first_step_at`: when the agent first saw a step past `step` (progress
    file, marker or `trainer_state.json`, polled ten times a second), None until then. Recovery
    is measured to `first_step_at`, not to the process start."""

    step: int = Field(ge=0, le=MAX_STEP)
    started_at: float = Field(gt=0, le=MAX_EPOCH_S)
    first_step_at: float | None = Field(default=None, gt=0, le=MAX_EPOCH_S)

    @model_validator(mode="after")
    def _first_step_after_start(self) -> ResumeReport:
        if self.first_step_at is not None and self.first_step_at < self.started_at:
            raise ValueError("first_step_at is before started_at")
        return self


class HeartbeatRequest(_Wire):
    job_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    generation: int = Field(ge=1, le=MAX_GENERATION)
    phase: Phase
    step: int | None = Field(default=None, ge=0, le=MAX_STEP)
    total_steps: int | None = Field(
        default=None,
        ge=1,
        le=MAX_STEP,
        description="The steps the script will train in all, as it says on disk: the progress "
        "file's `total_steps`, else the Trainer's `max_steps` in `trainer_state.json`.",
    )
    last_checkpoint: CheckpointRef | None = None
    restored_checkpoint: CheckpointRef | None = None
    restore: RestoreReport | None = Field(
        default=None, description="How the restore went; None until it is over."
    )
    misplaced_checkpoints: list[MisplacedPath] = Field(
        default_factory=list,
        max_length=MAX_MISPLACED,
        description="Checkpoints (marked, or looking complete) found anywhere below the "
        "checkpoint dir, which the agent never uploads: e.g. output_dir set to a folder below it, "
        "Lightning's lightning_logs/version_0/checkpoints.",
    )
    unmarked_checkpoints: list[MisplacedPath] = Field(
        default_factory=list,
        max_length=MAX_MISPLACED,
        description="Checkpoints in the checkpoint dir that look complete (a framework's last "
        "file, or a single checkpoint file) but carry no marker, so are never uploaded.",
    )
    resumed: ResumeReport | None = Field(
        default=None, description="Where training resumed and when; None until it started."
    )
    outputs: OutputsRef | None = Field(
        default=None, description="The outputs this generation uploaded; None until then."
    )
    gpu: GpuProbe
    exit_code: int | None = Field(default=None, ge=-255, le=255)
    exit_output: str | None = Field(
        default=None,
        max_length=MAX_EXIT_OUTPUT,
        description="Why the generation failed, once it has: the last lines of the training "
        "command's output (stdout and stderr as it wrote them) after a non-zero exit, or why "
        "training could not start; scrubbed of the agent's secrets, control characters kept.",
    )
    bytes_downloaded: int = Field(default=0, ge=0, le=MAX_BYTES)
    bytes_uploaded: int = Field(default=0, ge=0, le=MAX_BYTES)
    last_upload_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_SECONDS,
        description="Seconds the last checkpoint upload of this generation took (its files and "
        "manifest); the next generation's checkpoint interval is recomputed from it.",
    )
    agent_time: float = Field(gt=0, le=MAX_EPOCH_S)
    credentials_expire_at: float | None = Field(
        default=None,
        ge=0,
        le=MAX_EPOCH_S,
        description="Expiry of the storage credentials the agent holds; newer ones come back.",
    )
    wants_secrets: bool = Field(
        default=False,
        description="The agent has not yet received the job's user secrets: the reply to a "
        "current generation carries them.",
    )
    wants_job: bool = Field(
        default=False,
        description="The agent has not yet received its job (`JobBootstrap`): the reply to a "
        "current generation told to continue carries it.",
    )


class StorageKey(_Wire):
    """One R2 temporary credential: one permission on one prefix, until `expires_at`."""

    access_key_id: str = Field(min_length=1)
    secret_access_key: str = Field(min_length=1)
    session_token: str
    expires_at: float
    prefix: str = Field(min_length=1, description="The only keys it reaches.")


class StorageCredentials(_Wire):
    """A generation's two keys (R2 temporary credentials carry one permission each)."""

    endpoint: str = Field(min_length=1)
    bucket: str = Field(min_length=1)
    read: StorageKey = Field(description="object-read-only on jobs/<job_id>/")
    write: StorageKey = Field(description="object-read-write on jobs/<job_id>/g<generation>/")

    @property
    def expires_at(self) -> float:
        """When the first of the two stops working."""
        return min(self.read.expires_at, self.write.expires_at)


class SecretValues(_Wire):
    """The job's user secrets, in the reply to a current generation that asked for them.

    `values`: name → value of every secret found; `missing`: names the spec lists that the
    secret store no longer holds (the agent fails the generation, naming them)."""

    values: dict[str, str] = Field(default_factory=dict, max_length=MAX_SECRETS)
    missing: list[str] = Field(default_factory=list, max_length=MAX_SECRETS)


# What a job spec allows (functions/domain/jobspec.py), so a bootstrap never fails to validate.
MAX_RUN = 16_384  # characters of the training command
MAX_JOB_ENV = 256  # variables of the job's own `env`
MAX_JOB_ENV_VALUE = 32_768  # characters of one of them
MAX_PATH = 1024  # characters of a checkpoint, progress or outputs path
JobEnvValue = Annotated[str, Field(max_length=MAX_JOB_ENV_VALUE)]
SecretName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Z_][A-Z0-9_]*$")]


class JobBootstrap(_Wire):
    """What the agent needs to run its generation and that the instance environment does not
    carry (Vast bounds each env value at 256 characters; docs/architecture.md#rented-host): the
    job's command, checkpoint and outputs settings, code, own `env`, the names of its secrets,
    the recorded checkpoints this generation may restore (newest first) and the generation's
    two storage keys. Sent once, in the reply to a current generation whose heartbeat asked."""

    run: str = Field(min_length=1, max_length=MAX_RUN)
    checkpoint_dir: str = Field(min_length=1, max_length=MAX_PATH)
    marker: str = Field(min_length=1, max_length=255)
    progress_file: str | None = Field(default=None, min_length=1, max_length=MAX_PATH)
    keep_last: int = Field(ge=1, le=100)
    outputs_dir: str | None = Field(default=None, min_length=1, max_length=MAX_PATH)
    code_git: str | None = Field(default=None, min_length=1, max_length=2048)
    code_commit: str | None = Field(default=None, min_length=1, max_length=64)
    code_archive_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    env: dict[str, JobEnvValue] = Field(default_factory=dict, max_length=MAX_JOB_ENV)
    secrets: list[SecretName] = Field(default_factory=list, max_length=MAX_SECRETS)
    restore: list[CheckpointRef] = Field(
        default_factory=list,
        max_length=MAX_RESTORE_CANDIDATES,
        description="The recorded checkpoints this generation may restore, newest first.",
    )
    storage: StorageCredentials


class HeartbeatReply(_Wire):
    command: Command
    lease_expires_at: float = Field(description="Absolute; 0 when superseded (no lease).")
    server_time: float
    credentials: StorageCredentials | None = None
    reason: str | None = None
    secrets: SecretValues | None = Field(
        default=None, description="Only to a current generation whose heartbeat asked."
    )
    job: JobBootstrap | None = Field(
        default=None, description="Only to a current generation whose heartbeat asked."
    )
