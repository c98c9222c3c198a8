"""The job spec: one strict model for YAML files (users) and JSON on the wire (API).

Field names carry their unit (`_gb`, `_usd`, `_s`, `_min`, `_hours`, `_mbps`, `_pct`).
Unknown keys are rejected; impossible values are rejected with the field path and a reason
(see `functions.domain.errors`). Defaults: docs/architecture.md#health-policy.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from functions.domain.code_archive import MAX_ARCHIVE_BYTES, SHA256
from functions.domain.documents import MAX_JOB_FILE_BYTES, DocumentTooComplex, load_yaml
from functions.domain.errors import FieldError, field_errors
from functions.domain.gpu_reference import canonical_gpu_name, unknown_gpu_reason
from functions.domain.secrets import MAX_SECRETS, secret_name_problem

# Environment names the agent and the onstart script own; a job may not override them.
RESERVED_ENV_PREFIXES = ("TETHER_", "AWS_", "VAST_", "CONTAINER_", "CLOUDFLARE_", "R2_")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# DynamoDB stores numbers from 1e-130 to 1e126 in magnitude. A spec number nearer zero than
# this, and not zero, is a mistake: refused with the field named (400), never a failed write of
# the job (500). (Found by tests/integration/api/test_bad_input.py: expected_hours=1.6e-252.)
SMALLEST_NUMBER = 1e-9


class _Strict(BaseModel):
    # Every number is bounded by its field; infinity and NaN (`1e400` in JSON, `.inf` in YAML)
    # are refused as such, whatever the bounds say.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        if isinstance(value, float) and value != 0 and abs(value) < SMALLEST_NUMBER:
            raise ValueError(f"must be 0 or at least {SMALLEST_NUMBER:g} (too close to zero)")
        return value


PositiveFloat = Annotated[float, Field(gt=0)]
Market = Literal["on-demand", "interruptible", "auto"]


class Resources(_Strict):
    """What a host must offer. Matches Vast's offer fields (see functions.domain.offer)."""

    gpu_names: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list,
        max_length=32,
        description='Accepted GPU models as Vast names them ("RTX 4090"); empty = any.',
    )
    gpu_count: int = Field(default=1, ge=1, le=16)
    min_gpu_ram_gb: float = Field(default=0, ge=0, le=1024)
    min_disk_gb: float = Field(
        default=40, ge=8, le=16384, description="Allocated disk; Vast's minimum is 8 GB."
    )
    min_reliability: float = Field(default=0.95, ge=0, le=1)
    min_download_mbps: float = Field(default=100, ge=0, le=100_000)
    max_usd_per_hour: PositiveFloat | None = Field(default=None, le=1000)
    market: Market = Field(
        default="on-demand",
        description="on-demand: hosts that run until destroyed; interruptible: bid instances, "
        "stopped when outbid; auto: whichever the planner expects to cost less in total.",
    )
    bid_margin: float = Field(
        default=0.1,
        ge=0,
        le=2,
        description="Interruptible: bid this share above the offer's min_bid (0.1 = 10 %).",
    )
    outbid_hazard_per_hour: float = Field(
        default=0.1,
        ge=0,
        le=10,
        description="Interruptible: expected outbids per hour until the job's own are measured.",
    )

    @field_validator("gpu_names")
    @classmethod
    def _no_duplicate_gpus(cls, names: list[str]) -> list[str]:
        if len({n.lower() for n in names}) != len(names):
            raise ValueError("lists a GPU model twice")
        return names


class Data(_Strict):
    download_gb: float = Field(
        default=0, ge=0, le=100_000, description="Downloaded at start (model, data set)."
    )
    upload_gb_per_checkpoint: float = Field(default=0, ge=0, le=10_000)


class Checkpoint(_Strict):
    dir: str = Field(default="/workspace/checkpoints", min_length=1, max_length=1024)
    marker: str = Field(default=".tether-complete", min_length=1, max_length=255)
    keep_last: int = Field(default=3, ge=1, le=100)
    interval_min: PositiveFloat | None = Field(
        default=None,
        le=24 * 60,
        description="How often the script saves; unset = the planner recommends one.",
    )
    progress_file: str | None = Field(default=None, min_length=1, max_length=1024)

    @field_validator("dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(
                "must be an absolute path inside the container, e.g. /workspace/checkpoints"
            )
        return value

    @field_validator("marker")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if "/" in value or value in {".", ".."}:
            raise ValueError("must be a file name, not a path")
        return value


