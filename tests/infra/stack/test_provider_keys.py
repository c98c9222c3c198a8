"""The provider keys' grants: each function reads only the SSM parameters it needs, decrypts
only through SSM and only those parameters; the functions find them by their ARNs."""

from __future__ import annotations

from typing import Any

import pytest

from infra import names
from tests.infra.api.test_secrets_grants import statements_of


def parameter_arn(name: str) -> dict[str, Any]:
    return {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":ssm:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                f":parameter{name}",
            ],
        ]
    }


VAST = parameter_arn(names.VAST_KEY_PARAMETER)
CLOUDFLARE = parameter_arn(names.CLOUDFLARE_PARAMETER)


def provider_key_grants(template: dict[str, Any], handler: str) -> dict[str, list[Any]]:
    """Action → the provider-key parameters it is granted on (resource or encryption context)."""
    found: dict[str, list[Any]] = {}
    for s in statements_of(template, handler):
        if s["Action"] == "ssm:GetParameter":
            found.setdefault("ssm:GetParameter", []).append(s["Resource"])
        elif s["Action"] == "kms:Decrypt" and "StringEquals" in s.get("Condition", {}):
            condition = s["Condition"]["StringEquals"]
            if "kms:EncryptionContext:PARAMETER_ARN" in condition:
                assert condition["kms:ViaService"] == {
                    "Fn::Join": ["", ["ssm.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]
                }
                found.setdefault("kms:Decrypt", []).append(
                    condition["kms:EncryptionContext:PARAMETER_ARN"]
                )
    return found


@pytest.mark.parametrize(
    ("handler", "keys"),
    [
        (names.MONITOR_HANDLER, [VAST, CLOUDFLARE]),
        (names.LIFECYCLE_HANDLER, [VAST, CLOUDFLARE]),
        (names.JOBS_HANDLER, [CLOUDFLARE]),  # R2 keys for code archives
        (names.LOGS_HANDLER, [CLOUDFLARE]),  # logs and files from R2
        (names.HEARTBEAT_HANDLER, []),  # never a provider key
    ],
)
def test_each_function_reads_and_decrypts_only_its_provider_keys(
    template: dict[str, Any], handler: str, keys: list[Any]
) -> None:
    grants = provider_key_grants(template, handler)
    expected = {"ssm:GetParameter": keys, "kms:Decrypt": keys} if keys else {}
    assert grants == expected


def test_functions_find_the_keys_by_parameter_arn(template: dict[str, Any]) -> None:
    from tests.infra.stack.test_template import function_by_handler

    for handler in (names.MONITOR_HANDLER, names.LIFECYCLE_HANDLER):
        _, function = function_by_handler(template, handler)
        env = function["Properties"]["Environment"]["Variables"]
        assert env[names.VAST_SECRET_ARN_ENV] == VAST
        assert env[names.CLOUDFLARE_SECRET_ARN_ENV] == CLOUDFLARE


def test_provider_keys_are_outside_the_user_secrets_prefix() -> None:
    """The API functions may read every parameter under /tether/secrets/ (job secrets): the
    Vast key must never be one of them."""
    from functions.domain.secrets import SECRET_PREFIX

    for name in (names.VAST_KEY_PARAMETER, names.CLOUDFLARE_PARAMETER):
        assert not name.startswith(SECRET_PREFIX)
