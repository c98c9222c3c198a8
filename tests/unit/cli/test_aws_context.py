"""Which AWS the CLI reaches, and as whom, on a machine with nothing configured: botocore's real
credential chain over an empty HOME and no AWS variable. Each way AWS can be missing is one line
with its fix; the job commands take the region by the rule deploy and secrets use; `--local`
reads no AWS credential or config at all, and says to start the local stack when none answers."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest
from moto import mock_aws

from infra import names
from tether_cli import api_client
from tether_cli import jobs as cli_jobs
from tether_cli.main import build_parser, main

API_URLS = {
    "eu-west-1": "https://euwest1api.execute-api.eu-west-1.amazonaws.com/",
    "us-west-2": "https://uswest2api.execute-api.us-west-2.amazonaws.com/",
    "ap-south-1": "https://apsouth1api.execute-api.ap-south-1.amazonaws.com/",
}


@pytest.fixture
def bare_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No AWS_* or TETHER_* variable and an empty HOME (no ~/.aws): what a new user has."""
    for key in list(os.environ):
        if key.startswith(("AWS_", "TETHER_")):
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv(api_client.LOCAL_STATE_ENV, str(tmp_path / "local-stack.json"))
    return home


def with_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDUSER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "user-secret")


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("tether: error: ")
    return lines[0]


@pytest.fixture
def stacks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A deployed stack in each region of API_URLS (moto), its ApiUrl naming the region."""
    with_keys(monkeypatch)
    with mock_aws():
        for region, url in API_URLS.items():
            template = {
                "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {names.OUTPUT_API_URL: {"Value": url}},
            }
            boto3.client("cloudformation", region_name=region).create_stack(
                StackName=names.STACK_NAME, TemplateBody=json.dumps(template)
            )
        yield


# --- each way AWS can be missing: one line, its fix -------------------------------------------


def test_no_credentials_says_how_to_get_them_and_offers_the_local_stack(
    bare_machine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["jobs"]) == 1
    line = one_error_line(capsys)
    assert "no AWS credentials found: configure them (`aws configure`" in line
    assert "`tether local up`, then add --local" in line


def test_no_region_says_where_to_set_one(
    bare_machine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with_keys(monkeypatch)
    assert main(["status", "j-1"]) == 2
    assert one_error_line(capsys) == (
        "tether: error: no AWS region: pass --region, set AWS_REGION, or "
        "`aws configure set region …`"
    )


def test_no_stack_names_the_region_and_where_it_came_from(
    bare_machine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with_keys(monkeypatch)
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    with mock_aws():
        assert main(["jobs"]) == 1
    line = one_error_line(capsys)
    assert "stack Tether is not deployed in this account and region (eu-central-1, from " in line
    assert "AWS_REGION): deploy it (`tether deploy --region eu-central-1`)" in line
    assert "pass --region with the region it is in" in line


@pytest.mark.parametrize(
    ("argv", "environ", "source"),
    [
        (["--region", "eu-nowhere-9"], {}, "--region"),
        ([], {"AWS_REGION": "eu-nowhere-9"}, "AWS_REGION"),
    ],
)
def test_a_region_aws_does_not_know_is_named_not_an_unreachable_endpoint(
    bare_machine: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    environ: dict[str, str],
    source: str,
) -> None:
    with_keys(monkeypatch)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    assert main(["jobs", *argv]) == 2
    assert one_error_line(capsys) == (
        f"tether: error: 'eu-nowhere-9' (from {source}) is not an AWS region: pass --region "
        "with a real one, e.g. eu-west-1"
    )


def test_an_unknown_profile_is_named(
    bare_machine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "work")
    assert main(["jobs"]) == 1
    assert "AWS profile 'work' is not in your AWS config" in one_error_line(capsys)


# --- one region rule for every command --------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "environ", "region"),
    [
        (["--region", "ap-south-1"], {"AWS_REGION": "eu-west-1"}, "ap-south-1"),
        ([], {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-west-2"}, "eu-west-1"),
        ([], {"AWS_DEFAULT_REGION": "us-west-2"}, "us-west-2"),
    ],
)
def test_job_commands_find_the_stack_by_the_region_rule_deploy_and_secrets_use(
    bare_machine: Path,
    stacks: None,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    environ: dict[str, str],
    region: str,
) -> None:
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    for command in (["jobs"], ["status", "j-1"], ["logs", "j-1"], ["download", "j-1", "--outputs"]):
        args = build_parser().parse_args([*command, *argv])
        with cli_jobs.connect(args) as api:
            assert api.target.url == API_URLS[region], command


def test_the_region_from_the_profile_comes_last(
    bare_machine: Path, stacks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = bare_machine / ".aws" / "config"
    config.parent.mkdir()
    config.write_text("[default]\nregion = us-west-2\n")
    args = build_parser().parse_args(["jobs"])
    with cli_jobs.connect(args) as api:
        assert api.target.url == API_URLS["us-west-2"]


# --- --local: no AWS account, and a clear word when no local stack runs -----------------------


def test_local_commands_sign_with_the_local_stacks_key_and_read_no_aws_config(
    bare_machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "not-configured")  # would fail any read of the config
    api_client.write_local_state("http://127.0.0.1:8899")
    seen: list[httpx.Request] = []

    def local_front(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"jobs": []})

    target = api_client.resolve_api_url(local=True)
    with api_client.TetherApi(target, transport=httpx.MockTransport(local_front)) as api:
        assert api.list_jobs() == {"jobs": []}
    authorization = seen[0].headers["authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDLOCALDEMO/")
    assert "/us-east-1/execute-api/aws4_request" in authorization


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("state", ["stale", "absent"])
def test_local_with_no_stack_running_says_to_start_it(
    bare_machine: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    state: str,
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/"
    if state == "stale":  # `local up` was killed: its state file names a port nobody serves
        api_client.write_local_state(url)
    else:  # no state file: the default port, here one nobody serves
        monkeypatch.setattr(api_client, "LOCAL_DEFAULT_URL", url)
    assert main(["jobs", "--local"]) == 1
    line = one_error_line(capsys)
    assert line.startswith(f"tether: error: no local stack is running at {url} (")
    assert line.endswith("start it with `tether local up` (it serves until Ctrl-C)")


def test_next_hints_repeat_the_flags_that_chose_the_stack() -> None:
    parse = build_parser().parse_args
    assert api_client.target_flags(parse(["status", "j", "--local"])) == " --local"
    assert api_client.target_flags(parse(["status", "j", "--region", "eu-west-1"])) == (
        " --region eu-west-1"
    )
    assert api_client.target_flags(parse(["status", "j"])) == ""
