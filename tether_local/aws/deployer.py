"""The deployer: a CloudFormation template → the same resources, created with boto3 on moto.

Not through moto's CloudFormation: a state machine created there is never executed. Resources
are created in dependency order (`tether_local.aws.template.creation_order`) with `Ref`,
`Fn::GetAtt`, `Fn::Join`, `Fn::Sub` and conditions resolved
(`tether_local.aws.template.Resolver`): tables, functions (their `Handler` runs in process,
`tether_local.aws.lambda_runtime`), state machines, topics, secrets, buckets and parameters.
Schedules and API Gateway routes (with their stage's throttles) are recorded for the local clock
and front; roles, policies, log groups and unknown types are recorded only, with plausible names
and ARNs so that references to them resolve.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import re
import secrets
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

from tether_local.aws.deployed import (
    ACCOUNT_ID,
    Deployed,
    DeployedResource,
    HttpRoute,
    Schedule,
    Throttle,
)
from tether_local.aws.template import (
    Resolver,
    StackContext,
    TemplateError,
    check_parameters,
    creation_order,
)

LOG = logging.getLogger(__name__)

HARNESS_ROLE = "tether-local-harness"  # the one role every function and state machine gets


_RATE = re.compile(r"rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)")
_RATE_UNIT_S = {"minute": 60, "hour": 3600, "day": 86400}


def rate_seconds(expression: str) -> float | None:
    """`rate(5 minutes)` → 300.0; None for cron(...) and at(...) expressions."""
    match = _RATE.fullmatch(expression.strip())
    if match is None:
        return None
    return float(int(match.group(1)) * _RATE_UNIT_S[match.group(2).rstrip("s")])


def _dummy_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README.txt", "LocalAws imports the handler from the checkout.\n")
    return buffer.getvalue()


class Deployer:
    """Creates one template's resources with boto3 clients from `client` (against moto)."""

    def __init__(
        self,
        client: Callable[[str], Any],
        region: str,
        template: Mapping[str, Any],
        parameters: dict[str, Any],
        stack: str,
    ) -> None:
        self.client = client
        self.region = region
        self.template = template
        self.stack = stack
        self.context = StackContext(stack_name=stack, region=region, account_id=ACCOUNT_ID)
        check_parameters(template, parameters)
        self.resolver = Resolver(template, self.context, parameters)
        self.role_arn = f"arn:aws:iam::{ACCOUNT_ID}:role/{HARNESS_ROLE}"
        self.resources: dict[str, DeployedResource] = {}
        self.schedules: list[Schedule] = []
        self.integrations: dict[str, dict[str, Any]] = {}
        self.routes: list[HttpRoute] = []
        self.route_apis: dict[str, str] = {}  # route key → its API's id
        self.stage_throttles: dict[str, tuple[Throttle | None, dict[str, Throttle]]] = {}
        self.creators: dict[str, Callable[[str, dict[str, Any]], tuple[str, dict[str, Any]]]] = {
            "AWS::DynamoDB::Table": self.table,
            "AWS::DynamoDB::GlobalTable": self.table,
            "AWS::Lambda::Function": self.function,
            "AWS::StepFunctions::StateMachine": self.state_machine,
            "AWS::SNS::Topic": self.topic,
            "AWS::SecretsManager::Secret": self.secret,
            "AWS::S3::Bucket": self.bucket,
            "AWS::SSM::Parameter": self.parameter,
            "AWS::Scheduler::Schedule": self.schedule,
            "AWS::Events::Rule": self.rule,
            "AWS::ApiGatewayV2::Stage": self.stage_record,
        }

    def run(self) -> Deployed:
        declared: Mapping[str, Any] = self.template.get("Resources", {})
        for logical_id in creation_order(self.template):
            resource = declared[logical_id]
            type_ = str(resource.get("Type", ""))
            condition = resource.get("Condition")
            if condition is not None and not self.resolver.condition(condition):
                continue
            creator = self.creators.get(type_)
            where = f"Resources.{logical_id}.Properties"
            try:
                if creator is None:
                    LOG.debug("%s (%s): not created locally, recorded only", logical_id, type_)
                    try:
                        properties = self.resolver.resolve(resource.get("Properties", {}), where)
                    except TemplateError as exc:  # not created: its properties barely matter
                        LOG.debug("%s: properties left unresolved: %s", logical_id, exc)
                        properties = {}
                    ref, attrs = self.recorded_only(logical_id, type_, properties)
                else:
                    properties = self.resolver.resolve(resource.get("Properties", {}), where)
                    ref, attrs = creator(logical_id, properties)
            except TemplateError:
                raise
            except Exception as exc:
                raise TemplateError(f"Resources.{logical_id} ({type_}): {exc}") from exc
            self.resolver.refs[logical_id] = ref
            self.resolver.attributes[logical_id] = attrs
            self.resources[logical_id] = DeployedResource(
                logical_id, type_, ref, attrs, created=creator is not None
            )
        outputs: dict[str, Any] = {}
        for name, output in self.template.get("Outputs", {}).items():
            condition = output.get("Condition")
            if condition is None or self.resolver.condition(condition):
                outputs[name] = self.resolver.resolve(output["Value"], f"Outputs.{name}.Value")
        return Deployed(self.stack, self.resources, outputs, self.schedules, self.throttled())

    def throttled(self) -> list[HttpRoute]:
        """The routes with their stage's buckets: a route's own settings, else the stage's
        default route settings (each route a bucket of its own, as API Gateway keeps them)."""
        out = []
        for route in self.routes:
            default, own = self.stage_throttles.get(
                self.route_apis.get(route.route_key, ""), (None, {})
            )
            throttle = own.get(route.route_key, default)
            out.append(dataclasses.replace(route, throttle=throttle))
        return out

    def name(self, logical_id: str, limit: int, given: Any = None) -> str:
        # CloudFormation adds a random suffix; a deterministic name makes local runs repeatable.
        return str(given) if given else f"{self.stack}-{logical_id}"[:limit]

    def arn(self, service: str, resource: str) -> str:
        return f"arn:aws:{service}:{self.region}:{ACCOUNT_ID}:{resource}"

    # creators: each returns (what Ref gives, the Fn::GetAtt attributes)

    def table(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = self.name(logical_id, 255, props.get("TableName"))
        billing = props.get("BillingMode", "PROVISIONED")
        default_throughput = {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
        request: dict[str, Any] = {
            "TableName": name,
            "KeySchema": props["KeySchema"],
            "AttributeDefinitions": props["AttributeDefinitions"],
            "BillingMode": billing,
        }
        if billing == "PROVISIONED":
            request["ProvisionedThroughput"] = props.get(
                "ProvisionedThroughput", default_throughput
            )
        indexes = []
        for index in props.get("GlobalSecondaryIndexes", []):
            gsi = {k: index[k] for k in ("IndexName", "KeySchema", "Projection") if k in index}
            if billing == "PROVISIONED":
                gsi["ProvisionedThroughput"] = index.get(
                    "ProvisionedThroughput", default_throughput
                )
            indexes.append(gsi)
        if indexes:
            request["GlobalSecondaryIndexes"] = indexes
        local_indexes = [
            {k: index[k] for k in ("IndexName", "KeySchema", "Projection")}
            for index in props.get("LocalSecondaryIndexes", [])
        ]
        if local_indexes:
            request["LocalSecondaryIndexes"] = local_indexes
        stream = props.get("StreamSpecification")
        if stream:
            request["StreamSpecification"] = {
                "StreamEnabled": True,
                "StreamViewType": stream["StreamViewType"],
            }
        dynamodb = self.client("dynamodb")
        described = dynamodb.create_table(**request)["TableDescription"]
        ttl = props.get("TimeToLiveSpecification")
        if ttl and ttl.get("Enabled"):
            dynamodb.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]},
            )
        attrs = {"Arn": described["TableArn"]}
        if "LatestStreamArn" in described:
            attrs["StreamArn"] = described["LatestStreamArn"]
        return name, attrs

    def function(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = self.name(logical_id, 64, props.get("FunctionName"))
        if not props.get("Handler"):
            raise TemplateError(
                f"Resources.{logical_id}: a function needs a Handler to run in process"
            )
        variables = props.get("Environment", {}).get("Variables", {})
        # The template's role is not created: moto only needs some existing role to accept it.
        response = self.client("lambda").create_function(
            FunctionName=name,
            Runtime=props.get("Runtime", "python3.12"),
            Role=self.role_arn,
            Handler=props["Handler"],
            Code={"ZipFile": _dummy_zip()},
            Environment={"Variables": {k: str(v) for k, v in variables.items()}},
            Timeout=int(props.get("Timeout", 3)),
            MemorySize=int(props.get("MemorySize", 128)),
            TracingConfig=props.get("TracingConfig", {"Mode": "PassThrough"}),
        )
        return name, {"Arn": response["FunctionArn"]}

    def state_machine(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = self.name(logical_id, 80, props.get("StateMachineName"))
        if "DefinitionString" in props:
            definition = str(props["DefinitionString"])
        elif "Definition" in props:
            definition = json.dumps(props["Definition"])
        else:
            raise TemplateError(
                f"Resources.{logical_id}: only DefinitionString or Definition are supported"
            )
        for key, value in props.get("DefinitionSubstitutions", {}).items():
            definition = definition.replace("${" + key + "}", str(value))
        response = self.client("stepfunctions").create_state_machine(
            name=name,
            definition=definition,
            roleArn=self.role_arn,
            type=props.get("StateMachineType", "STANDARD"),
        )
        arn = str(response["stateMachineArn"])
        return arn, {"Arn": arn, "Name": name}

    def topic(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = self.name(logical_id, 256, props.get("TopicName"))
        attributes = {"FifoTopic": "true"} if props.get("FifoTopic") else {}
        arn = str(self.client("sns").create_topic(Name=name, Attributes=attributes)["TopicArn"])
        return arn, {"TopicArn": arn, "TopicName": name}

    def secret(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = self.name(logical_id, 512, props.get("Name"))
        value = props.get("SecretString")
        if value is None:
            generate = props.get("GenerateSecretString", {})
            generated = secrets.token_urlsafe(int(generate.get("PasswordLength", 32)))[:32]
            key = generate.get("GenerateStringKey")
            if key:
                document = json.loads(generate.get("SecretStringTemplate", "{}"))
                document[key] = generated
                value = json.dumps(document)
            else:
                value = generated
        arn = str(self.client("secretsmanager").create_secret(Name=name, SecretString=value)["ARN"])
        return arn, {"Id": arn}

    def bucket(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = self.name(logical_id, 63, props.get("BucketName")).lower()
        s3 = self.client("s3")
        if self.region == "us-east-1":
            s3.create_bucket(Bucket=name)
        else:
            s3.create_bucket(
                Bucket=name, CreateBucketConfiguration={"LocationConstraint": self.region}
            )
        return name, {
            "Arn": f"arn:aws:s3:::{name}",
            "DomainName": f"{name}.s3.amazonaws.com",
            "RegionalDomainName": f"{name}.s3.{self.region}.amazonaws.com",
        }

    def parameter(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = self.name(logical_id, 2048, props.get("Name"))
        self.client("ssm").put_parameter(
            Name=name, Value=str(props["Value"]), Type=props.get("Type", "String")
        )
        return name, {"Type": props.get("Type", "String"), "Value": props["Value"]}

    def schedule(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = self.name(logical_id, 64, props.get("Name"))
        expression = str(props["ScheduleExpression"])
        target = props["Target"]
        self.schedules.append(
            Schedule(
                logical_id=logical_id,
                name=name,
                expression=expression,
                interval_s=rate_seconds(expression),
                target_arn=str(target["Arn"]),
                input=target.get("Input"),
                enabled=props.get("State", "ENABLED") == "ENABLED",
            )
        )
        group = props.get("GroupName", "default")
        return name, {"Arn": self.arn("scheduler", f"schedule/{group}/{name}")}

    def stage_record(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """An HTTP API stage: recorded for its throttles (the front's token buckets)."""
        api_id = str(props.get("ApiId", ""))
        own = {
            str(key): throttle
            for key, settings in (props.get("RouteSettings") or {}).items()
            if (throttle := _throttle(settings, f"{logical_id}.RouteSettings.{key}")) is not None
        }
        default = _throttle(props.get("DefaultRouteSettings") or {}, f"{logical_id}.Default")
        self.stage_throttles[api_id] = (default, own)
        name = str(props.get("StageName", logical_id))
        return name, {}

    def rule(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = self.name(logical_id, 64, props.get("Name"))
        expression = props.get("ScheduleExpression")
        if expression:  # event-pattern rules have nothing for a clock to fire
            for target in props.get("Targets", []):
                self.schedules.append(
                    Schedule(
                        logical_id=logical_id,
                        name=f"{name}/{target.get('Id', '')}",
                        expression=str(expression),
                        interval_s=rate_seconds(str(expression)),
                        target_arn=str(target["Arn"]),
                        input=target.get("Input"),
                        enabled=props.get("State", "ENABLED") == "ENABLED",
                    )
                )
        return name, {"Arn": self.arn("events", f"rule/{name}")}

    def recorded_only(
        self, logical_id: str, type_: str, props: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """Roles, policies, log groups and unknown types: plausible names and ARNs for
        references, nothing created."""
        if type_ == "AWS::IAM::Role":
            name = self.name(logical_id, 64, props.get("RoleName"))
            arn = f"arn:aws:iam::{ACCOUNT_ID}:role/{name}"
            return name, {"Arn": arn, "RoleId": f"AROA{logical_id.upper()[:17]}"}
        if type_ == "AWS::Logs::LogGroup":
            name = self.name(logical_id, 512, props.get("LogGroupName"))
            return name, {"Arn": self.arn("logs", f"log-group:{name}:*")}
        if type_ == "AWS::ApiGatewayV2::Integration":
            self.integrations[logical_id] = props
            return logical_id, {}
        if type_ == "AWS::ApiGatewayV2::Route":
            target = str(props.get("Target", ""))
            integration = self.integrations.get(target.removeprefix("integrations/"), {})
            uri = str(integration.get("IntegrationUri", ""))
            if uri.startswith("arn:") and ":lambda:" in uri:
                self.route_apis[str(props["RouteKey"])] = str(props.get("ApiId", ""))
                self.routes.append(
                    HttpRoute(
                        route_key=str(props["RouteKey"]),
                        function_arn=uri,
                        authorization_type=str(props.get("AuthorizationType", "NONE")),
                        payload_format_version=str(integration.get("PayloadFormatVersion", "2.0")),
                    )
                )
            return logical_id, {}
        if type_ == "AWS::ApiGatewayV2::Api":
            api_id = logical_id.lower()[:10]
            endpoint = f"https://{api_id}.execute-api.{self.region}.amazonaws.com"
            return api_id, {"ApiEndpoint": endpoint, "ApiId": api_id}
        name = self.name(logical_id, 255)
        service = type_.split("::")[1].lower() if type_.count("::") == 2 else "cloudformation"
        return name, _AnyAttribute(self.arn(service, f"{logical_id}/{name}"))


def _throttle(settings: Mapping[str, Any], where: str) -> Throttle | None:
    """Route settings → a bucket; None when they set no throttle. A route setting that names
    one limit only gets 0 for the other in AWS (nothing passes): the same here."""
    rate, burst = settings.get("ThrottlingRateLimit"), settings.get("ThrottlingBurstLimit")
    if rate is None and burst is None:
        return None
    try:
        return Throttle(rate_per_s=float(rate or 0), burst=int(float(burst or 0)))
    except (TypeError, ValueError):
        raise TemplateError(
            f"{where}: throttle limits must be numbers, got {rate!r}, {burst!r}"
        ) from None


class _AnyAttribute(dict[str, Any]):
    """Attributes of a resource that is only recorded: every attribute name reads as its ARN,
    so references from resources the harness does not create (policies) still resolve."""

    def __init__(self, arn: str) -> None:
        super().__init__(Arn=arn)
        self._arn = arn

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> str:
        return self._arn


__all__ = ["HARNESS_ROLE", "Deployer", "rate_seconds"]