class Outputs(_Strict):
    """The job's result: a directory the agent uploads, with a manifest, when the training exits
    0 (and on stop, cancel and lease expiry, after the final checkpoint). Set, a job ends
    FINISHED only once that upload is recorded (docs/architecture.md#invariant-10)."""

    dir: str = Field(default="/workspace/outputs", min_length=1, max_length=1024)

    @field_validator("dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(
                "must be an absolute path inside the container, e.g. /workspace/outputs"
            )
        return value


# Each threshold is observed through heartbeats, so its floor is a multiple of the heartbeat
# interval (relative), above a small absolute floor. Real jobs keep the safe defaults; a local
# demo with a 1 s heartbeat may use second-scale timers without bypassing validation.
HEARTBEATS_PER_TIMEOUT = 3  # two missed heartbeats never kill a job
HEARTBEATS_PER_GPU_UNRESPONSIVE = 2  # a hung probe must be seen in at least two heartbeats
HEARTBEATS_PER_NO_PROGRESS = 4
HEARTBEATS_PER_STARTUP = 4
_RELATIVE_FLOORS = {
    "heartbeat_timeout_s": HEARTBEATS_PER_TIMEOUT,
    "gpu_unresponsive_s": HEARTBEATS_PER_GPU_UNRESPONSIVE,
    "no_progress_s": HEARTBEATS_PER_NO_PROGRESS,
    "startup_timeout_s": HEARTBEATS_PER_STARTUP,
}


class Policy(_Strict):
    """Health thresholds (docs/architecture.md#health-policy). Floors are relative to
    `heartbeat_interval_s` (see `_RELATIVE_FLOORS`): e.g. `heartbeat_timeout_s ≥ 3 ×
    heartbeat_interval_s`. Defaults are held to them too (`validate_default`): a long interval with
    the default timeout would otherwise be accepted at submit and refused when the stored job is
    read back."""

    heartbeat_interval_s: int = Field(
        default=15, ge=1, le=600, description="How often the agent heartbeats."
    )
    heartbeat_timeout_s: int = Field(default=180, ge=3, le=86_400, validate_default=True)
    gpu_unresponsive_s: int = Field(default=300, ge=2, le=86_400, validate_default=True)
    no_progress_s: int = Field(default=1800, ge=4, le=7 * 86_400, validate_default=True)
    gpu_idle_util_pct: float = Field(
        default=5, ge=0, le=100, description="'Near zero' GPU utilisation."
    )
    startup_timeout_s: int = Field(default=1200, ge=4, le=86_400, validate_default=True)
    # Replacement caps, one per cause (docs/architecture.md#replacement-caps): once a cause has used
    # its cap, the next verdict of that cause ends the job FAILED with the reason (and a
    # notification) instead of renting again.
    max_restarts: int = Field(
        default=3, ge=0, le=100, description="Restarts after the training command crashed."
    )
    max_replacements_dead: int = Field(
        default=5, ge=0, le=100, description="Replacements of a host that died."
    )
    max_replacements_hung: int = Field(
        default=3, ge=0, le=100, description="Replacements of a host that hung."
    )
    max_moves: int = Field(
        default=1,
        ge=0,
        le=10,
        description="Moves to a cheaper host once the job's own pace is known "
        "(docs/architecture.md#moves); 0 never moves a healthy job.",
    )
    lease_window_s: int = Field(default=3 * 3600, ge=10, le=7 * 86_400)
    on_dead_man: Literal["stop", "destroy"] = "stop"

    @field_validator(*_RELATIVE_FLOORS)
    @classmethod
    def _heartbeats_apart(cls, value: int, info: ValidationInfo) -> int:
        interval = info.data.get("heartbeat_interval_s")
        times = _RELATIVE_FLOORS[str(info.field_name)]
        if isinstance(interval, int) and value < times * interval:
            raise ValueError(
                f"must be ≥ {times} × policy.heartbeat_interval_s ({times * interval} s), "
                "or heartbeats too far apart would trip it"
            )
        return value

    @model_validator(mode="after")
    def _lease_outlives_heartbeat(self) -> Policy:
        if self.lease_window_s <= self.heartbeat_timeout_s:
            raise ValueError(
                "lease_window_s must be longer than heartbeat_timeout_s, "
                "or hosts would stop themselves before the supervisor notices them"
            )
        return self


# A git URL the agent may clone: https, ssh (`ssh://…` or scp-like `git@host:path`) or file
# (the local stack and tests). No other transport: `ext::` runs commands, and a leading `-`
# would be read by git as an option.
_GIT_URL = re.compile(r"^(https://|http://|ssh://|file://|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:)[^\s]+$")
# A password (any scheme) or any user name over http(s), where it can only be a token.
_GIT_URL_USERINFO = re.compile(r"^([a-z]+://[^/@]*:[^/@]*@|https?://[^/]*@)")
_COMMIT = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")


