"""The HTTP API: user routes with IAM (SigV4) auth → the jobs function; the agent heartbeat
(bearer token checked by the function, no API Gateway authorizer) → the heartbeat function; and
a `$default` route to the jobs function so unknown routes and methods get tether's JSON 404/405
instead of API Gateway's bare message. Each function gets only the grants it needs.

Throttles: every route has its own token bucket (the stage's `RouteSettings`); past it API
Gateway answers 429 before any function runs. The heartbeat route's bucket is sized from the
fleet (`HEARTBEAT_RATE_LIMIT`), the user routes' from a person at a terminal, and both are stack
parameters (docs/deploy.md#throttles says how to raise them). The heartbeat route needs no
authorizer, so anyone who knows the URL can spend its bucket: its own bucket keeps such a flood
off the user routes and bounds what it costs; the agents retry a 429 within half an interval
(`agent/tether_agent/heartbeat_sender.py`), which carries them through a flood several times the
rate.

Past the throttles, the heartbeat and jobs functions have reserved concurrency, which caps
them (`infra/concurrency.py`): what the buckets let through cannot hold more of the account's
Lambda concurrency than that, however slowly the functions answer, so the monitor and the
lifecycle always find theirs.
"""

from __future__ import annotations

import jsii
from aws_cdk import CfnParameter, CfnResource, RemovalPolicy, Stack
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.aws_apigatewayv2_authorizers import HttpIamAuthorizer
from aws_cdk.aws_apigatewayv2_integrations import HttpLambdaIntegration
from constructs import Construct

from functions.domain.secrets import SECRET_PREFIX
from infra import names
from infra.constructs.function import TetherFunction
from infra.constructs.nag import acknowledge
from infra.constructs.secrets import ProviderKey

# Transactions (submit, cancel) need the per-item actions; Query serves list and get.
JOBS_TABLE_ACTIONS = (
    "dynamodb:ConditionCheckItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
)
HEARTBEAT_TABLE_ACTIONS = ("dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:UpdateItem")
LOGS_TABLE_ACTIONS = ("dynamodb:GetItem",)
# User secrets: SSM SecureStrings under /tether/secrets/. The jobs function checks at submit
# that they exist (GetParameters without decryption, no KMS grant); only the heartbeat function
# decrypts, through SSM, with the account's default key (aws/ssm).
SECRETS_ACTIONS = ("ssm:GetParameters",)
SECRETS_KMS_ACTIONS = ("kms:Decrypt",)

# Heartbeat route: an agent heartbeats once per policy.heartbeat_interval_s (15 s by default),
# plus once per phase change, so N agents send about N / 15 requests a second. 50 a second
# carries 750 agents at 15 s, and is sized for up to 75 (5 requests a second) with ten times
# headroom: a junk flood must pass 45 requests a second before a real heartbeat sees a 429.
HEARTBEAT_RATE_LIMIT = 50
HEARTBEAT_BURST_LIMIT = 100  # every agent of a 75-agent fleet at once, with room to spare
# User routes (submit, list, status, cancel, logs) and `$default`: a person and the CLI, which
# retries a 429. Each route has its own bucket of this size.
USER_RATE_LIMIT = 10
USER_BURST_LIMIT = 20


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogs:
    def __init__(self, destination: apigwv2.IAccessLogDestination) -> None:
        self._destination = destination

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> None:
        return None  # API Gateway's default JSON-ish access log line


def _logical_id(table: dynamodb.ITable) -> str:
    stack = Stack.of(table)
    child = table.node.default_child
    assert isinstance(child, CfnResource)
    return str(stack.resolve(stack.get_logical_id(child)))


