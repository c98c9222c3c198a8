"""One Lambda function the tether way: arm64, Python 3.12, its own log group with retention,
X-Ray tracing (unless its handler is one of `names.UNTRACED_HANDLERS`), reserved concurrency if
given, and its own role that holds only what the function is granted."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra import names
from infra.constructs.nag import acknowledge

RUNTIME = lambda_.Runtime.PYTHON_3_12


class TetherFunction(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        handler: str,
        description: str,
        environment: Mapping[str, str],
        memory_mb: int = 256,
        timeout: Duration | None = None,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        traced = handler not in names.UNTRACED_HANDLERS
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        # An own role instead of AWSLambdaBasicExecutionRole: logs only to its own group.
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"tether {construct_id}: {description}",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[self.log_group.log_group_arn],
            )
        )
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=RUNTIME,
            architecture=lambda_.Architecture.ARM_64,
            handler=handler,
            code=code,
            role=self.role,
            log_group=self.log_group,
            # Untraced: no tracing config (no X-Ray grant) and the Powertools tracer off, so
            # no X-Ray segment is recorded or billed.
            tracing=lambda_.Tracing.ACTIVE if traced else lambda_.Tracing.DISABLED,
            memory_size=memory_mb,
            timeout=timeout or Duration.seconds(15),
            description=description,
            # A share of the account's concurrency this function alone may use, and its cap
            # (infra/concurrency.py); None: the account's unreserved pool.
            reserved_concurrent_executions=reserved_concurrency,
            environment={
                names.SERVICE_NAME_ENV: names.SERVICE_NAME,
                names.METRICS_NAMESPACE_ENV: names.METRICS_NAMESPACE,
                **({} if traced else names.UNTRACED_ENV),
                **environment,
                # After the caller's: no trace records a returned or raised value (presigned
                # URLs, secrets), whatever Tracer a handler builds (functions/observability.py).
                "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false",
                "POWERTOOLS_TRACER_CAPTURE_ERROR": "false",
            },
        )
        acknowledge(
            self.function,
            "AwsSolutions-L1",
            "Pinned to Python 3.12 on purpose: the asset's compiled dependencies "
            "(pydantic-core) are built for cp312/aarch64.",
        )
        if not traced:
            return
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            "X-Ray PutTraceSegments/PutTelemetryRecords support no resource-level permissions "
            "(added by tracing=ACTIVE).",
            "Resource::*",
        )
