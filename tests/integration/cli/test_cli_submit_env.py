"""`tether submit --env NAME=VALUE` merges over the spec's `env` and is validated as the spec is;
the `next:` hints repeat the flags that chose the stack (`--local`, `--region`). Against the
in-process API of test_cli_jobs (the real handlers behind a MockTransport)."""

from __future__ import annotations

import argparse
import json

import httpx
import pytest

from tests.integration.cli.test_cli_jobs import EXAMPLE, Backend, backend, run  # noqa: F401
from tether_cli import api_client
from tether_cli import jobs as cli_jobs


@pytest.fixture
def any_target(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Backend:  # noqa: F811
    """The backend whatever `--local`/`--region` say: what is tested is what the CLI prints."""
    transport = httpx.MockTransport(backend)

    def connect(args: argparse.Namespace) -> api_client.TetherApi:
        target = api_client.resolve_api_url(local=False)
        return api_client.TetherApi(target, transport=transport, sleep=lambda _s: None)

    monkeypatch.setattr(cli_jobs, "connect", connect)
    return backend


def test_env_flags_merge_over_the_specs_env_and_are_stored(
    backend: Backend,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(
        capsys, "submit", EXAMPLE, "--env", "QLORA_TINY=1", "--env", "NOTE=a=b", "--json"
    )
    assert code == 0, err
    job = backend.store.get_job(json.loads(out)["job_id"])
    assert job is not None
    assert job.spec.env == {"QLORA_TINY": "1", "NOTE": "a=b"}


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("QLORA_TINY", "--env 'QLORA_TINY': must be NAME=VALUE"),
        ("1X=2", "--env: '1X' is not a valid environment variable name"),
        ("TETHER_JOB_ID=x", "--env: 'TETHER_JOB_ID' is reserved for tether"),
        ("BIG=" + "x" * 32_769, "--env BIG=…: "),
    ],
)
def test_a_bad_env_flag_exits_2_naming_the_flag_and_sends_nothing(
    backend: Backend,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    flag: str,
    message: str,
) -> None:
    code, out, err = run(capsys, "submit", EXAMPLE, "--env", flag)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith(f"tether: error: {message}"), err
    assert len(err.strip().splitlines()) == 1 and "x" * 100 not in err  # no value echoed
    assert backend.requests == [] and backend.job_ids() == []


def test_a_token_in_an_env_flag_draws_the_specs_warning(
    backend: Backend,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(capsys, "submit", EXAMPLE, "--env", "WANDB_API_KEY=w", "--json")
    assert code == 0, err
    assert "--env: env.WANDB_API_KEY: its name 'WANDB_API_KEY' suggests a credential" in err


@pytest.mark.parametrize(
    ("flags", "repeated"),
    [(["--local"], " --local"), (["--region", "eu-west-1"], " --region eu-west-1"), ([], "")],
)
def test_next_hints_keep_the_flags_that_chose_the_stack(
    any_target: Backend, capsys: pytest.CaptureFixture[str], flags: list[str], repeated: str
) -> None:
    code, out, err = run(capsys, "submit", EXAMPLE, *flags)
    assert code == 0, err
    (job_id,) = any_target.job_ids()
    assert (
        f"next: tether status {job_id}{repeated}   ·   tether logs -f {job_id}{repeated}\n" in out
    )
    code, out, err = run(capsys, "cancel", job_id, *flags)
    assert code == 0, err
    assert f"(`tether status {job_id}{repeated}` shows when it has ended)" in out
