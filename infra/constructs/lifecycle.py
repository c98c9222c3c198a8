"""The lifecycle state machine (Step Functions Standard, JSONPath) and its task function.

Input contract (`functions.domain.job.TransitionRequest`):

    {"action": "provision" | "replace" | "stop", "job_id": str, "generation": int,
     "reason": str, "attempt": int}

started with the deterministic execution name `<job_id>-<action>-g<generation>-a<attempt>`
(`<job_id>-stop-a<attempt>`): one execution per attempt of a transition.

    provision / replace:
      Begin ─(no)→ Skipped
        │ replace: DestroyPrevious (retried until Vast no longer lists the old instance)
        ▼
      Provision ─ rented → NotifyRented → Done
        ├ no capacity → (timed out? → Fail (job FAILED) → NotifyFailed) WaitForCapacity → Provision
        ├ over budget → DestroyAll → Finish → NotifyStopped
        ├ rent refused (Vast refuses the request's arguments) → Fail (job FAILED) → NotifyFailed
        └ lost race / abandoned → Skipped
    stop:
      StopBegin ─(no)→ Skipped
        ▼
      DestroyAll (retried until gone) → Finish → NotifyStopped → Done
    every Task, once its retries are spent:
      <State>Failed → RecordFailure (the job's timeline: which state, which error) →
      TransitionFailed (the execution FAILS; the monitor starts the next attempt,
      functions/monitor/repair.py)

Every Task is the one lifecycle function with an `op` (`functions/lifecycle/service.py`); its
output lands under its own key, so the execution input stays intact. No secret ever passes
through the state (the provision step mints, rents and records in one invocation), so full
execution logging is safe. A failed attempt leaves the job in the state it reached (every step
is idempotent, so the next attempt carries on from there); only a provision that found no
capacity within the provision timeout, or whose request Vast refuses for its arguments, fails
the job itself.
"""

from __future__ import annotations

from aws_cdk import CfnResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct, IConstruct

from infra import names
from infra.constructs.function import TetherFunction
from infra.constructs.nag import acknowledge
from infra.constructs.secrets import ProviderKey

LIFECYCLE_TABLE_ACTIONS = (
    "dynamodb:BatchGetItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
)
# Vast and Cloudflare hiccups: the adapters already retried for tens of seconds. Lambda's own
# errors too, its timeout among them (`Sandbox.Timedout`; `Lambda.Unknown` in older runtimes):
# every step is idempotent, so running one again after a timeout is safe — a provision killed
# mid-rent destroys the instance it left unrecorded before it rents again.
TRANSIENT_ERRORS = [
    "VastUnavailable",
    "RateLimited",
    "CloudflareUnavailable",
    "CloudflareRateLimited",
    "Sandbox.Timedout",
    "Lambda.Unknown",
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.TooManyRequestsException",
    "Lambda.SdkClientException",
    "Lambda.ClientExecutionTimeoutException",
]


