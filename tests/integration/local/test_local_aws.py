"""LocalAws: a synthesized template deployed on moto in process, executed end to end."""

from __future__ import annotations

import concurrent.futures
import json
import os
import time
from typing import Any

import boto3
import pytest

from tests.integration.local import sample_stack as stack
from tether_local.aws import lambda_runtime
from tether_local.aws.deployed import Throttle
from tether_local.aws.deployer import rate_seconds
from tether_local.aws.local_aws import Deployed, LambdaInvocationError, LocalAws
from tether_local.aws.moto_patches import MotoInternalsMoved, check_moto_internals
from tether_local.aws.template import (
    Resolver,
    StackContext,
    TemplateError,
    check_parameters,
    creation_order,
)

# --- the canary -----------------------------------------------------------------------------


def test_moto_internals_the_harness_patches_are_in_place() -> None:
    check_moto_internals()  # raises MotoInternalsMoved naming each moved symbol


def test_canary_names_the_moved_symbol(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import (
        WaitFunction,
    )

    monkeypatch.delattr(WaitFunction, "_wait_interval")
    with pytest.raises(MotoInternalsMoved, match=r"WaitFunction\._wait_interval is gone"):
        check_moto_internals()


# --- deploying ------------------------------------------------------------------------------


def test_deploy_creates_every_supported_resource(local_aws: LocalAws, sample: Deployed) -> None:
    table_name = sample.table_name(stack.TABLE_ID)
    table = local_aws.client("dynamodb").describe_table(TableName=table_name)["Table"]
    assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"]] == [stack.GSI_NAME]
    ttl = local_aws.client("dynamodb").describe_time_to_live(TableName=table_name)
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"

    config = local_aws.client("lambda").get_function_configuration(
        FunctionName=sample.function_name(stack.RESERVE_FN_ID)
    )
    assert config["Handler"] == f"{stack.HANDLERS}.reserve"
    assert config["Environment"]["Variables"] == {"TABLE_NAME": table_name, "COLOR": "red"}
    assert config["FunctionArn"] == sample.function_arn(stack.RESERVE_FN_ID)

    machine = local_aws.client("stepfunctions").describe_state_machine(
        stateMachineArn=sample.state_machine_arn(stack.STATE_MACHINE_ID)
    )
    states = json.loads(machine["definition"])["States"]
    assert states["Reserve"]["Resource"] == sample.function_arn(stack.RESERVE_FN_ID)
    assert states["Claim"]["Parameters"]["TableName"] == table_name

    topics = local_aws.client("sns").list_topics()["Topics"]
    assert {"TopicArn": sample.topic_arn(stack.TOPIC_ID)} in topics
    secret = local_aws.client("secretsmanager").get_secret_value(
        SecretId=sample.secret_arn(stack.SECRET_ID)
    )
    assert len(secret["SecretString"]) >= 16
    assert not sample.resource(stack.QUEUE_ID).created  # SQS: recorded, not created


def test_outputs_are_resolved(sample: Deployed) -> None:
    machine_arn = sample.state_machine_arn(stack.STATE_MACHINE_ID)
    assert sample.outputs["TableName"] == sample.table_name(stack.TABLE_ID)
    assert sample.outputs["StateMachineArn"] == machine_arn
    assert sample.outputs["ReserveFunctionArn"] == sample.function_arn(stack.RESERVE_FN_ID)
    assert sample.outputs["DashboardUrl"] == (
        "https://console.amazonaws.com/states/home?region=us-east-1#/"
        + machine_arn.rsplit(":", 1)[1]
    )


def test_schedules_are_recorded_and_fire(local_aws: LocalAws, sample: Deployed) -> None:
    [schedule] = sample.schedules
    assert schedule.logical_id == stack.SCHEDULE_ID
    assert schedule.interval_s == 60.0
    assert schedule.target_arn == sample.state_machine_arn(stack.STATE_MACHINE_ID)

    execution = local_aws.wait_execution(local_aws.fire_schedule(schedule))
    assert execution["status"] == "SUCCEEDED"
    assert execution["output_json"]["classified"]["kind"] == "cpu"  # the schedule's input


def test_unknown_lookup_names_what_exists(sample: Deployed) -> None:
    with pytest.raises(KeyError, match="NoSuchTable"):
        sample.table_name("NoSuchTable")


# --- executions -----------------------------------------------------------------------------


def run(aws: LocalAws, deployed: Deployed, **order: Any) -> dict[str, Any]:
    arn = aws.start_execution(
        deployed.state_machine_arn(stack.STATE_MACHINE_ID), {"wait_s": 1, **order}
    )
    return aws.wait_execution(arn)


def item(aws: LocalAws, deployed: Deployed, order_id: str, sk: str) -> dict[str, Any] | None:
    table = boto3.resource("dynamodb").Table(deployed.table_name(stack.TABLE_ID))
    found: dict[str, Any] | None = table.get_item(Key={"pk": f"order#{order_id}", "sk": sk}).get(
        "Item"
    )
    return found


def errors_in(aws: LocalAws, execution: dict[str, Any]) -> list[str]:
    return [
        event["lambdaFunctionFailedEventDetails"]["error"]
        for event in aws.execution_history(execution["executionArn"])
        if event["type"] == "LambdaFunctionFailed"
    ]


def test_happy_path_runs_lambdas_waits_writes_and_publishes(
    local_aws: LocalAws, sample: Deployed
) -> None:
    # An hour-long Wait: the execution only finishes in time because waits are scaled.
    execution = run(local_aws, sample, order_id="o1", wait_s=3600)

    assert execution["status"] == "SUCCEEDED"
    output = execution["output_json"]
    assert output["reserved"] == {"kind": "gpu", "attempts": 1}
    assert output["classified"] == {"kind": "gpu", "color": "blue"}  # the Classify function's env
    assert output["notified"]["MessageId"]
    assert item(local_aws, sample, "o1", "claim") == {
        "pk": "order#o1",
        "sk": "claim",
        "status": "claimed",
        "color": "blue",
    }
    by_status = (
        boto3.resource("dynamodb")
        .Table(sample.table_name(stack.TABLE_ID))
        .query(
            IndexName=stack.GSI_NAME,
            KeyConditionExpression="#s = :s",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":s": "claimed"},
        )
    )
    assert [i["pk"] for i in by_status["Items"]] == ["order#o1"]


