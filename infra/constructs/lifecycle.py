"""The lifecycle state machine (Step Functions Standard), input contract:

    {"action": "provision" | "replace" | "stop", "job_id": str, "generation": int, "reason": str}

started with the deterministic execution name `<job_id>-<action>-g<generation>`
(`<job_id>-stop`). This body is a placeholder that accepts the contract and routes on the
action; the lifecycle issue replaces it with the real transitions.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.constructs.nag import acknowledge


class Lifecycle(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        unknown = sfn.Fail(
            self,
            "UnknownAction",
            error="UnknownAction",
            cause="action must be provision, replace or stop",
        )
        route = (
            sfn.Choice(self, "RouteAction")
            .when(sfn.Condition.string_equals("$.action", "provision"), sfn.Pass(self, "Provision"))
            .when(sfn.Condition.string_equals("$.action", "replace"), sfn.Pass(self, "Replace"))
            .when(sfn.Condition.string_equals("$.action", "stop"), sfn.Pass(self, "Stop"))
            .otherwise(unknown)
        )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(route),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=Duration.hours(2),
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL),
        )
        acknowledge(
            self.state_machine.role,
            "AwsSolutions-IAM5",
            "X-Ray tracing and CloudWatch Logs delivery (logs:CreateLogDelivery and friends) "
            "support no resource-level permissions.",
            "Resource::*",
        )
