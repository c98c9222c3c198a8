"""User secrets in the spec: the name rules and the warning for token-like `env` values."""

from __future__ import annotations

import pytest
import yaml

from functions.domain.jobspec import SpecError, parse_job
from functions.domain.onstart import build_host_env
from functions.domain.secrets import looks_like_token, secret_name_of, token_warnings
from tests.paths import ROOT

EXAMPLE = yaml.safe_load((ROOT / "examples" / "tiny-cpu" / "job.yaml").read_text())


def spec_dict(**overrides: object) -> dict[str, object]:
    return {**EXAMPLE, **overrides}


def errors_of(**overrides) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        parse_job(spec_dict(**overrides))
    return {e.path: e.reason for e in caught.value.errors}


def test_a_spec_lists_secret_names():
    assert parse_job(spec_dict(secrets=["HF_TOKEN", "WANDB_API_KEY"])).secrets == [
        "HF_TOKEN",
        "WANDB_API_KEY",
    ]
    assert parse_job(spec_dict()).secrets == []


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("hf_token", "not a valid secret name"),
        ("vast", "not a valid secret name"),
        ("1TOKEN", "not a valid secret name"),
        ("HF-TOKEN", "not a valid secret name"),
        ("", "not a valid secret name"),
        ("A" * 129, "not a valid secret name"),
        ("TETHER_TOKEN", "reserved for tether"),
        ("AWS_SECRET", "reserved for tether"),
    ],
)
def test_bad_secret_names_are_refused_with_the_field(name, reason):
    errors = errors_of(secrets=[name])
    assert list(errors) == ["secrets"]
    assert reason in errors["secrets"]


def test_a_secret_listed_twice_or_also_in_env_is_refused():
    assert (
        "listed more than once: HF_TOKEN" in errors_of(secrets=["HF_TOKEN", "HF_TOKEN"])["secrets"]
    )
    both = errors_of(secrets=["HF_TOKEN"], env={"HF_TOKEN": "x"})
    assert "HF_TOKEN also set in env" in next(iter(both.values()))


def test_more_than_32_secrets_are_refused():
    assert "secrets" in errors_of(secrets=[f"S{i}" for i in range(33)])


def test_parameter_names_map_back_to_secret_names_only_under_the_prefix():
    assert secret_name_of("/tether/secrets/HF_TOKEN") == "HF_TOKEN"
    assert secret_name_of("/other/HF_TOKEN") is None
    assert secret_name_of("/tether/secrets/nested/X") is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MY_VAR", "hf_abcdefghijklmnopqrstuvwxyz"),
        ("OPENAI", "sk-proj-abc123"),
        ("GH", "ghp_abcdefghijklmnop"),
        ("X", "AKIAIOSFODNN7EXAMPLE"),
        ("HF_TOKEN", "anything"),
        ("WANDB_API_KEY", "anything"),
        ("DB_PASSWORD", "hunter2"),
        ("OPAQUE", "q8ZtR2mX9vLw4Kp7Ny3Bc6Hd"),
    ],
)
def test_token_like_env_entries_draw_a_warning(name, value):
    assert looks_like_token(name, value) is not None
    (line,) = token_warnings({name: value})
    assert line.startswith(f"env.{name}: ")
    assert f"tether secrets set {name}" in line


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MODEL", "meta-llama/Llama-2-7b-hf"),
        ("OUTPUT_DIR", "/workspace/checkpoints/run-2024-01-01"),
        ("LR", "0.0002"),
        ("PROMPT", "the quick brown fox jumps over the lazy dog again"),
        ("SEED", "1234567890123456789012345"),
        ("HF_TOKEN", ""),
    ],
)
def test_plain_values_draw_no_warning(name, value):
    assert looks_like_token(name, value) is None
    assert token_warnings({name: value}) == []


def test_the_host_env_holds_neither_the_secrets_names_nor_values():
    # The names come over the heartbeat with the rest of the job (job_bootstrap.py).
    args: dict[str, object] = {
        "job_id": "j-123",
        "generation": 2,
        "api_url": "https://api",
        "agent_token": "per-generation-agent-token",
        "lease_expires_at": 1_700_010_800.0,
    }
    job = parse_job(spec_dict(secrets=["HF_TOKEN", "WANDB_API_KEY"]))
    env = build_host_env(job, **args)  # type: ignore[arg-type]
    assert "TETHER_SECRETS" not in env
    assert "HF_TOKEN" not in env and "HF_TOKEN" not in "".join(env.values())
