"""The monitor: a function that EventBridge Scheduler runs every minute, once per shard.

`shards` > 1 (CDK context `monitorShards`) splits the fleet by job hash across that many
schedules of the same function, each sending `{"shard": k}` (`functions/domain/shards.py`):
each run is bounded by its shard's jobs and instances, and a failing shard renews no lease of
another's.

It reads and writes the table (spend, observations and each job's `supervised_at`, host
reputation, first sightings, events), reads the provider secrets, starts lifecycle executions
and reads how they ended; nothing else. Scheduler does not retry a failed run (the next minute's
run is the retry) and drops an invocation older than a minute. Its timeout (one interval less
5 s) is what the run budgets its Vast calls against (`functions/monitor/service.py`).
"""

from __future__ import annotations

import json

from aws_cdk import CfnResource, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct, IConstruct

from functions.adapters.table import ACTIVE_INDEX
from infra import names
from infra.constructs.function import TetherFunction
from infra.constructs.nag import acknowledge
from infra.constructs.secrets import ProviderKey

MONITOR_TABLE_ACTIONS = (
    "dynamodb:BatchGetItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
)
MONITOR_INDEX_SCAN_ACTIONS = ("dynamodb:Scan",)  # on the ActiveJobs index only


class Monitor(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        table: dynamodb.ITable,
        state_machine: sfn.IStateMachine,
        vast_secret: ProviderKey,
        cloudflare_secret: ProviderKey,
        shards: int = 1,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.shards = shards
        self.function = TetherFunction(
            self,
            names.MONITOR_FUNCTION_ID,
            code=code,
            handler=names.MONITOR_HANDLER,
            description="tether monitor: health, spend, transitions, credentials, orphans",
            environment={
                names.TABLE_NAME_ENV: table.table_name,
                names.STATE_MACHINE_ARN_ENV: state_machine.state_machine_arn,
                names.VAST_SECRET_ARN_ENV: vast_secret.parameter_arn,
                names.CLOUDFLARE_SECRET_ARN_ENV: cloudflare_secret.parameter_arn,
                names.MONITOR_INTERVAL_ENV: str(names.MONITOR_INTERVAL_S),
                names.MONITOR_SHARDS_ENV: str(shards),
            },
            memory_mb=512,
            # Under the interval, so runs rarely overlap (and overlapping ones are harmless).
            timeout=Duration.seconds(names.MONITOR_INTERVAL_S - 5),
            reserved_concurrency=reserved_concurrency,
        )
        role = self.function.role
        role.add_to_policy(
            iam.PolicyStatement(
                actions=list(MONITOR_TABLE_ACTIONS),
                resources=[table.table_arn, f"{table.table_arn}/index/*"],
            )
        )
        # An unsharded run reads every slot's partition of ActiveJobs in one Scan of that
        # index (JobRecords.read_active_jobs); never a Scan of the table.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=list(MONITOR_INDEX_SCAN_ACTIONS),
                resources=[f"{table.table_arn}/index/{ACTIVE_INDEX}"],
            )
        )
        state_machine.grant_start_execution(role)
        # How an attempt's execution ended (functions/monitor/repair.py): the next one is
        # started only once it closed unfinished.
        state_machine.grant_execution(role, "states:DescribeExecution")
        vast_secret.grant_read(role)
        cloudflare_secret.grant_read(role)
        machine = _logical_id(state_machine)
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "DescribeExecution on the lifecycle's executions, whose names are per job and "
            "attempt: how an attempt ended decides whether the monitor starts the next.",
            "Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:"
            f'{{"Fn::Select":[6,{{"Fn::Split":[":",{{"Ref":"{machine}"}}]}}]}}:*',
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "Query on the table's ActiveJobs index: the monitor's list of live jobs.",
            f"Resource::<{_logical_id(table)}.Arn>/index/*",
        )

        self.scheduler_role = iam.Role(
            self,
            "SchedulerRole",
            assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com"),
            description="tether monitor schedule: invoke the monitor function",
        )
        self.scheduler_role.add_to_policy(
            iam.PolicyStatement(
                actions=["lambda:InvokeFunction"],
                resources=[self.function.function.function_arn],
            )
        )
        self.schedules = [self._schedule(k) for k in range(shards)]
        self.schedule = self.schedules[0]

    def _schedule(self, shard: int) -> scheduler.CfnSchedule:
        whole = self.shards == 1
        return scheduler.CfnSchedule(
            self,
            names.MONITOR_SCHEDULE_ID if shard == 0 else f"{names.MONITOR_SCHEDULE_ID}{shard}",
            description="Run the tether monitor"
            + ("" if whole else f" (shard {shard} of {self.shards})"),
            schedule_expression=names.MONITOR_SCHEDULE_EXPRESSION,
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            state="ENABLED",
            target=scheduler.CfnSchedule.TargetProperty(
                arn=self.function.function.function_arn,
                role_arn=self.scheduler_role.role_arn,
                input="{}" if whole else json.dumps({"shard": shard}),
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_retry_attempts=0,
                    maximum_event_age_in_seconds=names.MONITOR_INTERVAL_S,
                ),
            ),
        )


def _logical_id(construct: IConstruct) -> str:
    """The CloudFormation logical id of an L2 resource (cdk-nag names findings by it)."""

    stack = Stack.of(construct)
    child = construct.node.default_child
    assert isinstance(child, CfnResource)
    return str(stack.resolve(stack.get_logical_id(child)))