def test_retry_on_a_custom_error_then_success(local_aws: LocalAws, sample: Deployed) -> None:
    execution = run(local_aws, sample, order_id="o2", fail_times=2)

    assert execution["status"] == "SUCCEEDED"
    assert execution["output_json"]["reserved"]["attempts"] == 3
    assert errors_in(local_aws, execution) == ["FlakyError", "FlakyError"]


def test_retries_exhausted_fail_the_execution(local_aws: LocalAws, sample: Deployed) -> None:
    execution = run(local_aws, sample, order_id="o3", fail_times=99)

    assert execution["status"] == "FAILED"
    assert execution["error"] == "FlakyError"
    # MaxAttempts 3 means three retries after the first attempt.
    assert item(local_aws, sample, "o3", "attempts")["attempts"] == 4  # type: ignore[index]
    assert item(local_aws, sample, "o3", "claim") is None


def test_catch_on_a_custom_error_takes_the_catch_path(
    local_aws: LocalAws, sample: Deployed
) -> None:
    execution = run(local_aws, sample, order_id="o4", gone=True)

    assert execution["status"] == "SUCCEEDED"
    assert execution["output_json"]["error"]["Error"] == "OfferGone"
    assert errors_in(local_aws, execution) == ["OfferGone"]  # caught, never retried
    assert item(local_aws, sample, "o4", "claim") == {
        "pk": "order#o4",
        "sk": "claim",
        "status": "gone",
    }


def test_failed_dynamodb_condition_is_caught(local_aws: LocalAws, sample: Deployed) -> None:
    assert run(local_aws, sample, order_id="o5")["status"] == "SUCCEEDED"

    again = run(local_aws, sample, order_id="o5")

    assert again["status"] == "FAILED"
    assert again["error"] == "AlreadyClaimed"


