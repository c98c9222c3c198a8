"""Local AWS: a CDK-synthesized template running on moto, in this process.

`LocalAws` starts moto's server on a free loopback port in a thread and points this process at
it (`AWS_ENDPOINT_URL`, `MOTO_PORT`, fake credentials, region). Other processes (the agent)
reach the same DynamoDB and S3 through `endpoint_url`. `deploy(template)` creates the
template's tables, functions, state machines, topics, secrets, buckets and parameters with
boto3 (`tether_local.aws.deployer`) and returns what it made (`tether_local.aws.deployed.Deployed`),
schedules included, so the local stack's own clock can fire them.

moto runs the real Step Functions definition. While a `LocalAws` is open, a few private moto
internals are patched (`tether_local.aws.moto_patches`): Lambda invocations go to the local Lambda
runtime, and Wait states, Retry back-offs and the execution's TimeoutSeconds run on a clock
scaled by `time_scale`.

The Lambda runtime (`tether_local.aws.lambda_runtime` says why there are two):
- `runtime="process"` (default): each execution environment is a worker process with the
  function's environment; invocations run concurrently, each function in its own environments,
  killed at the function's timeout; logs to `log_dir/<function>.log` (or this process's
  stdout/stderr).
- `runtime="in_process"`: handlers run in this process, one invocation at a time, with the same
  timeouts; for tests that install in-process hooks (`functions.adapters.factory`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import boto3
import botocore.config
import httpx

from tether_local.aws.deployed import ACCOUNT_ID, Deployed, Schedule
from tether_local.aws.deployer import HARNESS_ROLE, Deployer
from tether_local.aws.lambda_process import CHECKOUT, DEFAULT_MAX_ENVIRONMENTS, ProcessRuntime
from tether_local.aws.lambda_runtime import (
    RUNTIME_KINDS,
    FunctionConfig,
    InProcessRuntime,
    InvokeResult,
    LambdaRuntime,
    RuntimeKind,
    error_result,
)
from tether_local.aws.moto_patches import MotoPatches

LOG = logging.getLogger(__name__)

_FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


class LambdaInvocationError(RuntimeError):
    """A function invoked through `LocalAws.invoke` raised; `error_type` is the class name."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


# Invoke through moto waits as long as the longest Lambda timeout, and never retries (a retry
# would run the function twice).
_INVOKE_CONFIG = botocore.config.Config(read_timeout=960, retries={"total_max_attempts": 1})

_active_lock = threading.Lock()
_active: LocalAws | None = None