class Lifecycle(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        table: dynamodb.ITable,
        vast_secret: ProviderKey,
        cloudflare_secret: ProviderKey,
        artifacts_bucket: s3.IBucket,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.task_function = TetherFunction(
            self,
            names.LIFECYCLE_FUNCTION_ID,
            code=code,
            handler=names.LIFECYCLE_HANDLER,
            description="tether lifecycle steps: begin, provision, destroy, stop, finish",
            environment={
                names.TABLE_NAME_ENV: table.table_name,
                names.VAST_SECRET_ARN_ENV: vast_secret.parameter_arn,
                names.CLOUDFLARE_SECRET_ARN_ENV: cloudflare_secret.parameter_arn,
                names.ARTIFACTS_BUCKET_ENV: artifacts_bucket.bucket_name,
                names.MONITOR_INTERVAL_ENV: str(names.MONITOR_INTERVAL_S),
            },
            memory_mb=512,
            timeout=Duration.minutes(3),
            reserved_concurrency=reserved_concurrency,
        )
        role = self.task_function.role
        role.add_to_policy(
            iam.PolicyStatement(actions=list(LIFECYCLE_TABLE_ACTIONS), resources=[table.table_arn])
        )
        vast_secret.grant_read(role)
        cloudflare_secret.grant_read(role)
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[artifacts_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{names.AGENT_WHEEL_PREFIX}*"]}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[artifacts_bucket.arn_for_objects(f"{names.AGENT_WHEEL_PREFIX}*")],
            )
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "Presigning the agent wheel: read-only, limited to the artifacts bucket's agent/ "
            "prefix, whose file name changes with every build.",
            f"Resource::<{_logical_id(artifacts_bucket)}.Arn>/{names.AGENT_WHEEL_PREFIX}*",
        )

        self.topic = sns.Topic(
            self,
            names.NOTIFICATIONS_TOPIC_ID,
            display_name="tether job notifications",
            enforce_ssl=True,
            master_key=kms.Alias.from_alias_name(self, "SnsKey", "alias/aws/sns"),
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
            definition_body=sfn.DefinitionBody.from_chainable(self._definition()),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=Duration.hours(names.LIFECYCLE_TIMEOUT_HOURS),
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
        acknowledge(
            self.state_machine.role,
            "AwsSolutions-IAM5",
            "CDK's LambdaInvoke grant covers the function's versions and aliases (`:*`).",
            f"Resource::<{_logical_id(self.task_function.function)}.Arn>:*",
        )

    def set_api_url(self, url: str) -> None:
        """The heartbeat API's base URL, which the rented hosts call (known after the Api)."""
        self.task_function.function.add_environment(names.API_URL_ENV, url)

    # --- the definition ---------------------------------------------------------------------

    def _step(self, state_id: str, op: str, result_key: str, **fields: str) -> tasks.LambdaInvoke:
        """A Task running one lifecycle op; its output lands in `$.<result_key>`."""
        payload: dict[str, object] = {"op": op, "job_id.$": "$.job_id"}
        payload.update(fields)
        return tasks.LambdaInvoke(
            self,
            state_id,
            lambda_function=self.task_function.function,
            payload=sfn.TaskInput.from_object(payload),
            payload_response_only=True,
            result_path=f"$.{result_key}",
            retry_on_service_exceptions=False,
        )

    @staticmethod
    def _retry_transient(task: tasks.LambdaInvoke, attempts: int = 4) -> tasks.LambdaInvoke:
        task.add_retry(
            errors=TRANSIENT_ERRORS,
            interval=Duration.seconds(10),
            backoff_rate=2,
            max_attempts=attempts,
            jitter_strategy=sfn.JitterType.FULL,
        )
        return task

    def _notify(self, state_id: str, subject: str, message_path: str) -> tasks.SnsPublish:
        notify = tasks.SnsPublish(
            self,
            state_id,
            topic=self.topic,
            subject=subject,
            message=sfn.TaskInput.from_json_path_at(message_path),
            result_path=sfn.JsonPath.DISCARD,
        )
        # A notification is a courtesy: its failure must not undo or fail a transition.
        notify.add_catch(sfn.Pass(self, f"{state_id}Dropped"), result_path="$.notify_error")
        return notify

    def _on_failure(self, task: tasks.LambdaInvoke, record: sfn.IChainable) -> None:
        """Every error a task could not retry away ends this attempt: `<State>Failed` names
        the state, RecordFailure says why on the job's timeline, the execution FAILS."""
        state_id = task.node.id
        named = sfn.Pass(
            self,
            f"{state_id}Failed",
            result=sfn.Result.from_string(state_id),
            result_path="$.failed_state",
        )
        named.next(record)
        task.add_catch(named, errors=["States.ALL"], result_path="$.error")

    def _definition(self) -> sfn.IChainable:
        done = sfn.Succeed(self, "Done")
        skipped = sfn.Succeed(self, "Skipped", comment="Nothing to do: already done or moot")

        # a failed attempt: recorded, then FAILED, so the monitor starts the next attempt
        transition_failed = sfn.Fail(
            self,
            "TransitionFailed",
            error="TransitionFailed",
            cause="A step failed after its retries; the job's timeline names it and why. The "
            "monitor starts the transition's next attempt.",
        )
        record_failure = self._retry_transient(
            self._step(
                "RecordFailure",
                "attempt_failed",
                "recorded",
                **{
                    "execution.$": "$$.Execution.Name",
                    "failed_state.$": "$.failed_state",
                    "error.$": "$.error",
                },
            )
        )
        record_failure.add_catch(
            transition_failed, errors=["States.ALL"], result_path="$.record_error"
        )
        record_failure.next(transition_failed)

        # stop (also the end of an over-budget provision)
        destroy_all = self._step("DestroyAll", "destroy", "destroy")
        destroy_all.add_retry(
            errors=["InstancesStillPresent", *TRANSIENT_ERRORS],
            interval=Duration.seconds(15),
            backoff_rate=2,
            max_attempts=12,
            max_delay=Duration.minutes(5),
            jitter_strategy=sfn.JitterType.FULL,
        )
        finish = self._retry_transient(self._step("Finish", "finish", "finish"))
        notify_stopped = self._notify("NotifyStopped", "tether: job ended", "$.finish.message")
        stop_path = destroy_all.next(finish).next(notify_stopped).next(done)
        stop_begin = self._retry_transient(
            self._step("StopBegin", "stop_begin", "begin", **{"reason.$": "$.reason"})
        )
        stop = stop_begin.next(
            sfn.Choice(self, "Stopping?")
            .when(sfn.Condition.boolean_equals("$.begin.proceed", True), stop_path)
            .otherwise(skipped)
        )

        # no capacity within the provision timeout, or a rent refused for its arguments
        fail = self._retry_transient(
            self._step("Fail", "fail", "fail", **{"reason.$": "$.provision.message"})
        )
        notify_failed = self._notify("NotifyFailed", "tether: job failed", "$.fail.message")
        fail.next(notify_failed)
        notify_failed.next(done)

        # provision / replace
        provision = self._retry_transient(
            self._step(
                "Provision",
                "provision",
                "provision",
                **{"generation.$": "$.generation", "waited_s.$": "$.waited_s"},
            )
        )
        wait = sfn.Wait(
            self, "WaitForCapacity", time=sfn.WaitTime.seconds_path("$.provision.wait_s")
        )
        count_wait = sfn.Pass(
            self,
            "CountWait",
            input_path="$.provision.waited_s",
            result_path="$.waited_s",
        )
        notify_rented = self._notify("NotifyRented", "tether: host rented", "$.provision.message")
        outcome = (
            sfn.Choice(self, "Rented?")
            .when(
                sfn.Condition.string_equals("$.provision.outcome", "rented"),
                notify_rented.next(done),
            )
            .when(
                sfn.Condition.and_(
                    sfn.Condition.string_equals("$.provision.outcome", "no_capacity"),
                    sfn.Condition.boolean_equals("$.provision.timed_out", True),
                ),
                fail,
            )
            .when(
                sfn.Condition.string_equals("$.provision.outcome", "no_capacity"),
                wait.next(count_wait).next(provision),
            )
            .when(sfn.Condition.string_equals("$.provision.outcome", "over_budget"), destroy_all)
            # Vast refuses the request's arguments, whatever the offer: waiting cannot help.
            .when(sfn.Condition.string_equals("$.provision.outcome", "rent_refused"), fail)
            .otherwise(skipped)
        )
        provision.next(outcome)
        start_waited = sfn.Pass(
            self, "StartWaited", result=sfn.Result.from_number(0), result_path="$.waited_s"
        )
        destroy_previous = self._step(
            "DestroyPrevious",
            "destroy",
            "destroy",
            **{"below_generation.$": "$.generation"},
        )
        destroy_previous.add_retry(
            errors=["InstancesStillPresent", *TRANSIENT_ERRORS],
            interval=Duration.seconds(15),
            backoff_rate=2,
            max_attempts=8,
            max_delay=Duration.minutes(5),
            jitter_strategy=sfn.JitterType.FULL,
        )
        begin = self._retry_transient(
            self._step(
                "Begin",
                "begin",
                "begin",
                **{
                    "action.$": "$.action",
                    "generation.$": "$.generation",
                    "reason.$": "$.reason",
                },
            )
        )
        begin.next(
            sfn.Choice(self, "Begun?")
            .when(sfn.Condition.boolean_equals("$.begin.proceed", False), skipped)
            .when(
                sfn.Condition.string_equals("$.action", "replace"),
                destroy_previous.next(start_waited),
            )
            .otherwise(start_waited)
        )
        start_waited.next(provision)

        for task in (begin, destroy_previous, provision, fail, stop_begin, destroy_all, finish):
            self._on_failure(task, record_failure)

        unknown = sfn.Fail(
            self,
            "UnknownAction",
            error="UnknownAction",
            cause="action must be provision, replace or stop",
        )
        return (
            sfn.Choice(self, "RouteAction")
            .when(sfn.Condition.string_equals("$.action", "provision"), begin)
            .when(sfn.Condition.string_equals("$.action", "replace"), begin)
            .when(sfn.Condition.string_equals("$.action", "stop"), stop)
            .otherwise(unknown)
        )


def _logical_id(construct: IConstruct) -> str:
    """The CloudFormation logical id of an L2 resource (cdk-nag names findings by it)."""

    stack = Stack.of(construct)
    child = construct.node.default_child
    assert isinstance(child, CfnResource)
    return str(stack.resolve(stack.get_logical_id(child)))
