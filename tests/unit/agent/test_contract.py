"""The agent's mirrors of control-plane contracts stay identical to the originals."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
from pydantic import BaseModel
from tether_agent import checkpoints, logs, protocol
from tether_agent.settings import ENV_NAMES, SettingsError, load_settings

from functions.domain import agent_env, heartbeat_contract, storage_layout

MIRRORED = [
    "GpuProbe",
    "CheckpointRef",
    "SkippedCheckpoint",
    "OutputsRef",
    "RestoreReport",
    "ResumeReport",
    "HeartbeatRequest",
    "StorageKey",
    "StorageCredentials",
    "SecretValues",
    "JobBootstrap",
    "HeartbeatReply",
]


def _wire_models(module: object) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BaseModel)
        and value.__module__ == getattr(module, "__name__", "")
        and not name.startswith("_")
    }


def test_every_wire_model_is_mirrored() -> None:
    assert _wire_models(heartbeat_contract) == set(MIRRORED) == _wire_models(protocol)


def test_the_bounds_are_the_same() -> None:
    names = (
        "MAX_REASON",
        "MAX_RESTORE_CANDIDATES",
        "MAX_STEP",
        "MAX_GENERATION",
        "MAX_BYTES",
        "MAX_OUTPUT_FILES",
        "MAX_SECRETS",
        "MAX_RUN",
        "MAX_JOB_ENV",
        "MAX_JOB_ENV_VALUE",
        "MAX_PATH",
    )
    assert {n: getattr(protocol, n) for n in names} == {
        n: getattr(heartbeat_contract, n) for n in names
    }


@pytest.mark.parametrize("name", MIRRORED)
def test_wire_model_schema_matches_control_plane(name: str) -> None:
    ours = getattr(protocol, name).model_json_schema()
    theirs = getattr(heartbeat_contract, name).model_json_schema()
    assert ours == theirs


def test_the_code_archive_limits_and_key_are_the_same() -> None:
    from tether_agent import code_archive as agent_side

    from functions.domain import code_archive

    names = ("MAX_ARCHIVE_BYTES", "MAX_ARCHIVE_FILES", "MAX_UNPACKED_BYTES")
    assert {n: getattr(agent_side, n) for n in names} == {
        n: getattr(code_archive, n) for n in names
    }
    sha = "ab" * 32
    assert agent_side.archive_key(storage_layout.job_prefix("j-1"), sha) == (
        storage_layout.job_code_key("j-1", sha)
    )


def test_settings_read_every_control_plane_variable_and_no_other() -> None:
    assert set(agent_env.ALL) == set(ENV_NAMES)


@pytest.mark.parametrize(("step", "generation"), [(0, 1), (500, 2), (123_456_789_012, 17)])
def test_the_agent_writes_checkpoints_where_the_control_plane_looks(
    step: int, generation: int
) -> None:
    # The agent builds keys under the prefix it was given: the control plane's job prefix.
    prefix = storage_layout.job_prefix("j-1")
    assert prefix == "jobs/j-1/"
    assert checkpoints.generation_prefix(prefix, generation) == (
        storage_layout.generation_prefix("j-1", generation)
    )
    written = checkpoints.RemoteCheckpointId(step, generation)
    assert checkpoints.checkpoints_prefix(prefix, generation) == (
        storage_layout.checkpoints_prefix("j-1", generation)
    )
    assert written.dir_key(prefix) == storage_layout.checkpoint_dir_key("j-1", step, generation)
    key = written.manifest_key(prefix)
    assert key == storage_layout.manifest_key("j-1", step, generation)
    assert storage_layout.parse_manifest_key("j-1", key) == (step, generation)
    assert checkpoints.parse_manifest_key(prefix, key) == written
    assert checkpoints.MANIFEST_NAME == storage_layout.MANIFEST_NAME
    # everything a generation writes is under the prefix its read-write key reaches
    assert key.startswith(storage_layout.generation_prefix("j-1", generation))


@pytest.mark.parametrize(
    "key",
    [
        "jobs/j-1/g1/checkpoints/000000000500/../manifest.json",
        "jobs/j-1/g0/checkpoints/000000000500/manifest.json",
        "jobs/j-1/g1/checkpoints/500/manifest.json",
        "jobs/j-1/checkpoints/000000000500-g1/manifest.json",  # the old layout
        "jobs/j-10/g1/checkpoints/000000000500/manifest.json",
    ],
)
def test_both_sides_refuse_the_same_manifest_keys(key: str) -> None:
    assert storage_layout.parse_manifest_key("j-1", key) is None
    assert checkpoints.parse_manifest_key("jobs/j-1/", key) is None


@pytest.mark.parametrize(("generation", "sequence"), [(1, 0), (12, 345), (9999, 999_999)])
def test_the_agent_writes_log_segments_where_the_api_lists_them(
    generation: int, sequence: int
) -> None:
    prefix = storage_layout.job_prefix("j-1")
    assert logs.logs_prefix(prefix, generation) == storage_layout.logs_prefix("j-1", generation)
    key = logs.segment_key(prefix, generation, sequence)
    assert key == storage_layout.log_segment_key("j-1", generation, sequence)
    assert key.startswith(storage_layout.generation_prefix("j-1", generation))
    assert storage_layout.parse_segment_key("j-1", key) == (generation, sequence)


@pytest.mark.parametrize("generation", [1, 17])
def test_the_agent_writes_outputs_where_the_control_plane_looks(generation: int) -> None:
    prefix = storage_layout.job_prefix("j-1")
    key = checkpoints.outputs_manifest_key(prefix, generation)
    assert key == f"jobs/j-1/g{generation}/outputs/manifest.json"
    assert key == storage_layout.outputs_manifest_key("j-1", generation)
    files = checkpoints.output_files_prefix(prefix, generation)
    assert files == f"jobs/j-1/g{generation}/outputs/files/"
    assert files == storage_layout.output_files_prefix("j-1", generation)


def _minimal_env() -> dict[str, str]:
    return {
        "TETHER_JOB_ID": "j1",
        "TETHER_GENERATION": "2",
        "TETHER_API_URL": "http://127.0.0.1:9",
        "TETHER_AGENT_TOKEN": "t",
        "TETHER_CHECKPOINT_DIR": "/tmp/ckpt",
        "TETHER_S3_ENDPOINT": "http://127.0.0.1:9",
        "TETHER_S3_BUCKET": "b",
        "TETHER_S3_PREFIX": "jobs/j1/",
        "TETHER_S3_ACCESS_KEY_ID": "k",
        "TETHER_S3_SECRET_ACCESS_KEY": "s",
        "TETHER_S3_WRITE_ACCESS_KEY_ID": "wk",
        "TETHER_S3_WRITE_SECRET_ACCESS_KEY": "ws",
        "CONTAINER_ID": "1",
        "CONTAINER_API_KEY": "c",
    }


def test_defaults_match_the_job_spec_defaults() -> None:
    s = load_settings(_minimal_env())
    assert (s.heartbeat_interval_s, s.grace_s, s.probe_timeout_s) == (15, 120, 10)
    assert (s.marker, s.keep_last, s.on_dead_man, s.gpu_probe) == (
        ".tether-complete",
        3,
        "stop",
        "nvml",
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TETHER_GENERATION", "zero"),
        ("TETHER_GENERATION", "0"),
        ("TETHER_HEARTBEAT_INTERVAL_S", "-1"),
        ("TETHER_ON_DEAD_MAN", "explode"),
        ("TETHER_S3_PREFIX", "jobs/j1"),
        ("TETHER_GPU_PROBE", "cuda"),
        ("TETHER_API_URL", "not a url"),
    ],
)
def test_bad_value_names_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings({**_minimal_env(), name: value})
    assert [line.split(":")[0] for line in err.value.lines] == [name]


def test_agent_process_exits_2_naming_the_missing_variable() -> None:
    env = {k: v for k, v in _minimal_env().items() if k != "TETHER_S3_BUCKET"}
    env["TETHER_GENERATION"] = "abc"
    env["PATH"] = "/usr/bin:/bin"
    done = subprocess.run(
        [sys.executable, "-m", "tether_agent", "run", "--", "true"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "TETHER_S3_BUCKET: required but not set" in done.stderr
    assert "TETHER_GENERATION:" in done.stderr
    assert "Traceback" not in done.stderr


def test_no_command_and_no_tether_run_is_a_config_error() -> None:
    env = {**_minimal_env(), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "tether_agent", "run"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "TETHER_RUN" in done.stderr


@pytest.mark.parametrize(
    ("field", "value", "read_as"),
    [("agent_time", 1e-166, None), ("bytes_downloaded", 0, 0)],
)
def test_both_copies_read_a_number_nearer_zero_than_1e_9_alike(
    field: str, value: float, read_as: float | None
) -> None:
    """Not in the JSON schema, so compared by behaviour: the same body reads the same way (or is
    refused by both: agent_time 1e-166 reads as 0, which is not > 0)."""
    body = {
        "job_id": "j1",
        "generation": 1,
        "phase": "training",
        "gpu": {"available": True, "utilization_pct": 1e-300, "unresponsive_s": 5e-12},
        "agent_time": 1_800_000_000.0,
        field: value,
    }
    outcomes = []
    for model in (heartbeat_contract.HeartbeatRequest, protocol.HeartbeatRequest):
        try:
            outcomes.append(model.model_validate(body).model_dump(mode="json"))
        except ValueError as exc:
            outcomes.append({"refused": [e["loc"] for e in exc.errors()]})  # type: ignore[attr-defined]
    assert outcomes[0] == outcomes[1]
    if read_as is None:
        assert outcomes[0] == {"refused": [(field,)]}
    else:
        assert outcomes[0]["gpu"]["utilization_pct"] == 0.0
        assert outcomes[0]["gpu"]["unresponsive_s"] == 0.0


def test_the_agent_sets_its_job_under_the_names_the_control_plane_spells() -> None:
    from tether_agent import bootstrap

    from functions.domain import job_bootstrap

    job: dict[str, object] = {
        "run": "python train.py", "checkpoint_dir": "/workspace/ckpt", "marker": ".done",
        "progress_file": "/workspace/progress.json", "keep_last": 2, "outputs_dir": "/out",
        "code_git": "https://github.com/u/r.git", "code_commit": "ab" * 20,
        "env": {"JOB_VAR": "x"}, "secrets": ["HF_TOKEN"],
        "restore": [{"step": 5, "generation": 1, "manifest_key": "m", "manifest_sha256": "a" * 64}],
        "storage": {
            "endpoint": "https://r2", "bucket": "b",
            "read": {"access_key_id": "r", "secret_access_key": "rs", "session_token": "rt",
                     "expires_at": 10.5, "prefix": "jobs/j/"},
            "write": {"access_key_id": "w", "secret_access_key": "ws", "session_token": "",
                      "expires_at": 11, "prefix": "jobs/j/g2/"},
        },
    }  # fmt: skip
    environ = {"PATH": "/bin", "TETHER_JOB_ID": "j", "TETHER_S3_WRITE_SESSION_TOKEN": "stale"}
    ours = bootstrap.environ_with_job(environ, protocol.JobBootstrap.model_validate(job))
    theirs = job_bootstrap.environ_with_job(
        environ, heartbeat_contract.JobBootstrap.model_validate(job)
    )
    assert ours == theirs
    unset = {"TETHER_S3_WRITE_SESSION_TOKEN", "TETHER_CODE_ARCHIVE_SHA256"}  # empty, or no archive
    assert set(theirs) - set(environ) == set(agent_env.FROM_HEARTBEAT) - unset | {"JOB_VAR"}
    assert "TETHER_S3_WRITE_SESSION_TOKEN" not in theirs  # the stale value does not survive