def test_choice_default_branch(local_aws: LocalAws, sample: Deployed) -> None:
    execution = run(local_aws, sample, order_id="o6", kind="cpu")

    assert execution["status"] == "SUCCEEDED"
    assert "notified" not in execution["output_json"]
    assert item(local_aws, sample, "o6", "claim") is None


# --- Lambda in process ----------------------------------------------------------------------


def test_each_function_sees_only_its_own_environment(local_aws: LocalAws, sample: Deployed) -> None:
    before = dict(os.environ)
    reserve_name = sample.function_name(stack.RESERVE_FN_ID)
    classify_name = sample.function_name(stack.CLASSIFY_FN_ID)

    seen = local_aws.invoke(classify_name, {"kind": "gpu"})

    assert seen["color"] == "blue"
    assert seen["table_name"] == sample.table_name(stack.TABLE_ID)
    assert seen["function_name"] == seen["env_function_name"] == classify_name
    assert seen["remaining_ms_positive"] is True
    assert seen["event"] == {"kind": "gpu"}
    assert local_aws.invoke(reserve_name, {"order_id": "o7"})["attempts"] == 1
    assert dict(os.environ) == before  # nothing of either function leaked into the process


def test_handler_exception_class_name_is_the_error(local_aws: LocalAws, sample: Deployed) -> None:
    with pytest.raises(LambdaInvocationError) as raised:
        local_aws.invoke(sample.function_name(stack.RESERVE_FN_ID), {"order_id": "o8", "gone": 1})
    assert raised.value.error_type == "OfferGone"
    assert "o8" in raised.value.message


def test_a_handler_wrapper_sees_each_invocation_until_undone(
    local_aws: LocalAws, sample: Deployed
) -> None:
    classify = sample.function_name(stack.CLASSIFY_FN_ID)
    seen: list[tuple[str, Any]] = []

    def wrap(handler: lambda_runtime.Handler) -> lambda_runtime.Handler:
        def recorded(event: Any, context: Any) -> Any:
            seen.append((context.function_name, event))
            return handler(event, context)

        return recorded

    undo = lambda_runtime.wrap_handlers(wrap)
    try:
        assert local_aws.invoke(classify, {"kind": "gpu"})["color"] == "blue"
    finally:
        undo()
    local_aws.invoke(classify, {"kind": "cpu"})

    assert seen == [(classify, {"kind": "gpu"})]


# --- lifecycle of the harness ---------------------------------------------------------------


def test_close_stops_executions_and_restores_everything(sample_template: dict[str, Any]) -> None:
    from moto.awslambda.models import LambdaFunction
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import (
        WaitFunction,
    )

    originals = (LambdaFunction._invoke_lambda, WaitFunction._wait_interval)
    env_before = dict(os.environ)

    with LocalAws(time_scale=1.0) as aws:  # real time: the Wait below lasts an hour
        deployed = aws.deploy(sample_template, stack_name="Sample")
        assert LambdaFunction._invoke_lambda is not originals[0]
        machine = deployed.state_machine_arn(stack.STATE_MACHINE_ID)
        waiting = aws.start_execution(machine, {"order_id": "w1", "wait_s": 3600})
        left_running = aws.start_execution(machine, {"order_id": "w2", "wait_s": 3600})
        for arn in (waiting, left_running):
            while "WaitStateEntered" not in [e["type"] for e in aws.execution_history(arn)]:
                time.sleep(0.02)

        assert sorted(aws.stop_running_executions()) == sorted([waiting, left_running])
        assert aws.wait_execution(waiting)["status"] == "ABORTED"
        aws.start_execution(machine, {"order_id": "w3", "wait_s": 3600})
    # Leaving the block with an execution in an hour-long Wait returned: it was stopped.

    assert (LambdaFunction._invoke_lambda, WaitFunction._wait_interval) == originals
    assert retrier_decl.time is time  # type: ignore[attr-defined]
    assert dict(os.environ) == env_before


