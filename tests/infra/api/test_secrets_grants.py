"""The user-secret grants: SSM parameters under /tether/secrets/ only; KMS decrypt only for the
heartbeat function, only through SSM, only for those parameters."""

from __future__ import annotations

from typing import Any

from infra import names
from tests.infra.conftest import resources

PARAMETERS = {
    "Fn::Join": [
        "",
        [
            "arn:",
            {"Ref": "AWS::Partition"},
            ":ssm:",
            {"Ref": "AWS::Region"},
            ":",
            {"Ref": "AWS::AccountId"},
            ":parameter/tether/secrets/*",
        ],
    ]
}


def statements_of(template: dict[str, Any], handler: str) -> list[dict[str, Any]]:
    (function,) = [
        f
        for f in resources(template, "AWS::Lambda::Function").values()
        if f["Properties"].get("Handler") == handler
    ]
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    return [
        statement
        for policy in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def touches_user_secrets(statement: dict[str, Any]) -> bool:
    """A grant on the /tether/secrets/ parameters (the provider keys' grants are elsewhere:
    tests/infra/stack/test_provider_keys.py)."""
    return ":parameter/tether/secrets/" in str(statement)


def secret_statements(template, handler: str) -> list[dict[str, Any]]:
    return [
        s
        for s in statements_of(template, handler)
        if str(s["Action"]).startswith(("ssm:", "kms:")) and touches_user_secrets(s)
    ]


def test_the_heartbeat_function_reads_and_decrypts_only_the_prefix(template):
    found = secret_statements(template, names.HEARTBEAT_HANDLER)
    by_action = {s["Action"]: s for s in found}
    assert set(by_action) == {"ssm:GetParameters", "kms:Decrypt"}
    assert by_action["ssm:GetParameters"]["Resource"] == PARAMETERS
    assert "Condition" not in by_action["ssm:GetParameters"]
    kms = by_action["kms:Decrypt"]
    assert kms["Condition"]["StringLike"] == {"kms:EncryptionContext:PARAMETER_ARN": PARAMETERS}
    assert kms["Condition"]["StringEquals"] == {
        "kms:ViaService": {"Fn::Join": ["", ["ssm.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}
    }


def test_the_jobs_function_checks_names_and_cannot_decrypt(template):
    found = secret_statements(template, names.JOBS_HANDLER)
    assert [(s["Action"], s["Resource"]) for s in found] == [("ssm:GetParameters", PARAMETERS)]


def test_no_other_policy_touches_the_secrets(template):
    roles = {
        f["Properties"]["Role"]["Fn::GetAtt"][0]
        for f in resources(template, "AWS::Lambda::Function").values()
        if f["Properties"].get("Handler") in (names.HEARTBEAT_HANDLER, names.JOBS_HANDLER)
    }
    others = [
        statement
        for policy in resources(template, "AWS::IAM::Policy").values()
        if not any({"Ref": role} in policy["Properties"]["Roles"] for role in roles)
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert others
    assert [s for s in others if touches_user_secrets(s)] == []
