"""What `tether deploy` says is left to do (moto): `tether secrets set …` only for a provider key
that still holds the placeholder the deploy created, nothing once both are set."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from infra import names
from tether_cli import deploy, provider_keys

REGION = "eu-west-1"
CLOUDFLARE = {
    "account_id": "a" * 32,
    "api_token": "token",
    "parent_access_key_id": "b" * 32,
    "bucket": "ckpts",
}


@pytest.fixture(autouse=True)
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        provider_keys.prepare(REGION)  # what every deploy does first: the placeholders
        yield


def ssm() -> object:
    return boto3.client("ssm", region_name=REGION)


def test_a_fresh_deploy_says_to_set_both_keys() -> None:
    assert provider_keys.keys_to_set(REGION) == ["vast", "cloudflare"]
    assert deploy.next_steps(provider_keys.keys_to_set(REGION)) == (
        "next: tether secrets set vast   ·   tether secrets set cloudflare"
    )


def test_only_the_key_still_unset_is_named() -> None:
    provider_keys.store(ssm(), "vast", "vast-key-123")
    assert deploy.next_steps(provider_keys.keys_to_set(REGION)) == (
        "next: tether secrets set cloudflare"
    )


def test_with_both_keys_set_there_is_no_secrets_step() -> None:
    provider_keys.store(ssm(), "vast", "vast-key-123")
    provider_keys.store(ssm(), "cloudflare", json.dumps(CLOUDFLARE))
    assert provider_keys.keys_to_set(REGION) == []
    assert "secrets set" not in deploy.next_steps([])


def test_a_cloudflare_setting_with_one_placeholder_field_is_not_set() -> None:
    provider_keys.store(ssm(), "vast", "vast-key-123")
    partial = {**CLOUDFLARE, "bucket": names.SECRET_PLACEHOLDER}
    provider_keys.store(ssm(), "cloudflare", json.dumps(partial))
    assert provider_keys.keys_to_set(REGION) == ["cloudflare"]


def test_a_key_that_cannot_be_read_counts_as_not_set() -> None:
    boto3.client("ssm", region_name=REGION).delete_parameter(Name=names.VAST_KEY_PARAMETER)
    provider_keys.store(ssm(), "cloudflare", json.dumps(CLOUDFLARE))
    assert provider_keys.keys_to_set(REGION) == ["vast"]
