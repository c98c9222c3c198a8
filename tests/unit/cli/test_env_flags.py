"""`--env NAME=VALUE` over a spec's `env`: the rest of the spec is untouched, and a flag's
problem is the spec's rule, named with the flag."""

from __future__ import annotations

import pytest

from functions.domain.jobspec import load_job_file
from tests.paths import EXAMPLES
from tether_cli.env_flags import parse_env_flags, with_env_flags
from tether_cli.output import CliError


@pytest.mark.parametrize("example", ["qlora-7b/job.yaml", "tiny-cpu/job.yaml"])
def test_flags_change_the_env_and_nothing_else(example: str) -> None:
    job = load_job_file(EXAMPLES / example)
    assert with_env_flags(job, []) is job
    merged = with_env_flags(job, ["QLORA_TINY=1"])
    assert merged.env == {**job.env, "QLORA_TINY": "1"}
    assert merged.model_copy(update={"env": job.env}) == job


def test_a_flag_wins_over_the_spec_and_over_an_earlier_flag() -> None:
    job = load_job_file(EXAMPLES / "qlora-7b/job.yaml")
    merged = with_env_flags(job, ["HF_HUB_DISABLE_PROGRESS_BARS=0", "MODE=a", "MODE=b=c", "EMPTY="])
    assert merged.env == {"HF_HUB_DISABLE_PROGRESS_BARS": "0", "MODE": "b=c", "EMPTY": ""}
    assert parse_env_flags([]) == {}


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("QLORA_TINY", "--env 'QLORA_TINY': must be NAME=VALUE"),
        ("=1", "--env '': must be NAME=VALUE"),
        ("MY-VAR=1", "--env: 'MY-VAR' is not a valid environment variable name"),
        ("AWS_REGION=eu-west-1", "--env: 'AWS_REGION' is reserved for tether"),
        ("HF_TOKEN=x", "--env: secrets: HF_TOKEN also set in env"),
    ],
)
def test_a_bad_flag_is_a_usage_error_naming_it(flag: str, message: str) -> None:
    job = load_job_file(EXAMPLES / "qlora-7b/job.yaml")
    with pytest.raises(CliError) as refused:
        with_env_flags(job, [flag])
    assert refused.value.exit_code == 2
    assert refused.value.message.startswith(message), refused.value.message
