"""The provider keys as the functions read them (moto): an SSM SecureString by its parameter
ARN, decrypted; the placeholder `tether deploy` creates means "not set"; a missing parameter
fails (the monitor's run then fails, so no lease is renewed blind); an older stack's Secrets
Manager ARN still reads."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from functions.adapters import factory
from functions.adapters.factory import SecretNotSet
from infra import names
from tether_cli import provider_keys

REGION = "us-east-1"


def arn(name: str) -> str:
    return f"arn:aws:ssm:{REGION}:123456789012:parameter{name}"


@pytest.fixture(autouse=True)
def aws() -> Iterator[None]:
    factory.reset()
    with mock_aws():
        yield
    factory.reset()


def test_the_key_is_read_decrypted_from_its_secure_string() -> None:
    ssm = boto3.client("ssm", region_name=REGION)
    provider_keys.store(ssm, "vast", "vast-key-123")
    fields = dict(
        zip(names.CLOUDFLARE_SECRET_FIELDS, ("a" * 32, "tok", "b" * 32, "bkt"), strict=True)
    )
    provider_keys.store(ssm, "cloudflare", json.dumps(fields))
    assert factory.vast_api_key(arn(names.VAST_KEY_PARAMETER)) == "vast-key-123"
    account = factory.cloudflare_account(arn(names.CLOUDFLARE_PARAMETER))
    assert (account.api_token, account.bucket) == ("tok", "bkt")


def test_the_placeholders_tether_deploy_creates_mean_not_set() -> None:
    assert provider_keys.prepare(REGION) == [
        f"created {names.VAST_KEY_PARAMETER}: set it with `tether secrets set vast`",
        f"created {names.CLOUDFLARE_PARAMETER}: set it with `tether secrets set cloudflare`",
    ]
    with pytest.raises(SecretNotSet, match="tether secrets set vast"):
        factory.vast_api_key(arn(names.VAST_KEY_PARAMETER))
    with pytest.raises(SecretNotSet, match="account_id, api_token"):
        factory.cloudflare_account(arn(names.CLOUDFLARE_PARAMETER))
    assert provider_keys.prepare(REGION) == []  # existing parameters are left alone


def test_a_missing_parameter_is_a_failure_not_a_key_not_set() -> None:
    with pytest.raises(ClientError, match="ParameterNotFound"):
        factory.vast_api_key(arn(names.VAST_KEY_PARAMETER))


def test_prepare_moves_an_older_stacks_secrets_to_ssm() -> None:
    sm = boto3.client("secretsmanager", region_name=REGION)
    sm.create_secret(Name=names.VAST_SECRET_NAME, SecretString="old-key")
    sm.create_secret(Name=names.CLOUDFLARE_SECRET_NAME, SecretString='{"bucket":"b"}')
    sm.delete_secret(SecretId=names.CLOUDFLARE_SECRET_NAME)  # scheduled for deletion: unreadable
    done = provider_keys.prepare(REGION)
    assert done[0].startswith(f"moved the vast key from secret {names.VAST_SECRET_NAME}")
    assert done[1].startswith(f"created {names.CLOUDFLARE_PARAMETER}")
    assert factory.vast_api_key(arn(names.VAST_KEY_PARAMETER)) == "old-key"


def test_a_secrets_manager_arn_still_reads() -> None:
    sm = boto3.client("secretsmanager", region_name=REGION)
    secret = sm.create_secret(Name=names.VAST_SECRET_NAME, SecretString="sm-key")["ARN"]
    assert factory.vast_api_key(secret) == "sm-key"