def test_only_one_local_aws_per_process(local_aws: LocalAws) -> None:
    with pytest.raises(RuntimeError, match="already open"):
        LocalAws().start()
    assert local_aws.client("sts").get_caller_identity()["Account"] == "123456789012"


# --- any template, not only CDK's -----------------------------------------------------------

PUT_ITEM = "arn:${AWS::Partition}:states:::dynamodb:putItem"
HAND_WRITTEN: dict[str, Any] = {
    "Parameters": {"Stage": {"Type": "String", "Default": "dev"}},
    "Conditions": {"IsProd": {"Fn::Equals": [{"Ref": "Stage"}, "prod"]}},
    "Resources": {
        "Machine": {
            "Type": "AWS::StepFunctions::StateMachine",
            "Properties": {
                "RoleArn": {"Fn::GetAtt": ["Role", "Arn"]},
                "DefinitionString": {
                    "Fn::Sub": [
                        json.dumps(
                            {
                                "StartAt": "Put",
                                "States": {
                                    "Put": {
                                        "Type": "Task",
                                        "Resource": PUT_ITEM,
                                        "Parameters": {
                                            "TableName": "${!table}",  # Fn::Sub leaves ${table}
                                            "Item": {
                                                "pk": {"S.$": "$.id"},
                                                "stage": {"S": "${Stage}"},
                                                "region": {"S": "${Region}"},
                                            },
                                        },
                                        "End": True,
                                    }
                                },
                            }
                        ),
                        {"Region": {"Ref": "AWS::Region"}},
                    ]
                },
                "DefinitionSubstitutions": {"table": {"Ref": "Table"}},
            },
        },
        "Table": {
            "Type": "AWS::DynamoDB::Table",
            "Properties": {
                "TableName": {"Fn::Join": ["-", [{"Ref": "AWS::StackName"}, "items"]]},
                "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
                "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
                "ProvisionedThroughput": {"ReadCapacityUnits": 1, "WriteCapacityUnits": 1},
            },
        },
        "Role": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {}}},
        "ProdOnly": {
            "Type": "AWS::SNS::Topic",
            "Condition": "IsProd",
            "Properties": {"TopicName": "prod-only"},
        },
        "Custom": {"Type": "Custom::Whatever", "Properties": {"ServiceToken": "x"}},
    },
    "Outputs": {"Role": {"Value": {"Fn::GetAtt": ["Role", "Arn"]}}},
}


def test_hand_written_template_with_substitutions(local_aws: LocalAws) -> None:
    deployed = local_aws.deploy(HAND_WRITTEN, parameters={"Stage": "test"}, stack_name="hand")

    assert deployed.table_name("Table") == "hand-items"
    assert "ProdOnly" not in deployed.resources  # its condition is false
    assert not deployed.resources["Custom"].created
    assert deployed.outputs["Role"] == "arn:aws:iam::123456789012:role/hand-Role"
    execution = local_aws.wait_execution(
        local_aws.start_execution(deployed.state_machine_arn("Machine"), {"id": "x1"})
    )
    assert execution["status"] == "SUCCEEDED"
    stored = local_aws.client("dynamodb").get_item(TableName="hand-items", Key={"pk": {"S": "x1"}})[
        "Item"
    ]
    assert stored == {"pk": {"S": "x1"}, "stage": {"S": "test"}, "region": {"S": "us-east-1"}}


# --- the resolver, pure ---------------------------------------------------------------------


def resolver(**template: Any) -> Resolver:
    return Resolver(
        template,
        StackContext(stack_name="s"),
        parameters={"Names": "a, b,c"},
        refs={"Bucket": "my-bucket"},
        attributes={"Bucket": {"Arn": "arn:aws:s3:::my-bucket", "DomainName": "d"}},
    )


