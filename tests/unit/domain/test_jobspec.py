"""The job spec corpus: every bad spec names its field and a reason; nothing else escapes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.domain.jobspec import JobSpec, SpecError, load_job_file, parse_job
from tests.paths import ROOT

# A spec file in examples/, or a project folder with its job.yaml (its code is that folder).
EXAMPLES = sorted([*(ROOT / "examples").glob("*.yaml"), *(ROOT / "examples").glob("*/job.yaml")])


def _example_id(path: Path) -> str:
    return str(path.relative_to(ROOT / "examples"))


class _Delete:
    """Marks a field to remove from the valid spec; a stable repr keeps xdist test ids equal."""

    def __repr__(self) -> str:
        return "<deleted>"


DELETE = _Delete()


def example() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "examples" / "qlora-7b" / "job.yaml").read_text())
    assert isinstance(data, dict)
    return data


def mutate(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `data` with the dotted `path` set to `value` (or removed, for DELETE)."""
    out = copy.deepcopy(data)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return out


def errors_of(data: Any) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        parse_job(data)
    return {e.path: e.reason for e in caught.value.errors}


@pytest.mark.parametrize("path", EXAMPLES, ids=_example_id)
def test_examples_validate(path):
    job = load_job_file(path)
    assert isinstance(job, JobSpec)
    assert job.name == (path.parent.name if path.name == "job.yaml" else path.stem)


def test_there_are_two_examples():
    assert {_example_id(p) for p in EXAMPLES} >= {"qlora-7b/job.yaml", "tiny-cpu/job.yaml"}


# (dotted field to change, new value, path reported, fragment of the reason)
SHA40 = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
SHA64 = "ab" * 32