class CodeArchive(_Strict):
    """The packed working directory, as uploaded: `tether submit` fills it from `code.dir`."""

    sha256: str = Field(
        min_length=64, max_length=64, description="sha256 of the tar.gz, 64 lowercase hex digits."
    )
    size_bytes: int = Field(gt=0, le=MAX_ARCHIVE_BYTES, description="The tar.gz's size in bytes.")

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not SHA256.match(value):
            raise ValueError("must be 64 lowercase hex digits (a sha256)")
        return value


class JobCode(_Strict):
    """Where the job's code comes from: `{git: URL, commit: SHA}` (the agent clones that
    commit), or `{dir: PATH}` (a directory, relative to the spec file's folder, that
    `tether submit` packs and uploads; the API receives it as `archive`). Either way the agent
    puts it in `$TETHER_WORK_DIR/code` on every host and runs the command there."""

    git: str | None = Field(
        default=None, min_length=1, max_length=2048, description="The repository to clone."
    )
    commit: str | None = Field(
        default=None, min_length=1, max_length=64, description="The full commit SHA to run."
    )
    dir: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="The working directory to ship, relative to the spec file's folder.",
    )
    archive: CodeArchive | None = Field(
        default=None, description="The uploaded archive of `dir` (set by `tether submit`)."
    )

    @field_validator("git")
    @classmethod
    def _clonable(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not _GIT_URL.match(value):
            raise ValueError(
                "must be an https://, ssh://, file:// or user@host:path git URL without spaces"
            )
        if _GIT_URL_USERINFO.match(value):
            raise ValueError(
                "must not carry a password or token: the spec is stored and shown in plain "
                "text; use a public repository or a key the image already has"
            )
        return value

    @field_validator("commit")
    @classmethod
    def _full_sha(cls, value: str | None) -> str | None:
        if value is not None and not _COMMIT.match(value):
            raise ValueError(
                "must be a full commit SHA (40 or 64 lowercase hex digits), not a branch, tag "
                "or short SHA, so that every replacement host runs the same code"
            )
        return value

    @field_validator("dir")
    @classmethod
    def _a_path(cls, value: str | None) -> str | None:
        if value is not None and ("\0" in value or not value.strip()):
            raise ValueError("must be a directory path")
        return value

    @model_serializer(mode="wrap")
    def _only_what_is_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`{git, commit}` or `{dir, archive}`, without the other source's nulls."""
        return {k: v for k, v in handler(self).items() if v is not None}

    @model_validator(mode="after")
    def _one_source(self) -> JobCode:
        from_git = self.git is not None or self.commit is not None
        from_dir = self.dir is not None or self.archive is not None
        if from_git and from_dir:
            raise ValueError(
                "give either git (with commit) or dir, not both: code.git and code.dir are "
                "mutually exclusive"
            )
        if not from_git and not from_dir:
            raise ValueError("give git and commit, or dir (a directory that `tether submit` packs)")
        if from_git and self.commit is None:
            raise ValueError("commit is required with git (the full commit SHA to run)")
        if from_git and self.git is None:
            raise ValueError("git is required with commit (the repository to clone)")
        return self


GitCode = JobCode  # the name it had when only git existed


class JobSpec(_Strict):
    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    image: str = Field(min_length=1, max_length=512, pattern=r"^[^\s]+$")
    run: str = Field(
        min_length=1, max_length=16_384, description="The training command, run by the agent."
    )
    env: dict[str, Annotated[str, Field(max_length=32_768)]] = Field(
        default_factory=dict, max_length=256
    )
    secrets: list[str] = Field(
        default_factory=list,
        max_length=MAX_SECRETS,
        description="Names of user secrets (`tether secrets set NAME`) the command needs in its "
        "environment; the values never enter the spec, the table or the host's instance env.",
    )
    resources: Resources = Field(default_factory=Resources)
    data: Data = Field(default_factory=Data)
    expected_hours: float = Field(gt=0, le=24 * 90)
    reference_gpu: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="The GPU model expected_hours are measured on (gpu_count of them); unset, "
        "expected_hours are hours on any host.",
    )
    total_steps: int | None = Field(
        default=None, ge=1, le=10**9,
        description="Work in training steps, priced at the pace measured per GPU (pace.py).",
    )  # fmt: skip
    expected_startup_min: float = Field(default=6, ge=0, le=24 * 60)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    outputs: Outputs | None = Field(
        default=None,
        description="The directory uploaded as the job's result; `outputs: {}` for the default.",
    )
    budget_usd: float = Field(gt=0, le=1_000_000)
    policy: Policy = Field(default_factory=Policy)
    code: JobCode | None = Field(
        default=None,
        description="Where the job's code comes from; unset: the command runs in the image as is.",
    )
    ssh: bool = Field(
        default=False,
        description="Rent in Vast's SSH launch mode, so `tether ssh` can reach the host; Vast's "
        "own entrypoint then replaces the image's.",
    )

    @field_validator("run")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("reference_gpu")
    @classmethod
    def _known_reference(cls, value: str | None) -> str | None:
        if value is None:
            return value
        name = canonical_gpu_name(value)
        if name is None:
            raise ValueError(unknown_gpu_reason(value))
        return name

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for key in env:
            if not _ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if key.upper().startswith(RESERVED_ENV_PREFIXES):
                raise ValueError(
                    f"{key!r} is reserved for tether (prefixes {', '.join(RESERVED_ENV_PREFIXES)})"
                )
        return env

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, names: list[str]) -> list[str]:
        for name in names:
            problem = secret_name_problem(name, RESERVED_ENV_PREFIXES)
            if problem:
                raise ValueError(problem)
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"listed more than once: {', '.join(duplicates)}")
        return names

    @model_validator(mode="after")
    def _secret_not_in_env(self) -> JobSpec:
        both = sorted(set(self.secrets) & set(self.env))
        if both:
            raise ValueError(
                f"secrets: {', '.join(both)} also set in env; a name is a secret or a plain "
                "value, not both"
            )
        return self

    @model_validator(mode="after")
    def _budget_covers_an_hour_at_the_cap(self) -> JobSpec:
        cap = self.resources.max_usd_per_hour
        if cap is not None and self.budget_usd < cap * (self.expected_startup_min / 60):
            raise ValueError(
                "budget_usd does not even cover the start-up minutes at resources.max_usd_per_hour"
            )
        return self

    @model_validator(mode="after")
    def _outputs_apart_from_checkpoints(self) -> JobSpec:
        if self.outputs is None:
            return self
        outputs = PurePosixPath(self.outputs.dir)
        checkpoints = PurePosixPath(self.checkpoint.dir)
        if (
            outputs == checkpoints
            or outputs in checkpoints.parents
            or checkpoints in outputs.parents
        ):
            raise ValueError(
                "outputs.dir must be apart from checkpoint.dir (neither inside the other), "
                "e.g. /workspace/outputs next to /workspace/checkpoints"
            )
        return self