def test_resolver_intrinsics() -> None:
    r = resolver(
        Parameters={"Names": {"Type": "CommaDelimitedList"}, "Size": {"Type": "Number"}},
        Conditions={"Big": {"Fn::Not": [{"Fn::Equals": ["1", "2"]}]}},
        Mappings={"Sizes": {"us-east-1": {"gpu": "A100"}}},
    )
    assert r.resolve({"Fn::Sub": "${AWS::Region}/${Bucket}/${Bucket.Arn}/${!Literal}"}) == (
        "us-east-1/my-bucket/arn:aws:s3:::my-bucket/${Literal}"
    )
    assert r.resolve({"Fn::Sub": ["${a}-${AWS::AccountId}", {"a": {"Ref": "Bucket"}}]}) == (
        "my-bucket-123456789012"
    )
    assert r.resolve({"Fn::Select": [1, {"Ref": "Names"}]}) == "b"
    assert r.resolve({"Fn::Select": [2, {"Fn::Split": [":", "x:y:z"]}]}) == "z"
    assert r.resolve({"Fn::GetAtt": "Bucket.DomainName"}) == "d"
    assert r.resolve({"Fn::If": ["Big", "yes", "no"]}) == "yes"
    assert r.resolve({"Fn::FindInMap": ["Sizes", {"Ref": "AWS::Region"}, "gpu"]}) == "A100"
    assert r.resolve({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":x"]]}) == "arn:aws:x"
    assert r.resolve({"K": {"Fn::If": ["Big", {"Ref": "AWS::NoValue"}, 1]}, "L": 2}) == {"L": 2}
    assert r.resolve({"Ref": "AWS::URLSuffix"}) == "amazonaws.com"
    assert r.resolve({"Ref": "AWS::StackName"}) == "s"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"Fn::ImportValue": "x"}, r"Fn::ImportValue is not supported"),
        ({"Ref": "Nowhere"}, r"unknown name 'Nowhere'"),
        ({"Fn::GetAtt": ["Bucket", "Size"]}, r"Bucket has no attribute 'Size'"),
        ({"Ref": "Size"}, r"Parameters.Size: no value given and no Default"),
    ],
)
def test_resolver_errors_name_the_spot(value: Any, message: str) -> None:
    r = resolver(Parameters={"Size": {"Type": "Number"}})
    with pytest.raises(TemplateError, match=message):
        r.resolve({"Prop": value}, "Resources.X.Properties")