BAD_SPECS = [
    ("name", DELETE, "name", "required"),
    ("name", "Bad_Name", "name", "does not match"),
    ("name", "", "name", "must not be empty"),
    ("name", "a" * 64, "name", "at most 63 characters"),
    ("name", 7, "name", "must be a string (got int)"),
    ("image", "pytorch/pytorch latest", "image", "does not match"),
    ("run", "   ", "run", "must not be blank"),
    ("run", DELETE, "run", "required"),
    ("env", {"1BAD": "x"}, "env", "not a valid environment variable name"),
    ("env", {"AWS_SECRET_ACCESS_KEY": "x"}, "env", "reserved for tether"),
    ("env", {"tether_token": "x"}, "env", "reserved for tether"),
    ("env", {"BATCH": 8}, "env.BATCH", "must be a string (got int)"),
    ("env", {1: "x"}, "env[1]", "key must be a string"),
    ("env", ["A=1"], "env", "must be a mapping"),
    ("resources", "big", "resources", "must be a mapping (got str)"),
    ("resources.gpus", 1, "resources.gpus", "unknown field"),
    ("resources.gpu_names", "RTX 4090", "resources.gpu_names", "must be a list"),
    ("resources.gpu_names", ["RTX 4090", "rtx 4090"], "resources.gpu_names", "twice"),
    ("resources.gpu_names", ["RTX 4090", ""], "resources.gpu_names[1]", "must not be empty"),
    ("resources.gpu_count", 0, "resources.gpu_count", "must be ≥ 1"),
    ("resources.gpu_count", 17, "resources.gpu_count", "must be ≤ 16"),
    ("resources.gpu_count", 1.5, "resources.gpu_count", "must be an integer"),
    ("resources.gpu_count", "2", "resources.gpu_count", "must be an integer (got str)"),
    ("resources.min_disk_gb", 4, "resources.min_disk_gb", "must be ≥ 8"),
    ("resources.min_reliability", 1.5, "resources.min_reliability", "must be ≤ 1"),
    ("resources.min_download_mbps", -1, "resources.min_download_mbps", "must be ≥ 0"),
    ("resources.max_usd_per_hour", 0, "resources.max_usd_per_hour", "must be > 0"),
    ("data.download_gb", -1, "data.download_gb", "must be ≥ 0"),
    ("data.upload_gb", 1, "data.upload_gb", "unknown field"),
    ("expected_hours", 0, "expected_hours", "must be > 0"),
    ("expected_hours", 1.557555710958919e-252, "expected_hours", "too close to zero"),
    ("data.download_gb", 1e-300, "data.download_gb", "too close to zero"),
    ("resources.max_usd_per_hour", 5e-324, "resources.max_usd_per_hour", "too close to zero"),
    ("expected_hours", "3", "expected_hours", "must be a number (got str)"),
    ("expected_hours", True, "expected_hours", "must be a number (got bool)"),
    ("expected_hours", DELETE, "expected_hours", "required"),
    ("budget_usd", DELETE, "budget_usd", "required"),
    ("budget_usd", float("nan"), "budget_usd", "not NaN"),
    ("budget_usd", float("inf"), "budget_usd", "must be a finite number, not infinity"),
    ("budget_usd", 0.01, "(root)", "budget_usd does not even cover the start-up minutes"),
    ("checkpoint.dir", "checkpoints", "checkpoint.dir", "must be an absolute path"),
    ("checkpoint.marker", "done/.ok", "checkpoint.marker", "must be a file name"),
    ("checkpoint.keep_last", 0, "checkpoint.keep_last", "must be ≥ 1"),
    ("checkpoint.interval_min", 0, "checkpoint.interval_min", "must be > 0"),
    ("policy.on_dead_man", "explode", "policy.on_dead_man", "must be one of 'stop' or 'destroy'"),
    ("policy.heartbeat_timeout_s", 2, "policy.heartbeat_timeout_s", "must be ≥ 3"),
    ("policy.heartbeat_timeout_s", 40, "policy.heartbeat_timeout_s", "must be ≥ 3 × policy.hea"),
    ("policy.heartbeat_interval_s", 0, "policy.heartbeat_interval_s", "must be ≥ 1"),
    ("policy.no_progress_s", 30, "policy.no_progress_s", "must be ≥ 4 × policy.heartbeat_in"),
    ("policy.lease_window_s", 600, "policy", "lease_window_s must be longer"),
    ("policy.max_restarts", -1, "policy.max_restarts", "must be ≥ 0"),
    ("policy.max_replacements_dead", -1, "policy.max_replacements_dead", "must be ≥ 0"),
    ("policy.max_replacements_hung", 101, "policy.max_replacements_hung", "must be ≤ 100"),
    ("policy.max_replacements_dead", 1.5, "policy.max_replacements_dead", "must be an integer"),
    ("policy.max_replacements", 3, "policy.max_replacements", "unknown field"),
    ("gpus", 1, "gpus", "unknown field"),
    ("code", "https://github.com/u/r", "code", "must be a mapping"),
    ("code", {"git": "https://github.com/u/r"}, "code", "commit is required with git"),
    ("code", {"commit": SHA40}, "code", "git is required with commit"),
    ("code", {}, "code", "give git and commit, or dir"),
    ("code", {"dir": ".", "git": "https://h/r", "commit": SHA40}, "code", "mutually exclusive"),
    ("code", {"archive": {"sha256": SHA64, "size_bytes": 1}, "commit": SHA40}, "code", "not both"),
    ("code", {"dir": ""}, "code.dir", "must not be empty"),
    ("code", {"archive": {"sha256": "AB" * 32, "size_bytes": 1}}, "code.archive.sha256", "hex"),
    ("code", {"archive": {"sha256": SHA64, "size_bytes": 0}}, "code.archive.size_bytes", "> 0"),
    ("code", {"archive": {"sha256": SHA64, "size_bytes": 2**40}}, "code.archive.size_bytes", "≤"),
    ("code", {"archive": {"sha256": SHA64}}, "code.archive.size_bytes", "required"),
    ("code", {"git": "https://github.com/u/r", "commit": "main"}, "code.commit", "full commit"),
    ("code", {"git": "https://github.com/u/r", "commit": SHA40[:7]}, "code.commit", "short SHA"),
    ("code", {"git": "https://h/r", "commit": SHA40.upper()}, "code.commit", "lowercase"),
    ("code", {"git": "ext::sh -c touch% /tmp/x", "commit": SHA40}, "code.git", "https://, ssh://"),
    ("code", {"git": "--upload-pack=touch /tmp/x", "commit": SHA40}, "code.git", "git URL"),
    ("code", {"git": "/srv/repo", "commit": SHA40}, "code.git", "file://"),
    ("code", {"git": "https://github.com/u/r x", "commit": SHA40}, "code.git", "without spaces"),
    ("code", {"git": "https://u:pw@host/r.git", "commit": SHA40}, "code.git", "password or token"),
    ("code", {"git": "https://ghp_abc@github.com/r", "commit": SHA40}, "code.git", "plain text"),
    ("code", {"git": "ssh://git:pw@host/r.git", "commit": SHA40}, "code.git", "password or token"),
    ("code", {"git": "https://h/r", "commit": SHA40, "ref": "main"}, "code.ref", "unknown field"),
]


SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/user/repo.git",
        "http://git.internal/repo",
        "ssh://git@github.com/user/repo.git",
        "git@github.com:user/repo.git",
        "file:///srv/git/repo",
    ],
)
def test_code_from_git_is_accepted(url: str) -> None:
    job = parse_job(mutate(example(), "code", {"git": url, "commit": SHA}))
    assert job.code is not None
    assert (job.code.git, job.code.commit) == (url, SHA)


def test_code_from_a_directory_or_an_archive_is_accepted() -> None:
    job = parse_job(mutate(example(), "code", {"dir": "src"}))
    assert job.code is not None and (job.code.dir, job.code.archive, job.code.git) == (
        "src",
        None,
        None,
    )
    archive = {"sha256": SHA64, "size_bytes": 1234}
    job = parse_job(mutate(example(), "code", {"dir": ".", "archive": archive}))
    assert job.code is not None and job.code.archive is not None
    assert (job.code.archive.sha256, job.code.archive.size_bytes) == (SHA64, 1234)


