"""docs/deploy.md's walk-through, run against moto's server as far as moto allows.

Covered: the order of the documented commands (the venv before anything that runs the CDK app),
the synthesis `tether deploy` runs, the deploy's pre-checks (Node.js, credentials, one region,
the bootstrap check) in the region the user named, the stack outputs printed verbatim,
`secrets set` in that region, and `destroy` refusing when it cannot check for active jobs.
Not covered (moto cannot): the CDK CLI's bootstrap and deploy themselves (`npx aws-cdk`), which
the deploy test records instead of running, and a CloudFormation stack built from the template.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from infra import names
from infra.synth import main as synth_main
from tests.paths import ROOT
from tether_cli import deploy
from tether_cli.main import main

REGION = "eu-west-1"  # the walk-through's; the environment says us-east-1 (tests/conftest.py)
ARN = names.VAST_KEY_PARAMETER  # the output names the parameter


def doc_block(heading: str) -> list[str]:
    """The command lines of the first fenced block under `heading` in docs/deploy.md."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text.split(f"\n{heading}\n", 1)[1]
    block = section.split("```\n", 2)[1]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


@pytest.fixture
def moto_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{server.get_host_and_port()[1]}"
    httpx.post(f"{url}/moto-api/reset", timeout=10).raise_for_status()
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    monkeypatch.delenv(names.OUTPUT_API_URL, raising=False)
    monkeypatch.delenv("TETHER_API_URL", raising=False)
    try:
        yield url
    finally:
        httpx.post(f"{url}/moto-api/reset", timeout=10)
        server.stop()


@pytest.fixture
def node_22(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`node` and `npx` that report 22 (this machine's Node may be older; the version check
    itself is tested with its own inputs in tests/unit/cli/test_deploy_region.py)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("node", "npx"):
        (bin_dir / name).write_text("#!/bin/sh\necho v22.12.0\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_walkthrough_creates_the_venv_before_anything_runs_the_cdk_app() -> None:
    walk = doc_block("## Walk-through")
    assert walk[1] == "make venv"
    assert walk[2].startswith(".venv/bin/tether deploy --bootstrap --alarm-email ")
    by_hand = doc_block("## Each step by hand")
    assert by_hand[0] == "make venv"
    assert by_hand.index("npx --yes aws-cdk@2.1148.1 bootstrap aws://ACCOUNT/REGION") > 0
    # `npx cdk …` with no --app runs cdk.json's command: it makes the venv it then uses, with
    # the demo's install set (the CDK app needs no torch).
    app = json.loads((ROOT / "cdk.json").read_text())["app"]
    assert app == "make --silent venv-demo >&2 && .venv/bin/python -m infra.app"
    makefile = (ROOT / "Makefile").read_text()
    assert "\nvenv-demo: $(DEMO_STAMP)\n" in makefile


def test_the_documented_make_deploy_passes_the_alarm_email_to_tether_deploy() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndeploy: $(DEMO_STAMP)\n", 1)[1].splitlines()[0]
    assert recipe == "\t$(VENV)/bin/tether deploy $(ARGS)"
    walk = (ROOT / "docs" / "deploy.md").read_text()
    args = re.search(r'make deploy ARGS="([^"]+)"', walk)
    assert args is not None
    assert args.group(1) == "--bootstrap --alarm-email you@example.com --region eu-west-1"


def test_synthesis_prints_what_the_docs_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert synth_main(["--out", str(tmp_path / "cdk.out")]) == 0
    out = capsys.readouterr().out
    assert out == (
        f"synthesized Tether → {tmp_path / 'cdk.out' / 'Tether.template.json'}\n"
        "cdk-nag AwsSolutions: no unacknowledged findings\n"
    )


def test_deploy_checks_in_the_named_region_and_prints_the_outputs_verbatim(
    moto_server: str, node_22: None, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    # Bootstrapped in the environment's region only: the check must look in the one named.
    boto3.client("ssm", region_name="us-east-1").put_parameter(
        Name=deploy.BOOTSTRAP_PARAMETER, Value="30", Type="String"
    )
    code, _, err = run(capsys, "deploy", "--alarm-email", "you@example.com", "--region", REGION)
    assert code == 1
    assert "deploying to account 123456789012, region eu-west-1 (--region)" in err
    assert (
        "account 123456789012 is not CDK-bootstrapped in eu-west-1: run `tether deploy "
        "--bootstrap`" in err
    )

    # What `npx aws-cdk bootstrap` and `deploy` would leave (moto cannot run them).
    boto3.client("ssm", region_name=REGION).put_parameter(
        Name=deploy.BOOTSTRAP_PARAMETER, Value="30", Type="String"
    )
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=names.STACK_NAME,
        TemplateBody=json.dumps(
            {
                "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {
                    names.OUTPUT_VAST_SECRET_ARN: {"Value": ARN},
                    "ApiUrl": {"Value": "https://x.execute-api.eu-west-1.amazonaws.com/[bold]"},
                },
            }
        ),
    )
    # the Vast secret of a stack from before the provider keys moved to SSM
    boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name=names.VAST_SECRET_NAME, SecretString="old-vast-key"
    )
    ran: list[tuple[list[str], dict[str, str]]] = []

    def cdk(command: list[str], cwd: Path | None = None, env: Any = None) -> int:
        ran.append((command, dict(env or {})))
        return 0

    monkeypatch.setattr(deploy, "run_command", cdk)
    monkeypatch.setattr(
        deploy,
        "synth",
        lambda root, shards=None, concurrency=None, dashboard=None: root / "cdk.out",
    )
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    code, out, err = run(capsys, "deploy", "--alarm-email", "you@example.com", "--region", REGION)
    assert code == 0, err
    ((command, env),) = ran
    assert command[-2:] == ["--parameters", "AlarmEmail=you@example.com"]
    assert (env["AWS_REGION"], env["AWS_DEFAULT_REGION"]) == (REGION, REGION)
    assert out.splitlines()[:3] == [
        "deployed Tether to account 123456789012, region eu-west-1 (--region)",
        "  ApiUrl: https://x.execute-api.eu-west-1.amazonaws.com/[bold]",
        f"  {names.OUTPUT_VAST_SECRET_ARN}: {ARN}",
    ]
    # Before the deploy, the provider keys' parameters: the old stack's Vast secret moved over,
    # the Cloudflare one (never deployed here) created with the placeholder.
    assert f"moved the vast key from secret {names.VAST_SECRET_NAME} to SSM" in err
    assert (
        f"created {names.CLOUDFLARE_PARAMETER}: set it with `tether secrets set cloudflare`" in err
    )
    ssm = boto3.client("ssm", region_name=REGION)
    vast = ssm.get_parameter(Name=names.VAST_KEY_PARAMETER, WithDecryption=True)["Parameter"]
    assert (vast["Type"], vast["Value"]) == ("SecureString", "old-vast-key")
    cloudflare = ssm.get_parameter(Name=names.CLOUDFLARE_PARAMETER, WithDecryption=True)
    assert json.loads(cloudflare["Parameter"]["Value"]) == dict.fromkeys(
        names.CLOUDFLARE_SECRET_FIELDS, names.SECRET_PLACEHOLDER
    )
    # a second deploy leaves set keys alone
    ssm.put_parameter(
        Name=names.VAST_KEY_PARAMETER, Value="new", Type="SecureString", Overwrite=True
    )
    code, _, err = run(capsys, "deploy", "--region", REGION)
    assert code == 0 and "moved" not in err and "created" not in err, err
    assert (
        ssm.get_parameter(Name=names.VAST_KEY_PARAMETER, WithDecryption=True)["Parameter"]["Value"]
        == "new"
    )


