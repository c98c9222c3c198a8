"""The JobEvents topic in the synthesized template: who may publish, how they find it, the
output users subscribe with."""

from __future__ import annotations

from typing import Any

from infra import names
from tests.infra.conftest import resources
from tests.infra.stack.test_template import function_by_handler


def job_events_topic(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (k, v)
        for k, v in resources(template, "AWS::SNS::Topic").items()
        if k.startswith(names.JOB_EVENTS_ID)
    ]
    return found


def publish_statements(template: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(policy, statement) of every IAM statement that allows sns:Publish."""
    found = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            if "sns:Publish" in ({actions} if isinstance(actions, str) else set(actions)):
                found.append((policy, statement))
    return found


def test_topic_is_encrypted_and_ssl_only(template) -> None:
    topic_id, topic = job_events_topic(template)
    assert topic["Properties"]["KmsMasterKeyId"]  # the AWS-managed aws/sns key
    (policy,) = [
        p
        for p in resources(template, "AWS::SNS::TopicPolicy").values()
        if {"Ref": topic_id} in p["Properties"]["Topics"]
    ]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in statements
    )


def test_only_the_functions_that_move_jobs_may_publish_and_know_the_topic(template) -> None:
    topic_id, _ = job_events_topic(template)
    publishers = {names.JOBS_HANDLER, names.LIFECYCLE_HANDLER}
    others = {names.HEARTBEAT_HANDLER, names.MONITOR_HANDLER, names.LOGS_HANDLER}
    roles_allowed = set()
    for policy, statement in publish_statements(template):
        if statement["Resource"] == {"Ref": topic_id}:
            assert statement["Effect"] == "Allow" and statement["Action"] == "sns:Publish"
            roles_allowed |= {r["Ref"] for r in policy["Properties"]["Roles"]}
    for handler in publishers | others:
        _, function = function_by_handler(template, handler)
        role = function["Properties"]["Role"]["Fn::GetAtt"][0]
        env = function["Properties"]["Environment"]["Variables"]
        if handler in publishers:
            assert role in roles_allowed, handler
            assert env[names.JOB_EVENTS_TOPIC_ARN_ENV] == {"Ref": topic_id}, handler
        else:
            assert role not in roles_allowed, handler
            assert names.JOB_EVENTS_TOPIC_ARN_ENV not in env, handler


def test_the_topic_arn_is_a_stack_output(template) -> None:
    topic_id, _ = job_events_topic(template)
    output = template["Outputs"][names.OUTPUT_JOB_EVENTS_TOPIC_ARN]
    assert output["Value"] == {"Ref": topic_id}
