"""Template assertions for the monitor and the lifecycle: schedule, permissions, task functions."""

from __future__ import annotations

import json
from typing import Any

from infra import names
from infra.constructs.lifecycle import LIFECYCLE_TABLE_ACTIONS
from infra.constructs.monitor import MONITOR_INDEX_SCAN_ACTIONS, MONITOR_TABLE_ACTIONS
from tests.infra.conftest import resources
from tests.infra.stack.test_template import function_by_handler, role_actions

XRAY_AND_LOGS = {
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "logs:CreateLogStream",
    "logs:PutLogEvents",
}
SECRETS_READ = {"ssm:GetParameter", "kms:Decrypt"}  # the provider keys (SSM SecureStrings)


def definition(template: dict[str, Any]) -> dict[str, Any]:
    (machine,) = resources(template, "AWS::StepFunctions::StateMachine").values()
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else "ARN" for p in parts)
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def test_monitor_runs_every_minute_through_its_own_scheduler_role(template):
    monitor_id, monitor = function_by_handler(template, names.MONITOR_HANDLER)
    (schedule,) = resources(template, "AWS::Scheduler::Schedule").values()
    props = schedule["Properties"]
    assert props["ScheduleExpression"] == "rate(1 minute)"
    assert props["State"] == "ENABLED"
    assert props["Target"]["Arn"] == {"Fn::GetAtt": [monitor_id, "Arn"]}
    assert props["Target"]["RetryPolicy"]["MaximumRetryAttempts"] == 0
    role = template["Resources"][props["Target"]["RoleArn"]["Fn::GetAtt"][0]]
    principal = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
    assert principal == {"Service": "scheduler.amazonaws.com"}
    assert monitor["Properties"]["Timeout"] < names.MONITOR_INTERVAL_S


def test_monitor_and_lifecycle_functions_hold_only_their_grants(template):
    _, monitor = function_by_handler(template, names.MONITOR_HANDLER)
    _, lifecycle = function_by_handler(template, names.LIFECYCLE_HANDLER)
    assert role_actions(template, monitor) == (
        set(MONITOR_TABLE_ACTIONS)
        | set(MONITOR_INDEX_SCAN_ACTIONS)
        | {"states:StartExecution", "states:DescribeExecution"}
        | SECRETS_READ
        | {"logs:CreateLogStream", "logs:PutLogEvents"}  # not traced: no X-Ray grant
    )
    assert role_actions(template, lifecycle) == (
        set(LIFECYCLE_TABLE_ACTIONS)
        | {"s3:ListBucket", "s3:GetObject"}
        | {"sns:Publish"}  # job transition events (test_job_events_template.py)
        | SECRETS_READ
        | XRAY_AND_LOGS
    )
    tracing = {id(monitor): None, id(lifecycle): {"Mode": "Active"}}
    for function in (monitor, lifecycle):
        props = function["Properties"]
        assert props["Architectures"] == ["arm64"]
        assert props.get("TracingConfig") == tracing[id(function)]
        env = props["Environment"]["Variables"]
        assert {names.VAST_SECRET_ARN_ENV, names.CLOUDFLARE_SECRET_ARN_ENV} <= set(env)
    assert monitor["Properties"]["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == "true"
    lifecycle_env = lifecycle["Properties"]["Environment"]["Variables"]
    assert {names.ARTIFACTS_BUCKET_ENV, names.API_URL_ENV} <= set(lifecycle_env)


def test_the_monitor_may_describe_only_the_lifecycle_executions(template):
    _, monitor = function_by_handler(template, names.MONITOR_HANDLER)
    role_id = monitor["Properties"]["Role"]["Fn::GetAtt"][0]
    (machine_id,) = resources(template, "AWS::StepFunctions::StateMachine")
    described = [
        statement["Resource"]
        for policy in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "states:DescribeExecution"
    ]
    assert len(described) == 1
    text = json.dumps(described[0])
    assert ":execution:" in text and machine_id in text and text.endswith(':*"]]}')


def test_the_monitor_may_scan_only_the_active_jobs_index(template):
    """An unsharded run reads ActiveJobs in one Scan of that index; no role may scan the table
    (every job's history) or another index."""
    _, monitor = function_by_handler(template, names.MONITOR_HANDLER)
    role_id = monitor["Properties"]["Role"]["Fn::GetAtt"][0]
    scans = [
        (policy["Properties"]["Roles"], statement["Resource"])
        for policy in resources(template, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "dynamodb:Scan" in json.dumps(statement["Action"])
    ]
    assert len(scans) == 1
    roles, resource = scans[0]
    assert roles == [{"Ref": role_id}]
    (table_id,) = resources(template, "AWS::DynamoDB::Table")
    assert resource == {"Fn::Join": ["", [{"Fn::GetAtt": [table_id, "Arn"]}, "/index/ActiveJobs"]]}


def test_state_machine_may_invoke_only_the_lifecycle_function_and_publish(template):
    lifecycle_id, _ = function_by_handler(template, names.LIFECYCLE_HANDLER)
    (machine,) = resources(template, "AWS::StepFunctions::StateMachine").values()
    role_id = machine["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    actions: set[str] = set()
    invoked: list[Any] = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            found = statement["Action"]
            found = {found} if isinstance(found, str) else set(found)
            actions |= found
            if "lambda:InvokeFunction" in found:
                invoked.extend(statement["Resource"])
    assert "lambda:InvokeFunction" in actions and "sns:Publish" in actions
    assert not {a for a in actions if a.startswith(("dynamodb:", "secretsmanager:", "s3:"))}
    assert all(lifecycle_id in json.dumps(r) for r in invoked)


def test_definition_routes_every_action_and_retries_destroys_until_gone(template):
    states = definition(template)["States"]
    route = states["RouteAction"]
    assert {c["StringEquals"] for c in route["Choices"]} == {"provision", "replace", "stop"}
    for destroy in ("DestroyAll", "DestroyPrevious"):
        retried = {e for r in states[destroy]["Retry"] for e in r["ErrorEquals"]}
        assert "InstancesStillPresent" in retried
    assert states["Provision"]["Catch"][0]["ErrorEquals"] == ["States.ALL"]
    assert states["WaitForCapacity"]["SecondsPath"] == "$.provision.wait_s"
    ops = {
        s["Parameters"]["op"]
        for s in states.values()
        if s["Type"] == "Task" and "op" in s.get("Parameters", {})
    }
    assert ops == {
        "begin",
        "destroy",
        "provision",
        "fail",
        "stop_begin",
        "finish",
        "attempt_failed",
    }