class LocalAws:
    """moto in process with Lambda, Wait and Retry patched; a context manager.

    >>> with LocalAws(time_scale=0.001) as aws:
    ...     deployed = aws.deploy(template)
    ...     arn = aws.start_execution(deployed.state_machine_arn("Lifecycle"), {"job_id": "j1"})
    ...     aws.wait_execution(arn)["status"]
    'SUCCEEDED'

    One per process at a time: moto's backends, the patches and os.environ are process-wide.
    """

    def __init__(
        self,
        *,
        region: str = "us-east-1",
        time_scale: float = 1.0,
        runtime: RuntimeKind = "process",
        log_dir: Path | None = None,
        max_environments: int = DEFAULT_MAX_ENVIRONMENTS,
    ) -> None:
        if time_scale < 0:
            raise ValueError("time_scale must be ≥ 0")
        if runtime not in RUNTIME_KINDS:
            raise ValueError(f"runtime must be one of {', '.join(RUNTIME_KINDS)}, got {runtime!r}")
        self.region = region
        self.time_scale = time_scale
        self.runtime_kind: RuntimeKind = runtime
        self.log_dir = log_dir
        self.max_environments = max_environments
        self._runtime: LambdaRuntime | None = None
        self._server: Any = None
        self._port = 0
        self._patches = MotoPatches(time_scale, self._invoke_moto_function)
        self._saved_env: dict[str, str | None] = {}
        self._saved_config: dict[str, Any] | None = None
        self._saved_werkzeug_level: int | None = None
        self._executions = 0

    # lifecycle

    def __enter__(self) -> LocalAws:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        global _active
        from moto.server import ThreadedMotoServer

        with _active_lock:
            if _active is not None:
                raise RuntimeError("a LocalAws is already open in this process; close it first")
            _active = self
        try:
            # moto's server logs every request through werkzeug at INFO: hundreds of lines a run.
            werkzeug = logging.getLogger("werkzeug")
            self._saved_werkzeug_level = werkzeug.level
            werkzeug.setLevel(logging.WARNING)
            self._patches.apply()
            self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            self._server.start()
            self._port = int(self._server.get_host_and_port()[1])
            self._set_environment()
            self._runtime = self._make_runtime()
            self._moto_api("reset")
            self._saved_config = self._moto_api("config")
            self._moto_api("config", {"stepfunctions": {"execute_state_machine": True}})
            self.client("iam").create_role(
                RoleName=HARNESS_ROLE,
                AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
            )
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop running executions, reset moto, restore patches and env, stop the server."""
        global _active
        try:
            if self._server is not None:
                with contextlib.suppress(Exception):
                    self.stop_running_executions()
            if self._runtime is not None:
                self._runtime.close()  # every environment, busy or idle, is killed and reaped
                self._runtime = None
            if self._server is not None:
                with contextlib.suppress(Exception):
                    self._moto_api("reset")
                if self._saved_config is not None:
                    with contextlib.suppress(Exception):
                        self._moto_api("config", self._saved_config)
                self._stop_server()
        finally:
            self._patches.restore()
            for key, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            self._saved_env = {}
            if self._saved_werkzeug_level is not None:
                logging.getLogger("werkzeug").setLevel(self._saved_werkzeug_level)
                self._saved_werkzeug_level = None
            with _active_lock:
                if _active is self:
                    _active = None

    def _stop_server(self) -> None:
        # serve_forever notices a shutdown only between requests or after its 0.5 s poll:
        # poke it with requests so that closing takes milliseconds (tests close one per test).
        url = f"{self.endpoint_url}/moto-api/config"
        stopper = threading.Thread(target=self._server.stop, daemon=True)
        stopper.start()
        while stopper.is_alive():
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(url, timeout=0.2)
            stopper.join(0.01)
        self._server = None

    @property
    def endpoint_url(self) -> str:
        if not self._port:
            raise RuntimeError("LocalAws is not started")
        return f"http://127.0.0.1:{self._port}"

    def client(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.endpoint_url, region_name=self.region)

    def _make_runtime(self) -> LambdaRuntime:
        if self.runtime_kind == "in_process":
            return InProcessRuntime()
        base_env = {
            # What every environment has besides the runtime's and the function's variables:
            # the local AWS and nothing else of this process (no test variable, no profile).
            **_FAKE_CREDENTIALS,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "PATH": os.environ.get("PATH", os.defpath),
            "LANG": "C.UTF-8",
            "TZ": ":UTC",  # as Lambda sets it
            "LAMBDA_TASK_ROOT": str(CHECKOUT),
            "PYTHONPATH": str(CHECKOUT),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        return ProcessRuntime(
            base_env=base_env, log_dir=self.log_dir, max_environments=self.max_environments
        )

    def _set_environment(self) -> None:
        values = {
            **_FAKE_CREDENTIALS,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "MOTO_PORT": str(self._port),  # moto's interpreter builds its clients from it
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
        }
        for key, value in values.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        os.environ.pop("AWS_PROFILE", None)

    def _moto_api(self, action: str, body: Mapping[str, Any] | None = None) -> Any:
        url = f"{self.endpoint_url}/moto-api/{action}"
        if action == "config" and body is None:
            response = httpx.get(url, timeout=10)
        else:
            response = httpx.post(url, json=dict(body or {}), timeout=10)
        response.raise_for_status()
        return response.json() if response.content else None

    # deploying

    def deploy(
        self,
        template: Mapping[str, Any],
        *,
        parameters: Mapping[str, Any] | None = None,
        stack_name: str = "tether",
    ) -> Deployed:
        """Create the template's resources in dependency order; see the module docstring."""
        if self._server is None:
            raise RuntimeError("LocalAws is not started")
        return Deployer(
            self.client, self.region, template, dict(parameters or {}), stack_name
        ).run()

    # Lambda

    @property
    def runtime(self) -> LambdaRuntime:
        if self._runtime is None:
            raise RuntimeError("LocalAws is not started")
        return self._runtime

    def _invoke_moto_function(self, fn: Any, event: Any) -> InvokeResult:
        runtime = self._runtime
        if runtime is None:
            return error_result("LocalAws.Closed", "the local AWS is closed")
        return runtime.invoke(FunctionConfig.from_moto(fn), event)

    def function_config(self, function: str) -> FunctionConfig:
        """The function's configuration now (name or ARN), from moto's Lambda backend."""
        from moto.awslambda.models import lambda_backends

        fn = lambda_backends[ACCOUNT_ID][self.region].get_function(function)
        return FunctionConfig.from_moto(fn)

    def run_function(self, function: str, event: Any) -> InvokeResult:
        """Invoke a function (name or ARN) directly, without moto's HTTP round trip: the API
        front's path. Returns the runtime's (payload text, errored, log)."""
        return self.runtime.invoke(self.function_config(function), event)

    def prewarm(self, functions: Iterable[str]) -> None:
        """Start one execution environment per function now, in the background."""
        self.runtime.prewarm([self.function_config(f) for f in functions])

    def lambda_pids(self) -> list[int]:
        """The process ids of the live execution environments (empty in process)."""
        runtime = self._runtime
        return runtime.pids() if isinstance(runtime, ProcessRuntime) else []

    def invoke(self, function: str, event: Any = None) -> Any:
        """Invoke a function (name or ARN) through moto, as Step Functions does; return its
        result, or raise `LambdaInvocationError` with the handler's exception class name (or
        `Sandbox.Timedout` past the function's timeout)."""
        client = boto3.client(
            "lambda", endpoint_url=self.endpoint_url, region_name=self.region, config=_INVOKE_CONFIG
        )
        response = client.invoke(
            FunctionName=function, Payload=json.dumps({} if event is None else event).encode()
        )
        payload = json.loads(response["Payload"].read() or b"null")
        if response.get("FunctionError"):
            raise LambdaInvocationError(
                str(payload.get("errorType", "Exception")), str(payload.get("errorMessage", ""))
            )
        return payload

    # Step Functions

    def start_execution(self, arn: str, input: Any = None, name: str | None = None) -> str:
        """Start an execution and return its ARN. Always named: moto gives unnamed executions
        one fixed ARN, so a second one would collide."""
        self._executions += 1
        name = name or f"local-{self._executions}-{uuid.uuid4().hex[:8]}"
        text = input if isinstance(input, str) else json.dumps({} if input is None else input)
        response = self.client("stepfunctions").start_execution(
            stateMachineArn=arn, input=text, name=name
        )
        return str(response["executionArn"])

    def wait_execution(self, arn: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """Poll until the execution leaves RUNNING; return describe_execution with `output`
        parsed into `output_json` when it is JSON."""
        sfn = self.client("stepfunctions")
        deadline = time.monotonic() + timeout_s
        while True:
            described: dict[str, Any] = sfn.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING":
                with contextlib.suppress(KeyError, TypeError, ValueError):
                    described["output_json"] = json.loads(described["output"])
                return described
            if time.monotonic() > deadline:
                last = [e["type"] for e in self.execution_history(arn)[-5:]]
                raise TimeoutError(f"{arn} still RUNNING after {timeout_s} s; last events: {last}")
            time.sleep(0.02)

    def execution_history(self, arn: str) -> list[dict[str, Any]]:
        sfn = self.client("stepfunctions")
        events: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"executionArn": arn, "maxResults": 1000}
        while True:
            page = sfn.get_execution_history(**kwargs)
            events.extend(page["events"])
            if not page.get("nextToken"):
                return events
            kwargs["nextToken"] = page["nextToken"]

    def stop_running_executions(self) -> list[str]:
        """Stop every RUNNING execution of every state machine; return their ARNs."""
        sfn = self.client("stepfunctions")
        stopped: list[str] = []
        for machine in sfn.list_state_machines()["stateMachines"]:
            running = sfn.list_executions(
                stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING"
            )["executions"]
            for execution in running:
                sfn.stop_execution(executionArn=execution["executionArn"], cause="LocalAws closed")
                stopped.append(execution["executionArn"])
        return stopped

    # schedules

    def fire_schedule(self, schedule: Schedule) -> str:
        """Do what the schedule's target would: start the state machine (returns the execution
        ARN) or invoke the function (returns its request's function name)."""
        if not schedule.enabled:
            raise ValueError(f"schedule {schedule.name} is disabled")
        service = schedule.target_arn.split(":")[2] if schedule.target_arn.count(":") >= 5 else ""
        if service == "states":
            return self.start_execution(schedule.target_arn, schedule.input or "{}")
        if service == "lambda":
            self.invoke(schedule.target_arn, json.loads(schedule.input or "{}"))
            return schedule.target_arn
        raise ValueError(f"schedule {schedule.name}: target {schedule.target_arn} is not supported")


# The types its methods take and return, so `from tether_local.aws.local_aws import …` is enough.
__all__ = ["Deployed", "LambdaInvocationError", "LocalAws", "Schedule"]
