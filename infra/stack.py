"""The tether stack: small constructs, each owning its resources (data, secrets, artifacts,
lifecycle, api, monitor, job events, observability), and the outputs the CLI and the tests read
(names in `infra/names.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from functions.domain.shards import MAX_SHARDS
from infra import names
from infra.concurrency import reserved_concurrency
from infra.constructs.api import Api
from infra.constructs.artifacts import Artifacts
from infra.constructs.data import DataStore
from infra.constructs.events import JobEvents
from infra.constructs.lifecycle import Lifecycle
from infra.constructs.monitor import Monitor
from infra.constructs.observability import Observability
from infra.constructs.secrets import Secrets


class TetherStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str = names.STACK_NAME,
        *,
        lambda_asset_dir: Path,
        agent_wheel_dir: Path,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        code = lambda_.Code.from_asset(str(lambda_asset_dir))
        shards = monitor_shards(self.node.try_get_context(names.MONITOR_SHARDS_CONTEXT))
        reserved = reserved_concurrency(self.node.try_get_context, shards=shards)
        self.data = DataStore(self, names.DATA_ID)
        self.secrets = Secrets(self, names.SECRETS_ID)
        self.artifacts = Artifacts(self, names.ARTIFACTS_ID, agent_wheel_dir=agent_wheel_dir)
        self.lifecycle = Lifecycle(
            self,
            names.LIFECYCLE_ID,
            code=code,
            table=self.data.table,
            vast_secret=self.secrets.vast_api_key,
            cloudflare_secret=self.secrets.cloudflare,
            artifacts_bucket=self.artifacts.bucket,
            reserved_concurrency=reserved.lifecycle,
        )
        self.api = Api(
            self,
            names.API_ID,
            code=code,
            table=self.data.table,
            state_machine=self.lifecycle.state_machine,
            cloudflare_secret=self.secrets.cloudflare,
            jobs_concurrency=reserved.jobs,
            heartbeat_concurrency=reserved.heartbeat,
        )
        self.lifecycle.set_api_url(self.api.url)
        self.monitor = Monitor(
            self,
            names.MONITOR_ID,
            code=code,
            table=self.data.table,
            state_machine=self.lifecycle.state_machine,
            vast_secret=self.secrets.vast_api_key,
            cloudflare_secret=self.secrets.cloudflare,
            shards=shards,
            reserved_concurrency=reserved.monitor,
        )
        # Every function that moves a job publishes its transitions (the monitor only starts
        # lifecycle executions; the lifecycle moves the job).
        self.job_events = JobEvents(
            self,
            names.JOB_EVENTS_ID,
            publishers=(self.api.jobs, self.lifecycle.task_function),
        )
        self.observability = Observability(
            self,
            names.OBSERVABILITY_ID,
            job_topic=self.lifecycle.topic,
            http_api=self.api.http_api,
            state_machine=self.lifecycle.state_machine,
            monitor_function=self.monitor.function.function,
            api_functions={
                "jobs": self.api.jobs.function,
                "logs": self.api.logs.function,
                "heartbeat": self.api.heartbeat.function,
            },
            monitor_logs=self.monitor.function.log_group,
            lifecycle_logs=self.lifecycle.task_function.log_group,
            monitor_shards=self.monitor.shards,
            dashboard=names.dashboard_wanted(self.node.try_get_context(names.DASHBOARD_CONTEXT)),
        )
        for output_id, value, description in (
            (names.OUTPUT_API_URL, self.api.url, "Base URL of the tether API"),
            (names.OUTPUT_TABLE_NAME, self.data.table.table_name, "DynamoDB table"),
            (
                names.OUTPUT_ARTIFACTS_BUCKET,
                self.artifacts.bucket.bucket_name,
                "S3 bucket holding the agent wheel",
            ),
            (
                names.OUTPUT_STATE_MACHINE_ARN,
                self.lifecycle.state_machine.state_machine_arn,
                "Lifecycle state machine",
            ),
            (
                names.OUTPUT_NOTIFICATIONS_TOPIC_ARN,
                self.lifecycle.topic.topic_arn,
                "SNS topic with job notifications (subscribe your e-mail)",
            ),
            (
                names.OUTPUT_JOB_EVENTS_TOPIC_ARN,
                self.job_events.topic.topic_arn,
                "SNS topic with one JSON event per job transition (filter on `state`, `job_id`)",
            ),
            (
                names.OUTPUT_MONITOR_SHARDS,
                str(self.monitor.shards),
                "Monitor schedules the fleet is split across (docs/deploy.md)",
            ),
            (
                names.OUTPUT_DASHBOARD,
                "on" if self.observability.dashboard is not None else "off",
                "The CloudWatch dashboard (`tether deploy --no-dashboard` leaves it out)",
            ),
            *(
                (output_id, str(number), f"Reserved concurrency of the {what} function")
                for output_id, number, what in (
                    (names.OUTPUT_MONITOR_CONCURRENCY, reserved.monitor, "monitor"),
                    (names.OUTPUT_LIFECYCLE_CONCURRENCY, reserved.lifecycle, "lifecycle"),
                    (names.OUTPUT_HEARTBEAT_CONCURRENCY, reserved.heartbeat, "heartbeat"),
                    (names.OUTPUT_JOBS_CONCURRENCY, reserved.jobs, "jobs"),
                )
            ),
            (
                names.OUTPUT_VAST_SECRET_ARN,
                self.secrets.vast_api_key.parameter_name,
                "SSM SecureString with the Vast API key: `tether secrets set vast`",
            ),
            (
                names.OUTPUT_CLOUDFLARE_SECRET_ARN,
                self.secrets.cloudflare.parameter_name,
                "SSM SecureString with the Cloudflare R2 settings: `tether secrets set cloudflare`",
            ),
        ):
            CfnOutput(self, output_id, value=value, description=description)


def monitor_shards(value: object) -> int:
    """The `monitorShards` context (default 1), checked: a bad value fails the synth, naming it."""
    if value is None:
        return 1
    try:
        shards = int(str(value))
    except ValueError:
        shards = 0
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(
            f"context {names.MONITOR_SHARDS_CONTEXT}={value!r}: give a whole number of monitor "
            f"shards from 1 to {MAX_SHARDS} (e.g. -c {names.MONITOR_SHARDS_CONTEXT}=4)"
        )
    return shards
