"""A tiny CDK stack that exercises every resource kind the local AWS harness handles.

Used only by tests/integration/local/test_local_aws.py. The state machine:

    Reserve (Lambda, Retry FlakyError ×3, Catch OfferGone → RecordGone)
      → Pause (Wait $.wait_s seconds)
      → Classify (Lambda) → IsGpu (Choice)
          ├ kind == "gpu" → Claim (DynamoDB putItem, attribute_not_exists; Catch the failed
          │                  condition → AlreadyClaimed, a Fail state) → Notify (SNS) → Done
          └ otherwise → Skipped (Succeed)
    RecordGone (DynamoDB putItem) → Gone (Succeed)

and `SlowFlow`, for Lambda's timeout: Slow (Lambda, Timeout 1 s; Retry Sandbox.Timedout ×1,
then Catch it → TimedOut, a Pass) → Finished (Succeed). `CountFunction` is invoked directly.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

# Logical ids the tests look up (constants, so a rename fails loudly here and not in a test).
TABLE_ID = "Orders"
RESERVE_FN_ID = "ReserveFunction"
CLASSIFY_FN_ID = "ClassifyFunction"
STATE_MACHINE_ID = "OrderFlow"
SLOW_FN_ID = "SlowFunction"
COUNT_FN_ID = "CountFunction"
SLOW_MACHINE_ID = "SlowFlow"
SLOW_TIMEOUT_S = 1
TOPIC_ID = "Notifications"
SCHEDULE_ID = "EveryMinute"
SECRET_ID = "ApiKey"
QUEUE_ID = "Unsupported"  # SQS is not a kind the harness creates: it must be skipped
GSI_NAME = "by-status"
HANDLERS = "tests.integration.local.sample_handlers"


class SampleStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, asset_dir: Path) -> None:
        super().__init__(scope, construct_id)

        table = dynamodb.Table(
            self,
            TABLE_ID,
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute="expires_at",
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        table.add_global_secondary_index(
            index_name=GSI_NAME,
            partition_key=dynamodb.Attribute(name="status", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
        )
        code = lambda_.Code.from_asset(str(asset_dir))

        def function(
            logical_id: str, handler: str, color: str, timeout_s: int = 30
        ) -> lambda_.Function:
            fn = lambda_.Function(
                self,
                logical_id,
                runtime=lambda_.Runtime.PYTHON_3_12,
                architecture=lambda_.Architecture.ARM_64,
                handler=f"{HANDLERS}.{handler}",
                code=code,
                timeout=cdk.Duration.seconds(timeout_s),
                environment={"TABLE_NAME": table.table_name, "COLOR": color},
            )
            table.grant_read_write_data(fn)
            return fn

        reserve_fn = function(RESERVE_FN_ID, "reserve", "red")
        classify_fn = function(CLASSIFY_FN_ID, "describe", "blue")
        slow_fn = function(SLOW_FN_ID, "slow", "grey", timeout_s=SLOW_TIMEOUT_S)
        function(COUNT_FN_ID, "count", "green")
        topic = sns.Topic(self, TOPIC_ID)
        secretsmanager.Secret(self, SECRET_ID)
        sqs.Queue(self, QUEUE_ID)

        gone = tasks.DynamoPutItem(
            self,
            "RecordGone",
            table=table,
            item={
                "pk": tasks.DynamoAttributeValue.from_string(
                    sfn.JsonPath.format("order#{}", sfn.JsonPath.string_at("$.order_id"))
                ),
                "sk": tasks.DynamoAttributeValue.from_string("claim"),
                "status": tasks.DynamoAttributeValue.from_string("gone"),
            },
            result_path=sfn.JsonPath.DISCARD,
        ).next(sfn.Succeed(self, "Gone"))

        reserve = tasks.LambdaInvoke(
            self,
            "Reserve",
            lambda_function=reserve_fn,
            payload_response_only=True,
            retry_on_service_exceptions=False,
            result_path="$.reserved",
        )
        reserve.add_retry(
            errors=["FlakyError"],
            interval=cdk.Duration.seconds(20),
            max_attempts=3,
            backoff_rate=2,
        )
        reserve.add_catch(gone, errors=["OfferGone"], result_path="$.error")

        classify = tasks.LambdaInvoke(
            self,
            "Classify",
            lambda_function=classify_fn,
            payload=sfn.TaskInput.from_object({"kind.$": "$.reserved.kind"}),
            result_selector={"kind.$": "$.Payload.event.kind", "color.$": "$.Payload.color"},
            result_path="$.classified",
        )
        claim = tasks.DynamoPutItem(
            self,
            "Claim",
            table=table,
            item={
                "pk": tasks.DynamoAttributeValue.from_string(
                    sfn.JsonPath.format("order#{}", sfn.JsonPath.string_at("$.order_id"))
                ),
                "sk": tasks.DynamoAttributeValue.from_string("claim"),
                "status": tasks.DynamoAttributeValue.from_string("claimed"),
                "color": tasks.DynamoAttributeValue.from_string(
                    sfn.JsonPath.string_at("$.classified.color")
                ),
            },
            condition_expression="attribute_not_exists(pk)",
            result_path=sfn.JsonPath.DISCARD,
        )
        claim.add_catch(
            sfn.Fail(self, "AlreadyClaimed", error="AlreadyClaimed", cause="claimed before"),
            errors=["DynamoDB.ConditionalCheckFailedException"],
        )
        notify = tasks.SnsPublish(
            self,
            "Notify",
            topic=topic,
            message=sfn.TaskInput.from_json_path_at("$.order_id"),
            result_path="$.notified",
        )
        definition = (
            reserve.next(sfn.Wait(self, "Pause", time=sfn.WaitTime.seconds_path("$.wait_s")))
            .next(classify)
            .next(
                sfn.Choice(self, "IsGpu")
                .when(
                    sfn.Condition.string_equals("$.classified.kind", "gpu"),
                    claim.next(notify).next(sfn.Succeed(self, "Done")),
                )
                .otherwise(sfn.Succeed(self, "Skipped"))
            )
        )
        machine = sfn.StateMachine(
            self,
            STATE_MACHINE_ID,
            definition_body=sfn.DefinitionBody.from_chainable(definition),
        )

        slow = tasks.LambdaInvoke(
            self,
            "Slow",
            lambda_function=slow_fn,
            payload_response_only=True,
            retry_on_service_exceptions=False,
            result_path="$.slow",
        )
        slow.add_retry(
            errors=["Sandbox.Timedout"], interval=cdk.Duration.seconds(1), max_attempts=1
        )
        slow.add_catch(
            sfn.Pass(self, "TimedOut").next(sfn.Succeed(self, "GaveUp")),
            errors=["Sandbox.Timedout"],
            result_path="$.error",
        )
        sfn.StateMachine(
            self,
            SLOW_MACHINE_ID,
            definition_body=sfn.DefinitionBody.from_chainable(
                slow.next(sfn.Succeed(self, "Finished"))
            ),
        )

        scheduler_role = cdk.aws_iam.Role(
            self,
            "SchedulerRole",
            assumed_by=cdk.aws_iam.ServicePrincipal("scheduler.amazonaws.com"),
        )
        machine.grant_start_execution(scheduler_role)
        scheduler.CfnSchedule(
            self,
            SCHEDULE_ID,
            schedule_expression="rate(1 minute)",
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            target=scheduler.CfnSchedule.TargetProperty(
                arn=machine.state_machine_arn,
                role_arn=scheduler_role.role_arn,
                input='{"order_id": "scheduled", "wait_s": 1, "kind": "cpu"}',
            ),
        )

        cdk.CfnOutput(self, "TableName", value=table.table_name)
        cdk.CfnOutput(self, "StateMachineArn", value=machine.state_machine_arn)
        cdk.CfnOutput(self, "ReserveFunctionArn", value=reserve_fn.function_arn)
        cdk.CfnOutput(self, "TopicName", value=topic.topic_name)
        cdk.CfnOutput(
            self,
            "DashboardUrl",
            value=cdk.Fn.sub(
                "https://console.${AWS::URLSuffix}/states/home?region=${AWS::Region}#/${Name}",
                {"Name": machine.state_machine_name},
            ),
        )


def synthesize(asset_dir: Path, outdir: Path) -> dict[str, object]:
    """The sample stack's template, synthesized with Node via jsii (no Docker, no CDK CLI)."""
    app = cdk.App(outdir=str(outdir))
    stack = SampleStack(app, "Sample", asset_dir=asset_dir)
    template: dict[str, object] = app.synth().get_stack_by_name(stack.stack_name).template
    return template
