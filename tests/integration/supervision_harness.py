"""The real stack on LocalAws with the Vast and Cloudflare simulators behind the adapters.

One deployment per test module (`supervised` fixture factory below); each test gets a fresh
simulator pair, an empty table and a fake clock that the handlers and the simulators share
(`functions.adapters.factory.install_hooks`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import yaml

from functions.adapters import factory
from functions.adapters.store import JobStore
from functions.adapters.transitions import TransitionStarter
from functions.api import job_service
from functions.domain import agent_env
from functions.domain.health import gpu_busy
from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.job import (
    Generation,
    Heartbeat,
    Job,
    TransitionAction,
    TransitionRequest,
    known_spend_usd,
    new_job,
    new_job_id,
)
from functions.domain.jobspec import parse_job
from functions.domain.recovery import Resumed
from functions.settings import JobsApiSettings
from infra import names
from tests.paths import ROOT
from tether_local.aws.apigw import http_api_event
from tether_local.aws.local_aws import Deployed, LocalAws
from tether_local.r2.cloudflare_sim import CloudflareSim
from tether_local.vast_sim import VastSimulator

WHEEL_KEY = f"{names.AGENT_WHEEL_PREFIX}tether_agent-0.1.0-py3-none-any.whl"
CLOUDFLARE_ACCOUNT = "local-account"
CLOUDFLARE_TOKEN = "local-api-token-0123456789"
PARENT_KEY = "local-parent-key"
BUCKET = "tether"


class FakeClock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def logical_id_by_handler(template: dict[str, Any], handler: str) -> str:
    (found,) = [
        k
        for k, v in template["Resources"].items()
        if v["Type"] == "AWS::Lambda::Function" and v["Properties"].get("Handler") == handler
    ]
    return str(found)


def logical_id_by_type(template: dict[str, Any], kind: str, contains: str) -> str:
    (found,) = [k for k, v in template["Resources"].items() if v["Type"] == kind and contains in k]
    return str(found)


@dataclass
class Supervised:
    """One deployed stack plus the current test's simulators."""

    aws: LocalAws
    deployed: Deployed
    template: dict[str, Any]
    clock: FakeClock = field(default_factory=FakeClock)
    vast: VastSimulator = field(init=False)
    cloudflare: CloudflareSim = field(init=False)

    def rents(self) -> int:
        """Rent calls the Vast simulator received in this test."""
        log = self.vast.request_log
        return sum(1 for method, url in log if method == "PUT" and "/asks/" in url)

    def __post_init__(self) -> None:
        self.table = self.deployed.table_name(
            logical_id_by_type(self.template, "AWS::DynamoDB::Table", "Data")
        )
        self.store = JobStore(self.table, client=self.aws.client("dynamodb"))
        self.state_machine_arn = self.deployed.state_machine_arn(
            logical_id_by_type(self.template, "AWS::StepFunctions::StateMachine", "Lifecycle")
        )
        self.monitor_arn = self.deployed.function_arn(
            logical_id_by_handler(self.template, names.MONITOR_HANDLER)
        )
        self.heartbeat_arn = self.deployed.function_arn(
            logical_id_by_handler(self.template, names.HEARTBEAT_HANDLER)
        )
        self.sfn = self.aws.client("stepfunctions")
        self.fresh()
        ssm = self.aws.client("ssm")  # the provider keys, as `tether secrets set` stores them
        for parameter, value in (
            (names.VAST_KEY_PARAMETER, self.vast.api_key),
            (
                names.CLOUDFLARE_PARAMETER,
                json.dumps(
                    {
                        "account_id": CLOUDFLARE_ACCOUNT,
                        "api_token": CLOUDFLARE_TOKEN,
                        "parent_access_key_id": PARENT_KEY,
                        "bucket": BUCKET,
                    }
                ),
            ),
        ):
            ssm.put_parameter(Name=parameter, Value=value, Type="SecureString", Overwrite=True)
        bucket = self.deployed.bucket_name(
            logical_id_by_type(self.template, "AWS::S3::Bucket", "Artifacts")
        )
        self.aws.client("s3").put_object(Bucket=bucket, Key=WHEEL_KEY, Body=b"wheel")

    def fresh(self) -> None:
        """New simulators and clock; an empty table; no running executions."""
        self.aws.stop_running_executions()
        self.clock = FakeClock()
        self.vast = VastSimulator(clock=self.clock, startup_s=30)
        self.cloudflare = CloudflareSim(
            account_id=CLOUDFLARE_ACCOUNT, api_tokens=[CLOUDFLARE_TOKEN], clock=self.clock
        )
        sims = self

        def transport(provider: factory.Provider) -> httpx.BaseTransport:
            if provider == "vast":
                return httpx.MockTransport(lambda r: sims.vast.handle(r))
            return httpx.MockTransport(lambda r: sims.cloudflare.handle(r))

        self.hooks = factory.Hooks(transport=transport, sleep=lambda s: None, clock=self.clock)
        factory.install_hooks(self.hooks)
        dynamodb = self.aws.client("dynamodb")
        for page in dynamodb.get_paginator("scan").paginate(TableName=self.table):
            for item in page["Items"]:
                dynamodb.delete_item(TableName=self.table, Key={"pk": item["pk"], "sk": item["sk"]})

    # jobs ----------------------------------------------------------------------------------

    def submit(self, **overrides: Any) -> Job:
        spec = yaml.safe_load((ROOT / "examples" / "tiny-cpu" / "job.yaml").read_text())
        for key, value in overrides.items():
            if isinstance(value, dict) and isinstance(spec.get(key), dict):
                spec[key].update(value)
            else:
                spec[key] = value
        parsed = parse_job(spec)
        job, event = new_job(
            parsed, job_id=new_job_id(parsed.name), now=self.clock(), submitted_by="test"
        )
        self.store.create_job(job, event)
        return job

    def start(self, action: TransitionAction, job_id: str, generation: int, reason: str) -> str:
        request = TransitionRequest(
            action=action,
            job_id=job_id,
            generation=generation,
            reason=reason,
        )
        return self.aws.start_execution(
            self.state_machine_arn, request.model_dump(), name=request.execution_name
        )

    def execution_arn(self, name: str) -> str:
        return self.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{name}"

    def run(
        self, action: TransitionAction, job_id: str, generation: int, reason: str = "test"
    ) -> dict[str, Any]:
        arn = self.start(action, job_id, generation, reason)
        return self.aws.wait_execution(arn, timeout_s=60)

    def provisioned(self, **overrides: Any) -> tuple[Job, Generation]:
        job = self.submit(**overrides)
        result = self.run("provision", job.job_id, 1, "submitted")
        assert result["status"] == "SUCCEEDED", result
        found = self.store.get_job(job.job_id)
        generation = self.store.get_generation(job.job_id, 1)
        assert found is not None and generation is not None
        return found, generation

    def cold_start(self) -> None:
        """New Lambda containers: every cached client and secret is read again."""
        factory.install_hooks(self.hooks)

    def secret_arn(self, which: str) -> str:
        """A provider key's parameter ARN, as the deployed monitor's environment holds it."""
        env = {"vast": names.VAST_SECRET_ARN_ENV, "cloudflare": names.CLOUDFLARE_SECRET_ARN_ENV}
        config = self.aws.client("lambda").get_function_configuration(FunctionName=self.monitor_arn)
        return str(config["Environment"]["Variables"][env[which]])

    def agent_beat(self, job_id: str, generation: int, **fields: Any) -> dict[str, Any]:
        """A heartbeat through the real heartbeat function, with the token the generation's
        host holds (as its agent sends it); returns the reply body."""
        stored = self.store.get_generation(job_id, generation)
        assert stored is not None and stored.instance_id is not None
        token = self.vast.sim_instance(stored.instance_id).env[agent_env.AGENT_TOKEN]
        body: dict[str, Any] = {
            "job_id": job_id,
            "generation": generation,
            "phase": "training",
            "step": 1,
            "gpu": {"available": True, "responsive": True, "utilization_pct": 90.0},
            "agent_time": self.clock(),
        }
        body.update(fields)
        event = http_api_event(
            "POST", "/agent/heartbeat", body=body, headers={"Authorization": f"Bearer {token}"}
        )
        reply = self.aws.invoke(self.heartbeat_arn, event)
        assert reply["statusCode"] == 200, reply
        answer: dict[str, Any] = json.loads(reply["body"])
        return answer

    def vast_http(self) -> httpx.Client:
        """An HTTP client to the Vast simulator (for calls a test makes as someone else)."""
        return httpx.Client(transport=httpx.MockTransport(self.vast.handle))

    def stop_instance(self, instance_id: int) -> None:
        """What an agent does with its own instance key when its lease runs out or it is
        told to stop: the instance stops (GPU billing ends, storage goes on)."""
        key = self.vast.sim_instance(instance_id).api_key
        reply = self.vast_http().put(
            f"https://console.vast.ai/api/v0/instances/{instance_id}/",
            headers={"Authorization": f"Bearer {key}"},
            json={"state": "stopped"},
        )
        assert reply.status_code == 200, reply.text

    def heartbeat(
        self,
        job_id: str,
        generation: int,
        *,
        training_start_step: int | None = None,
        **fields: Any,
    ) -> None:
        values: dict[str, Any] = {
            "at": self.clock(),
            "agent_time": self.clock(),
            "phase": "training",
            "step": 1,
            "gpu": GpuProbe(available=True, utilization_pct=90.0),
        }
        values.update(fields)
        beat = Heartbeat(**values)
        stored = self.store.get_generation(job_id, generation)
        job = self.store.get_job(job_id)
        assert stored is not None and job is not None
        assert self.store.store_heartbeat(  # what the heartbeat API stores for its agent
            job_id,
            generation,
            token_hash=stored.token_hash,
            heartbeat=beat,
            lease_expires_at=stored.lease_expires_at,
            training_start_step=training_start_step,
            gpu_busy=gpu_busy(beat.gpu, job.spec.policy),
        )

    def first_step(self, job_id: str, generation: Generation) -> None:
        """The generation's first training step, now, on a fresh start (restored nothing): what
        the heartbeat API stores with its first `training` heartbeat (where its pace starts)."""
        now = self.clock()
        assert self.store.store_heartbeat(
            job_id, generation.generation, token_hash=generation.token_hash,
            heartbeat=Heartbeat(at=now, agent_time=now, phase="training", step=0,
                                gpu=GpuProbe(available=True, utilization_pct=90.0)),
            lease_expires_at=generation.lease_expires_at, training_start_step=0,
            resumed=Resumed(step=0, started_at=now - 60, first_step_at=now),
        )  # fmt: skip

    def monitor(self) -> dict[str, Any]:
        result: dict[str, Any] = self.aws.invoke(self.monitor_arn, {})
        return result

    def spent_usd(self, job_id: str) -> float:
        """The job's spend as last measured (what `GET /jobs/{id}` shows): the job item's
        figure is refreshed only in steps, the monitor's last run keeps the exact one on the
        generation (`known_spend_usd`)."""
        job = self.store.get_job(job_id)
        assert job is not None
        return known_spend_usd(job, self.store.list_generations(job_id))

    def wait_for(self, name: str) -> dict[str, Any]:
        return self.aws.wait_execution(self.execution_arn(name), timeout_s=60)

    def events(self, job_id: str) -> list[str]:
        view = self.store.get_job_view(job_id)
        assert view is not None
        return [e.kind for e in view.events]

    # attempts of transitions ----------------------------------------------------------------

    def executions(self, job_id: str) -> dict[str, str]:
        """The job's executions (one per attempt of a transition): name → status."""
        pages = self.sfn.get_paginator("list_executions").paginate(
            stateMachineArn=self.state_machine_arn
        )
        return {
            e["name"]: e["status"]
            for page in pages
            for e in page["executions"]
            if e["name"].startswith(f"{job_id}-")
        }

    def settle(self, job_id: str) -> dict[str, str]:
        """Wait until none of the job's executions is running; return them all."""
        for name, status in self.executions(job_id).items():
            if status == "RUNNING":
                self.wait_for(name)
        return self.executions(job_id)

    def cancel(self, job_id: str) -> None:
        """`POST /jobs/{id}/cancel`, through the jobs API's service (it starts the stop)."""
        deps = job_service.JobsDeps(
            settings=cast(JobsApiSettings, None),  # cancel reads no setting
            store=self.store,
            transitions=TransitionStarter(self.state_machine_arn, client=self.sfn),
            clock=self.clock,
        )
        job_service.cancel_job(deps, job_id, identity="tester")


def supervised_stack(template: dict[str, Any], time_scale: float) -> Iterator[Supervised]:
    # In process: the handlers must see this test's fake clock and in-process simulators
    # (factory hooks), which a worker process would not (tether_local.aws.lambda_runtime).
    with LocalAws(time_scale=time_scale, runtime="in_process") as aws:
        deployed = aws.deploy(template)
        try:
            yield Supervised(aws=aws, deployed=deployed, template=template)
        finally:
            factory.reset()