def test_the_region_in_aws_region_wins_over_aws_default_region(
    moto_server: str, node_22: None, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    boto3.client("ssm", region_name="us-east-1").put_parameter(
        Name=deploy.BOOTSTRAP_PARAMETER, Value="30", Type="String"
    )
    code, _, err = run(capsys, "deploy")
    assert code == 1
    assert "region eu-west-1 (AWS_REGION)" in err and "not CDK-bootstrapped in eu-west-1" in err


def test_secrets_set_writes_in_the_named_region(
    moto_server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    regional = boto3.client("ssm", region_name=REGION)
    monkeypatch.setattr(sys, "stdin", io.StringIO("vast-key-123\n"))
    code, out, err = run(capsys, "secrets", "set", "vast", "--region", REGION)
    assert code == 0, err
    assert out.startswith(f"stored {names.VAST_KEY_PARAMETER} in eu-west-1 (SSM SecureString")
    stored = regional.get_parameter(Name=names.VAST_KEY_PARAMETER, WithDecryption=True)
    assert stored["Parameter"]["Value"] == "vast-key-123"
    with pytest.raises(ClientError):  # not in the other region
        boto3.client("ssm", region_name="us-east-1").get_parameter(Name=names.VAST_KEY_PARAMETER)


def test_destroy_refuses_when_it_cannot_check_for_active_jobs(
    moto_server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted: list[list[str]] = []

    def cdk(command: list[str], **_: object) -> int:
        deleted.append(command)
        return 0

    monkeypatch.setattr(deploy, "run_command", cdk)
    code, out, err = run(capsys, "destroy", "--yes", "--region", REGION)
    assert code == 1 and out == "" and deleted == []
    assert err.startswith(
        "tether: error: not destroying: cannot check for active jobs (stack Tether is not "
        "deployed in this account and region"
    )
    assert "pass --force to destroy without checking" in err


def test_destroy_says_what_stays_before_asking(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deploy, "active_jobs", lambda region: [])
    monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    code, _, err = run(capsys, "destroy", "--region", REGION)
    assert code == 2 and "not destroyed" in err
    assert "a redeploy creates a new, empty table" in err
    assert (
        f"the provider keys {names.VAST_KEY_PARAMETER} and {names.CLOUDFLARE_PARAMETER} (SSM "
        "parameters, free) are kept for a redeploy" in err
    )
