"""Template assertions on properties: what each resource is allowed and configured to do."""

from __future__ import annotations

from typing import Any

import pytest

from functions.adapters.table import TABLE_DEFINITION, TTL_ATTRIBUTE
from infra import names
from infra.constructs.api import HEARTBEAT_TABLE_ACTIONS, JOBS_TABLE_ACTIONS
from tests.infra.conftest import resources


def function_by_handler(template, handler: str) -> tuple[str, dict[str, Any]]:
    found = [
        (k, v)
        for k, v in resources(template, "AWS::Lambda::Function").items()
        if v["Properties"].get("Handler") == handler
    ]
    assert len(found) == 1, handler
    return found[0]


def role_actions(template, function: dict[str, Any]) -> set[str]:
    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    actions: set[str] = set()
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                found = statement["Action"]
                actions |= {found} if isinstance(found, str) else set(found)
    return actions


def test_table_keys_indexes_billing_pitr_and_ttl_come_from_the_shared_definition(template):
    (table,) = resources(template, "AWS::DynamoDB::Table").values()
    props = table["Properties"]
    assert props["KeySchema"] == TABLE_DEFINITION["KeySchema"]
    assert sorted(props["AttributeDefinitions"], key=str) == sorted(
        TABLE_DEFINITION["AttributeDefinitions"], key=str
    )
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert props["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    by_name = {i["IndexName"]: i for i in props["GlobalSecondaryIndexes"]}
    for index in TABLE_DEFINITION["GlobalSecondaryIndexes"]:
        assert by_name[index["IndexName"]]["KeySchema"] == index["KeySchema"]
        assert by_name[index["IndexName"]]["Projection"] == {"ProjectionType": "ALL"}
    assert table["DeletionPolicy"] == "Retain"


@pytest.mark.parametrize("handler", [names.JOBS_HANDLER, names.HEARTBEAT_HANDLER])
def test_functions_are_arm64_python312_traced_with_their_own_log_group(template, handler):
    _, function = function_by_handler(template, handler)
    props = function["Properties"]
    assert props["Architectures"] == ["arm64"]
    assert props["Runtime"] == "python3.12"
    # the heartbeat (every 15 s per job) is not traced: each would be a billed X-Ray trace
    traced = {names.JOBS_HANDLER: {"Mode": "Active"}, names.HEARTBEAT_HANDLER: None}
    assert props.get("TracingConfig") == traced[handler]
    log_group_id = props["LoggingConfig"]["LogGroup"]["Ref"]
    log_group = template["Resources"][log_group_id]
    assert log_group["Properties"]["RetentionInDays"] == names.LOG_RETENTION_DAYS
    env = props["Environment"]["Variables"]
    assert env[names.SERVICE_NAME_ENV] == names.SERVICE_NAME
    assert env[names.METRICS_NAMESPACE_ENV] == names.METRICS_NAMESPACE
    (table_id,) = resources(template, "AWS::DynamoDB::Table")
    assert env[names.TABLE_NAME_ENV] == {"Ref": table_id}


def test_environment_is_filled_from_the_owning_constructs(template):
    _, jobs = function_by_handler(template, names.JOBS_HANDLER)
    (machine_id,) = resources(template, "AWS::StepFunctions::StateMachine")
    assert jobs["Properties"]["Environment"]["Variables"][names.STATE_MACHINE_ARN_ENV] == {
        "Ref": machine_id
    }
    _, heartbeat = function_by_handler(template, names.HEARTBEAT_HANDLER)
    env = heartbeat["Properties"]["Environment"]["Variables"]
    assert env[names.SUPERVISED_MAX_AGE_ENV] == str(names.SUPERVISED_MAX_AGE_S)
    assert names.STATE_MACHINE_ARN_ENV not in env


def test_least_privilege_per_function(template):
    _, jobs = function_by_handler(template, names.JOBS_HANDLER)
    _, heartbeat = function_by_handler(template, names.HEARTBEAT_HANDLER)
    xray_and_logs = {
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    }
    assert role_actions(template, jobs) == (
        set(JOBS_TABLE_ACTIONS)
        | {"states:StartExecution", "sns:Publish", "ssm:GetParameters"}
        # the Cloudflare parameter, to mint R2 keys for code archives
        | {"ssm:GetParameter", "kms:Decrypt"}
        | xray_and_logs
    )
    assert role_actions(template, heartbeat) == (
        set(HEARTBEAT_TABLE_ACTIONS)
        | {"ssm:GetParameters", "kms:Decrypt"}
        | {"logs:CreateLogStream", "logs:PutLogEvents"}  # not X-Ray traced
    )
    for roles in (jobs, heartbeat):
        role = template["Resources"][roles["Properties"]["Role"]["Fn::GetAtt"][0]]
        assert "ManagedPolicyArns" not in role["Properties"]


def test_user_routes_use_iam_auth_and_the_heartbeat_none(template):
    routes = {
        r["Properties"]["RouteKey"]: r["Properties"]
        for r in resources(template, "AWS::ApiGatewayV2::Route").values()
    }
    for method, path in names.USER_ROUTES:
        assert routes[f"{method} {path}"]["AuthorizationType"] == "AWS_IAM"
    heartbeat = routes[" ".join(names.HEARTBEAT_ROUTE)]
    assert heartbeat.get("AuthorizationType", "NONE") == "NONE"
    assert routes["$default"].get("AuthorizationType", "NONE") == "NONE"
    assert routes[" ".join(names.LOGS_ROUTE)]["AuthorizationType"] == "AWS_IAM"
    assert routes["GET /jobs/{id}/files"]["AuthorizationType"] == "AWS_IAM"
    assert len(routes) == len(names.USER_ROUTES) + 4  # + heartbeat, logs, files, $default


def test_routes_reach_the_right_function(template):
    jobs_id, _ = function_by_handler(template, names.JOBS_HANDLER)
    heartbeat_id, _ = function_by_handler(template, names.HEARTBEAT_HANDLER)
    logs_id, _ = function_by_handler(template, names.LOGS_HANDLER)
    integrations = resources(template, "AWS::ApiGatewayV2::Integration")

    def target(route: dict[str, Any]) -> str:
        integration_id = route["Properties"]["Target"]["Fn::Join"][1][1]["Ref"]
        uri = integrations[integration_id]["Properties"]["IntegrationUri"]
        return str(uri["Fn::GetAtt"][0])

    for route in resources(template, "AWS::ApiGatewayV2::Route").values():
        key = route["Properties"]["RouteKey"]
        by_logs = key in ("GET /jobs/{id}/logs", "GET /jobs/{id}/files")
        expected = heartbeat_id if "heartbeat" in key else logs_id if by_logs else jobs_id
        assert target(route) == expected


def test_stage_has_access_logs_and_throttling(template):
    (stage,) = resources(template, "AWS::ApiGatewayV2::Stage").values()
    props = stage["Properties"]
    assert props["StageName"] == "$default"
    assert props["AutoDeploy"] is True
    assert "DestinationArn" in props["AccessLogSettings"]
    assert props["DefaultRouteSettings"]["ThrottlingRateLimit"] == {"Ref": "UserRateLimit"}


def test_artifacts_bucket_blocks_public_access_and_requires_tls(template):
    buckets = resources(template, "AWS::S3::Bucket")
    (bucket_id, bucket) = next(iter(buckets.items()))
    block = bucket["Properties"]["PublicAccessBlockConfiguration"]
    assert all(
        block[k] is True
        for k in (
            "BlockPublicAcls",
            "BlockPublicPolicy",
            "IgnorePublicAcls",
            "RestrictPublicBuckets",
        )
    )
    (policy,) = [
        p
        for p in resources(template, "AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in statements
    )
    assert resources(template, "Custom::CDKBucketDeployment")


def test_no_secrets_manager_secret_bills_at_rest(template):
    """The provider keys are SSM SecureStrings the CLI creates (tests/infra/stack/
    test_provider_keys.py): no $0.40-a-month secret in the stack."""
    assert not resources(template, "AWS::SecretsManager::Secret")
    assert template["Outputs"][names.OUTPUT_VAST_SECRET_ARN]["Value"] == names.VAST_KEY_PARAMETER


def test_state_machine_is_standard_logged_and_traced(template):
    (machine,) = resources(template, "AWS::StepFunctions::StateMachine").values()
    props = machine["Properties"]
    assert props.get("StateMachineType", "STANDARD") == "STANDARD"
    assert props["TracingConfiguration"] == {"Enabled": True}
    assert props["LoggingConfiguration"]["Level"] == "ALL"


def test_outputs_use_the_shared_names(template):
    assert set(template["Outputs"]) >= {
        names.OUTPUT_API_URL,
        names.OUTPUT_TABLE_NAME,
        names.OUTPUT_ARTIFACTS_BUCKET,
        names.OUTPUT_STATE_MACHINE_ARN,
        names.OUTPUT_VAST_SECRET_ARN,
        names.OUTPUT_CLOUDFLARE_SECRET_ARN,
        names.OUTPUT_MONITOR_SHARDS,
    }
    assert template["Outputs"][names.OUTPUT_MONITOR_SHARDS]["Value"] == "1"


def test_every_function_logs_to_a_group_with_retention(template):
    """CDK's deploy-time helpers too: a function without a log group of its own logs to an
    auto-created /aws/lambda/… group that never expires."""
    functions = resources(template, "AWS::Lambda::Function")
    assert len(functions) >= 7
    for logical_id, function in functions.items():
        group_id = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        group = template["Resources"][group_id]
        assert group["Properties"]["RetentionInDays"] == names.LOG_RETENTION_DAYS, logical_id