class SpecError(Exception):
    """A job spec that cannot be used; `errors` names every problem."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


def parse_job(data: Any) -> JobSpec:
    """Validate already-decoded data (YAML or JSON). Raises SpecError, never anything else."""
    if not isinstance(data, dict):
        kind = "nothing" if data is None else type(data).__name__
        raise SpecError(
            [FieldError(path="(root)", reason=f"must be a mapping of fields, got {kind}")]
        )
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(field_errors(exc)) from None
    except (TypeError, ValueError, RecursionError) as exc:  # pathological input must not escape
        raise SpecError([FieldError(path="(root)", reason=f"cannot be read: {exc}")]) from None


def load_job_file(path: str | Path) -> JobSpec:
    """Read a YAML (or JSON) job file. Every failure is a SpecError with a readable reason.

    Bounded before it is parsed (`functions.domain.documents`): at most `MAX_JOB_FILE_BYTES`,
    `MAX_DEPTH` levels and `MAX_NODES` values, aliases counted as what they expand to."""
    import yaml  # a job file is read by the CLI; the functions take JSON (`documents.py`)

    p = Path(path)
    try:
        with p.open("rb") as handle:
            raw = handle.read(MAX_JOB_FILE_BYTES + 1)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise SpecError([FieldError(path=str(p), reason="no such file")]) from None
    except IsADirectoryError:
        raise SpecError(
            [FieldError(path=str(p), reason="is a directory, not a job file")]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([FieldError(path=str(p), reason=f"cannot be read ({exc})")]) from None
    if len(raw) > MAX_JOB_FILE_BYTES:
        reason = f"is larger than {MAX_JOB_FILE_BYTES // 1024} KiB; a job file is a few lines"
        raise SpecError([FieldError(path=str(p), reason=reason)])
    try:
        data = load_yaml(text)
    except DocumentTooComplex as exc:
        raise SpecError([FieldError(path=str(p), reason=str(exc))]) from None
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(
            [FieldError(path=str(p), reason=f"YAML syntax error{where}: {problem}")]
        ) from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # A value the constructor cannot build (an integer of 5,000 digits).
        reason = f"a value cannot be read: {str(exc).splitlines()[0][:200]}"
        raise SpecError([FieldError(path=str(p), reason=reason)]) from None
    return parse_job(data)
