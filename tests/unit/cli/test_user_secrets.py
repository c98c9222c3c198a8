"""`tether secrets set NAME | list | delete NAME` against moto's SSM; `vast`/`cloudflare` stay
the control plane's; a token-looking `env` value draws a warning from `validate`."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import yaml
from moto import mock_aws

from tests.paths import ROOT
from tether_cli.main import main

REGION = "eu-west-1"
VALUE = "hf_CliStoredValue0123456789abcdef"


@pytest.fixture
def ssm(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("ssm", region_name=REGION)


def run(monkeypatch: pytest.MonkeyPatch, argv: list[str], stdin: str = "") -> int:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    return main([*argv, "--region", REGION])


def test_set_reads_stdin_and_stores_a_secure_string_under_the_prefix(
    ssm, monkeypatch, capsys
) -> None:
    assert run(monkeypatch, ["secrets", "set", "HF_TOKEN"], VALUE + "\n") == 0
    out = capsys.readouterr().out
    assert "stored secret HF_TOKEN in eu-west-1" in out and VALUE not in out
    stored = ssm.get_parameter(Name="/tether/secrets/HF_TOKEN", WithDecryption=True)["Parameter"]
    assert (stored["Type"], stored["Value"]) == ("SecureString", VALUE)


def test_list_prints_names_only_and_delete_removes(ssm, monkeypatch, capsys) -> None:
    run(monkeypatch, ["secrets", "set", "HF_TOKEN"], VALUE)
    run(monkeypatch, ["secrets", "set", "WANDB_API_KEY"], "w" * 40)
    ssm.put_parameter(Name="/elsewhere/OTHER", Value="x", Type="String")
    capsys.readouterr()
    assert run(monkeypatch, ["secrets", "list", "--json"]) == 0
    listed = capsys.readouterr().out
    assert json.loads(listed) == {"secrets": ["HF_TOKEN", "WANDB_API_KEY"]}
    assert VALUE not in listed
    assert run(monkeypatch, ["secrets", "delete", "HF_TOKEN"]) == 0
    capsys.readouterr()
    assert run(monkeypatch, ["secrets", "list"]) == 0
    assert capsys.readouterr().out == "WANDB_API_KEY\n"


def test_deleting_an_unknown_secret_fails_naming_it(ssm, monkeypatch, capsys) -> None:
    assert run(monkeypatch, ["secrets", "delete", "NOPE"]) == 1
    assert "cannot delete NOPE: no such secret" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (["secrets", "set", "hf_token"], VALUE, "'hf_token' is not a valid secret name"),
        (["secrets", "set", "TETHER_X"], VALUE, "'TETHER_X' is reserved for tether"),
        (["secrets", "delete", "vast"], "", "`vast` and `cloudflare` are the control plane's"),
        (["secrets", "set", "HF_TOKEN"], "", "HF_TOKEN: the value is empty"),
        (["secrets", "set", "HF_TOKEN"], "x" * 4097, "HF_TOKEN: the value is over 4096 bytes"),
    ],
)
def test_bad_input_exits_2_and_stores_nothing(ssm, monkeypatch, capsys, argv, stdin, message):
    assert run(monkeypatch, argv, stdin) == 2
    assert message in capsys.readouterr().err
    assert ssm.describe_parameters()["Parameters"] == []


def test_a_value_is_never_an_argument(ssm, monkeypatch, capsys) -> None:
    assert run(monkeypatch, ["secrets", "set", "HF_TOKEN", VALUE], "") == 2
    assert "unrecognized arguments" in capsys.readouterr().err
    assert ssm.describe_parameters()["Parameters"] == []


def test_validate_warns_on_token_like_env_but_passes(tmp_path: Path, capsys) -> None:
    spec = yaml.safe_load((ROOT / "examples" / "tiny-cpu" / "job.yaml").read_text())
    spec["env"] = {"HF_TOKEN": VALUE, "MODEL": "meta-llama/Llama-2-7b-hf"}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.count("tether: warning:") == 1
    assert "env.HF_TOKEN: its name 'HF_TOKEN' suggests a credential" in err
    assert "tether secrets set HF_TOKEN" in err
