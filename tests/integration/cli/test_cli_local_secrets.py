"""`tether secrets set|list|delete NAME --local`: the local stack's SSM (a moto server, found
through the state file `tether local up` writes), under the deployed stack's parameter names,
with no AWS account: an empty HOME and no AWS variable."""

from __future__ import annotations

import io
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from functions.domain.secrets import parameter_name
from infra import names
from tether_cli import api_client
from tether_cli.main import main

VALUE = "hf_LocalStackValue0123456789abcdef"


@pytest.fixture
def bare_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No AWS_* or TETHER_* variable, an empty HOME, the local state file under tmp_path."""
    for key in list(os.environ):
        if key.startswith(("AWS_", "TETHER_")):
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    state = tmp_path / "local-stack.json"
    monkeypatch.setenv(api_client.LOCAL_STATE_ENV, str(state))
    return state


@pytest.fixture
def local_ssm(bare_machine: Path) -> Iterator[Any]:
    """A moto server standing in for the local stack's AWS, recorded as `local up` records it."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        url = f"http://127.0.0.1:{server.get_host_and_port()[1]}"
        api_client.write_local_state("http://127.0.0.1:8787", bare_machine, aws_url=url)
        yield boto3.client(
            "ssm",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
    finally:
        server.stop()


def run(monkeypatch: pytest.MonkeyPatch, argv: list[str], stdin: str = "") -> int:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    return main(argv)


def test_set_list_and_delete_use_the_local_stacks_ssm_without_an_aws_account(
    local_ssm: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ssm = local_ssm
    assert run(monkeypatch, ["secrets", "set", "HF_TOKEN", "--local"], VALUE + "\n") == 0
    out, err = capsys.readouterr()
    assert out == "stored secret HF_TOKEN in the local stack (version 1)\n", err
    stored = ssm.get_parameter(Name=parameter_name("HF_TOKEN"), WithDecryption=True)
    assert stored["Parameter"]["Name"] == "/tether/secrets/HF_TOKEN"
    assert (stored["Parameter"]["Type"], stored["Parameter"]["Value"]) == ("SecureString", VALUE)

    assert run(monkeypatch, ["secrets", "list", "--local", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"secrets": ["HF_TOKEN"]}
    assert run(monkeypatch, ["secrets", "delete", "HF_TOKEN", "--local"]) == 0
    assert capsys.readouterr().out == "deleted secret HF_TOKEN in the local stack\n"
    assert run(monkeypatch, ["secrets", "list", "--local"]) == 0
    assert capsys.readouterr().out == (
        "no secrets stored (store one with `tether secrets set NAME --local`)\n"
    )


def test_the_account_keys_are_not_set_locally(
    local_ssm: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(monkeypatch, ["secrets", "set", "vast", "--local"], "key\n") == 2
    assert "--local stores job secrets only (HF_TOKEN…)" in capsys.readouterr().err
    reply = local_ssm.describe_parameters()
    assert names.VAST_KEY_PARAMETER not in [p["Name"] for p in reply["Parameters"]]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("state", ["absent", "stale"])
def test_no_local_stack_says_to_start_it(
    bare_machine: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    state: str,
) -> None:
    if state == "stale":  # `local up` was killed: its moto no longer answers
        url = f"http://127.0.0.1:{_closed_port()}"
        api_client.write_local_state("http://127.0.0.1:8787", bare_machine, aws_url=url)
    assert run(monkeypatch, ["secrets", "set", "HF_TOKEN", "--local"], VALUE) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "Traceback" not in err
    assert lines[0].endswith("start it with `tether local up` (it serves until Ctrl-C)")
    assert VALUE not in err