def test_code_is_optional_and_a_sha256_commit_is_accepted() -> None:
    shipped = parse_job(example()).code  # the example ships its own folder
    assert shipped is not None and shipped.dir == "." and shipped.git is None
    assert parse_job(mutate(example(), "code", DELETE)).code is None
    job = parse_job(mutate(example(), "code", {"git": "https://h/r", "commit": "ab" * 32}))
    assert job.code is not None and job.code.commit == "ab" * 32


@pytest.mark.parametrize(
    ("field", "value", "path", "reason"),
    BAD_SPECS,
    ids=[f"{field}={value!r}"[:60] for field, value, *_ in BAD_SPECS],
)
def test_bad_spec_names_the_field_and_the_reason(field, value, path, reason):
    data = mutate(example(), field, value)
    if field == "policy.lease_window_s":
        data["policy"]["heartbeat_timeout_s"] = 900  # longer than the lease
    errors = errors_of(data)
    assert path in errors, errors
    assert reason in errors[path]


def test_corpus_is_large_enough():
    assert len(BAD_SPECS) >= 25


def test_every_problem_is_reported_at_once():
    data = mutate(example(), "resources.gpu_count", 0)
    data = mutate(data, "checkpoint.keep_last", 0)
    data = mutate(data, "name", DELETE)
    assert set(errors_of(data)) == {"name", "resources.gpu_count", "checkpoint.keep_last"}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (None, "got nothing"),
        ([1, 2], "got list"),
        ("name: x", "got str"),
        ({1: "x"}, "field names must be strings"),
    ],
)
def test_wrong_top_level(data, reason):
    errors = errors_of(data)
    assert any(reason in r for r in errors.values()), errors


# --- files -----------------------------------------------------------------------------------


def file_error(path: Path) -> str:
    with pytest.raises(SpecError) as caught:
        load_job_file(path)
    assert len(caught.value.errors) == 1
    return str(caught.value.errors[0])


def test_missing_file(tmp_path):
    assert file_error(tmp_path / "nope.yaml").endswith("nope.yaml: no such file")


def test_directory(tmp_path):
    assert "is a directory" in file_error(tmp_path)


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: x\nresources: {gpu_count: 1\n")
    message = file_error(path)
    assert "YAML syntax error at line" in message


def test_not_utf8(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_bytes(b"name: \xff\xfe\n")
    assert "cannot be read" in file_error(path)


def test_empty_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("")
    assert file_error(path) == "(root): must be a mapping of fields, got nothing"


def test_json_job_file_is_accepted(tmp_path):
    import json

    path = tmp_path / "job.json"
    path.write_text(json.dumps(example()))
    assert load_job_file(path).name == "qlora-7b"


# --- nothing but SpecError escapes -------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.binary(max_size=8)
)
keys = st.text(max_size=15) | st.integers() | st.none() | st.booleans()
json_like = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(keys, children, max_size=4)
        | st.tuples(children, children)
    ),
    max_leaves=20,
)


def assert_parses_or_spec_error(data: Any) -> None:
    try:
        parse_job(data)
    except SpecError as exc:
        assert exc.errors
        for error in exc.errors:
            assert error.path
            assert error.reason


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(json_like)
def test_random_data_only_raises_spec_error(data):
    assert_parses_or_spec_error(data)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.dictionaries(st.sampled_from(sorted(example())) | keys, json_like, max_size=8))
def test_random_mappings_with_real_field_names_only_raise_spec_error(data):
    assert_parses_or_spec_error(data)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(_paths(value, (*prefix, i)))
    return out


EXAMPLE_PATHS = _paths(example())


@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(EXAMPLE_PATHS),
            st.sampled_from(["replace", "delete", "add"]),
            json_like,
            keys,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_mutated_example_only_raises_spec_error(mutations):
    data = example()
    for path, action, value, new_key in mutations:
        parent: Any = data
        try:
            for part in path[:-1]:
                parent = parent[part]
            last = path[-1]
            if action == "replace":
                parent[last] = value
            elif action == "delete":
                del parent[last]
            elif isinstance(parent, dict):
                parent[new_key] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this path
    assert_parses_or_spec_error(data)


def minimal(**fields: Any) -> dict[str, Any]:
    """A job with only the required fields, and `fields`: every other one at its default."""
    base = {"name": "t", "image": "python:3.12", "run": "python train.py"}
    return base | {"expected_hours": 1, "budget_usd": 10} | fields


def test_a_long_interval_is_held_against_the_default_timeouts():
    """Found by the property test through the API: `heartbeat_interval_s: 95` with the default
    180 s timeout was accepted at submit, stored, and refused when the job was read back (a
    500 for every later request about it)."""
    errors = errors_of(minimal(policy={"heartbeat_interval_s": 95}))
    assert errors["policy.heartbeat_timeout_s"] == (
        "must be ≥ 3 × policy.heartbeat_interval_s (285 s), "
        "or heartbeats too far apart would trip it"
    )
    assert set(errors) == {"policy.heartbeat_timeout_s"}  # the others' defaults still fit


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=600))
def test_whatever_parses_reads_back_from_its_own_dump(interval):
    spec = minimal(policy={"heartbeat_interval_s": interval})
    try:
        parsed = parse_job(spec)
    except SpecError:
        return
    assert parse_job(parsed.model_dump(mode="json")) == parsed