PARAMETERS = {
    "Rate": {"Type": "Number", "Default": 50, "MinValue": 1, "MaxValue": 10000},
    "Stage": {"Type": "String", "AllowedValues": ["dev", "prod"]},
    "Label": {"Type": "String"},
}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"Rate": "5", "Nope": "1", "Also": "2"}, r"^Parameters: \[Also, Nope\] do not exist"),
        ({"Rate": "fast"}, r"^Parameter 'Rate' must be a number, got 'fast'"),
        ({"Rate": "0"}, r"^Parameter 'Rate' must be a number not less than 1$"),
        ({"Rate": 10001}, r"^Parameter 'Rate' must be a number not greater than 10000$"),
        ({"Stage": "test"}, r"^Parameter 'Stage' must be one of AllowedValues$"),
    ],
)
def test_parameters_cloudformation_refuses_are_refused(given: dict[str, Any], message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        check_parameters({"Parameters": PARAMETERS}, given)


def test_parameters_within_the_template_pass() -> None:
    check_parameters({"Parameters": PARAMETERS}, {"Rate": "1", "Stage": "prod", "Label": "x"})
    check_parameters({"Parameters": PARAMETERS}, {"Rate": 10000.0})
    check_parameters({}, {})


def test_a_refused_parameter_deploys_nothing(
    local_aws: LocalAws, tether_template: dict[str, Any]
) -> None:
    """The stack's own bounds (`HeartbeatRateLimit` at least 1) hold locally as at `cdk deploy`:
    refused before any resource exists."""
    with pytest.raises(TemplateError, match="'HeartbeatRateLimit' must be a number not less"):
        local_aws.deploy(tether_template, parameters={"HeartbeatRateLimit": "0"})
    assert local_aws.client("dynamodb").list_tables()["TableNames"] == []


def test_creation_order_follows_references_and_rejects_cycles() -> None:
    template: dict[str, Any] = {
        "Resources": {
            "C": {"Type": "T", "Properties": {"P": {"Fn::Sub": "${B.Arn}"}}},
            "B": {"Type": "T", "DependsOn": "A"},
            "A": {"Type": "T"},
        }
    }
    assert creation_order(template) == ["A", "B", "C"]
    template["Resources"]["A"]["Properties"] = {"P": {"Ref": "C"}}
    with pytest.raises(TemplateError, match="cycle"):
        creation_order(template)


def test_rate_expressions() -> None:
    assert rate_seconds("rate(1 minute)") == 60.0
    assert rate_seconds("rate(2 hours)") == 7200.0
    assert rate_seconds("cron(0 12 * * ? *)") is None


def test_harness_module_exports_the_lock_timeout() -> None:
    assert lambda_runtime.INVOCATION_LOCK_TIMEOUT_S > 0


# --- the real stack -------------------------------------------------------------------------


def test_real_tether_stack_deploys_unchanged(
    local_aws: LocalAws, tether_template: dict[str, Any]
) -> None:
    deployed = local_aws.deploy(tether_template)

    created = {r.type for r in deployed.resources.values() if r.created}
    assert {"AWS::DynamoDB::Table", "AWS::StepFunctions::StateMachine"} <= created
    assert deployed.outputs, "the stack's outputs resolve"
    lambda_client = local_aws.client("lambda")
    ours = [
        lambda_client.get_function_configuration(FunctionName=r.physical_id)
        for r in deployed.resources.values()
        if r.type == "AWS::Lambda::Function"
    ]
    handlers = [f["Handler"] for f in ours if f["Handler"].startswith("functions.")]
    assert handlers, "the stack's own functions run handlers from functions/"
    for handler in handlers:  # every Handler string names something importable here
        assert callable(lambda_runtime.load_handler(handler)), handler
    routed = {route.function_arn for route in deployed.http_routes}
    assert routed <= {f["FunctionArn"] for f in ours}


def test_the_front_gets_each_routes_throttle_from_the_template(
    local_aws: LocalAws, tether_template: dict[str, Any]
) -> None:
    """The stage's route settings, resolved with the stack's parameters: a raised heartbeat
    bucket here, the user routes' default (10/s, 20) and `$default` on the stage default."""
    deployed = local_aws.deploy(
        tether_template, parameters={"HeartbeatRateLimit": "70", "HeartbeatBurstLimit": "140"}
    )
    throttles = {r.route_key: r.throttle for r in deployed.http_routes}
    assert throttles["POST /agent/heartbeat"] == Throttle(rate_per_s=70.0, burst=140)
    for key in ("POST /jobs", "GET /jobs", "GET /jobs/{id}", "POST /jobs/{id}/cancel",
                "GET /jobs/{id}/logs", "GET /jobs/{id}/files", "$default"):  # fmt: skip
        assert throttles[key] == Throttle(rate_per_s=10.0, burst=20), key


def test_concurrent_dynamodb_writes_are_served_as_dynamodb_serves_them(local_aws: LocalAws) -> None:
    """Transactions and plain writes from many threads at once (the heartbeat route under a
    flood): each answered as DynamoDB would, none a 500. moto alone deep-copies a table for a
    transaction's rollback while other threads write to it, and fails with "dictionary changed
    size during iteration"."""
    dynamo = local_aws.client("dynamodb")
    name = "concurrency"
    dynamo.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )

    def transact(n: int) -> None:
        dynamo.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": name, "Item": {"pk": {"S": f"t{n}-{i}"}}}} for i in range(4)
            ]
        )

    def put(n: int) -> None:
        dynamo.put_item(TableName=name, Item={"pk": {"S": f"p{n}"}, "v": {"S": "x" * 100}})

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(transact if n % 2 else put, n) for n in range(600)]
        errors = [repr(f.exception()) for f in futures if f.exception() is not None]
    assert errors == []
    count = dynamo.scan(TableName=name, Select="COUNT")["Count"]
    assert count == 300 * 4 + 300  # no write lost to another transaction's rollback copy