class Api(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        table: dynamodb.ITable,
        state_machine: sfn.IStateMachine,
        cloudflare_secret: ProviderKey,
        jobs_concurrency: int | None = None,
        heartbeat_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.jobs = TetherFunction(
            self,
            names.JOBS_FUNCTION_ID,
            code=code,
            handler=names.JOBS_HANDLER,
            description="tether job API: submit, list, get, cancel, code uploads",
            environment={
                names.TABLE_NAME_ENV: table.table_name,
                names.STATE_MACHINE_ARN_ENV: state_machine.state_machine_arn,
                # Code archives: a presigned PUT of code/<sha256>.tar.gz, and the check at
                # submit that it is there as described, with R2 keys minted per request.
                names.CLOUDFLARE_SECRET_ARN_ENV: cloudflare_secret.parameter_arn,
            },
            # `$default` runs it for anyone: a flood there stops at this cap.
            reserved_concurrency=jobs_concurrency,
        )
        self.heartbeat = TetherFunction(
            self,
            names.HEARTBEAT_FUNCTION_ID,
            code=code,
            handler=names.HEARTBEAT_HANDLER,
            description="tether agent heartbeat: token check, lease, credentials",
            environment={
                names.TABLE_NAME_ENV: table.table_name,
                names.SUPERVISED_MAX_AGE_ENV: str(names.SUPERVISED_MAX_AGE_S),
            },
            # No authorizer in front: a flood stops at this cap, not at the account's pool.
            reserved_concurrency=heartbeat_concurrency,
        )
        # Reads the job item, then the job's log segments in R2 with read-only credentials it
        # mints from the Cloudflare secret (which the heartbeat function cannot read).
        self.logs = TetherFunction(
            self,
            names.LOGS_FUNCTION_ID,
            code=code,
            handler=names.LOGS_HANDLER,
            description="tether job logs: presigned URLs of the training log segments",
            environment={
                names.TABLE_NAME_ENV: table.table_name,
                names.CLOUDFLARE_SECRET_ARN_ENV: cloudflare_secret.parameter_arn,
            },
        )
        self.logs.role.add_to_policy(
            iam.PolicyStatement(actions=list(LOGS_TABLE_ACTIONS), resources=[table.table_arn])
        )
        cloudflare_secret.grant_read(self.logs.role)
        cloudflare_secret.grant_read(self.jobs.role)
        self.jobs.role.add_to_policy(
            iam.PolicyStatement(
                actions=list(JOBS_TABLE_ACTIONS),
                resources=[table.table_arn, f"{table.table_arn}/index/*"],
            )
        )
        self.heartbeat.role.add_to_policy(
            iam.PolicyStatement(actions=list(HEARTBEAT_TABLE_ACTIONS), resources=[table.table_arn])
        )
        self._grant_user_secrets()
        state_machine.grant_start_execution(self.jobs.role)
        acknowledge(
            self.jobs.role,
            "AwsSolutions-IAM5",
            "Query on the table's own indexes (AllJobs) for GET /jobs.",
            f"Resource::<{_logical_id(table)}.Arn>/index/*",
        )

        jobs_integration = HttpLambdaIntegration("JobsIntegration", self.jobs.function)
        heartbeat_integration = HttpLambdaIntegration(
            "HeartbeatIntegration", self.heartbeat.function
        )
        self.http_api = apigwv2.HttpApi(
            self,
            "HttpApi",
            description="tether control plane",
            create_default_stage=False,
        )
        self.access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        heartbeat_rate, heartbeat_burst, user_rate, user_burst = self._throttle_parameters()
        self.stage = apigwv2.HttpStage(
            self,
            "Stage",
            http_api=self.http_api,
            auto_deploy=True,
            # Routes without settings of their own ($default): the user routes' bucket.
            throttle=apigwv2.ThrottleSettings(rate_limit=user_rate, burst_limit=user_burst),
            access_log_settings=_AccessLogs(apigwv2.LogGroupLogDestination(self.access_logs)),
        )
        iam_auth = HttpIamAuthorizer()
        for method, path in names.USER_ROUTES:
            self.http_api.add_routes(
                path=path,
                methods=[apigwv2.HttpMethod(method)],
                integration=jobs_integration,
                authorizer=iam_auth,
            )
        logs_integration = HttpLambdaIntegration("LogsIntegration", self.logs.function)
        for method, path in (names.LOGS_ROUTE, names.FILES_ROUTE):
            self.http_api.add_routes(
                path=path,
                methods=[apigwv2.HttpMethod(method)],
                integration=logs_integration,
                authorizer=iam_auth,
            )
        method, path = names.HEARTBEAT_ROUTE
        heartbeat_routes = self.http_api.add_routes(
            path=path, methods=[apigwv2.HttpMethod(method)], integration=heartbeat_integration
        )
        default_route = apigwv2.HttpRoute(
            self,
            "DefaultRoute",
            http_api=self.http_api,
            route_key=apigwv2.HttpRouteKey.DEFAULT,
            integration=jobs_integration,
        )
        self._throttle_routes(
            {
                f"{m} {p}": (user_rate, user_burst)
                for m, p in (*names.USER_ROUTES, names.LOGS_ROUTE, names.FILES_ROUTE)
            }
            | {" ".join(names.HEARTBEAT_ROUTE): (heartbeat_rate, heartbeat_burst)}
        )
        for route in heartbeat_routes:
            acknowledge(
                route,
                "AwsSolutions-APIG4",
                "Agents on rented hosts hold no AWS identity: the heartbeat function checks the "
                "per-generation bearer token (sha256, constant time) before it reads or writes "
                "anything.",
            )
        acknowledge(
            default_route,
            "AwsSolutions-APIG4",
            "Catch-all for unknown routes and methods: the jobs function answers 404/405 JSON "
            "there and refuses every user route without an IAM identity.",
        )

    @property
    def url(self) -> str:
        return self.stage.url

    def _grant_user_secrets(self) -> None:
        """GetParameters on the prefix for both functions; kms:Decrypt for the heartbeat
        function only, only through SSM and only for parameters under the prefix."""
        stack = Stack.of(self)
        parameters = stack.format_arn(
            service="ssm", resource="parameter", resource_name=SECRET_PREFIX.strip("/") + "/*"
        )
        for function in (self.jobs, self.heartbeat):
            function.role.add_to_policy(
                iam.PolicyStatement(actions=list(SECRETS_ACTIONS), resources=[parameters])
            )
        self.heartbeat.role.add_to_policy(
            iam.PolicyStatement(
                actions=list(SECRETS_KMS_ACTIONS),
                resources=[stack.format_arn(service="kms", resource="key", resource_name="*")],
                conditions={
                    "StringEquals": {"kms:ViaService": f"ssm.{stack.region}.amazonaws.com"},
                    "StringLike": {"kms:EncryptionContext:PARAMETER_ARN": parameters},
                },
            )
        )
        finding = (
            "Resource::arn:<AWS::Partition>:ssm:<AWS::Region>:<AWS::AccountId>:parameter"
            + SECRET_PREFIX.rstrip("/")
            + "/*"
        )
        for function in (self.jobs, self.heartbeat):
            acknowledge(
                function.role,
                "AwsSolutions-IAM5",
                "User secrets are the parameters under the tether prefix; their names come "
                "from job specs, so the grant is the prefix.",
                finding,
            )
        acknowledge(
            self.heartbeat.role,
            "AwsSolutions-IAM5",
            "The default aws/ssm key's id is not known at synth: Decrypt is limited to calls "
            "through SSM for parameters under the tether secret prefix.",
            "Resource::arn:<AWS::Partition>:kms:<AWS::Region>:<AWS::AccountId>:key/*",
        )

    def _throttle_parameters(self) -> tuple[float, float, float, float]:
        """The four throttle numbers as stack parameters (`--parameters HeartbeatRateLimit=…`),
        defaulting to the sizes above."""
        values = []
        for name, default, limit, what in (
            (names.HEARTBEAT_RATE_PARAMETER, HEARTBEAT_RATE_LIMIT, names.ACCOUNT_RATE_LIMIT,
             "Heartbeat route: steady requests per second (about agents / 15, times ten)."),
            (names.HEARTBEAT_BURST_PARAMETER, HEARTBEAT_BURST_LIMIT, names.ACCOUNT_BURST_LIMIT,
             "Heartbeat route: requests at once (the token bucket's size)."),
            (names.USER_RATE_PARAMETER, USER_RATE_LIMIT, names.ACCOUNT_RATE_LIMIT,
             "Each user route (submit, list, status, cancel, logs): steady requests per second."),
            (names.USER_BURST_PARAMETER, USER_BURST_LIMIT, names.ACCOUNT_BURST_LIMIT,
             "Each user route: requests at once."),
        ):  # fmt: skip
            parameter = CfnParameter(
                self, name, type="Number", default=default, min_value=1, max_value=limit,
                description=f"{what} Past it API Gateway answers 429 (docs/deploy.md).",
            )  # fmt: skip
            parameter.override_logical_id(name)
            values.append(parameter.value_as_number)
        rate, burst, user_rate, user_burst = values
        return rate, burst, user_rate, user_burst

    def _throttle_routes(self, limits: dict[str, tuple[float, float]]) -> None:
        """Each route's own bucket, in the stage's `RouteSettings` (the L2 stage has no
        property for it). A route named there must exist before the stage is created or
        updated, hence the dependencies."""
        stage = self.stage.node.default_child
        assert isinstance(stage, apigwv2.CfnStage)
        stage.add_property_override(
            "RouteSettings",
            {
                key: {"ThrottlingRateLimit": rate, "ThrottlingBurstLimit": burst}
                for key, (rate, burst) in limits.items()
            },
        )
        for child in self.http_api.node.find_all():
            if isinstance(child, apigwv2.CfnRoute):
                stage.add_dependency(child)
