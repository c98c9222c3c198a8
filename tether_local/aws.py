"""Local AWS: a CDK-synthesized template running on moto, in this process.

`LocalAws` starts moto's server on a free loopback port in a thread and points this process at
it (`AWS_ENDPOINT_URL`, `MOTO_PORT`, fake credentials, region). Other processes (the agent)
reach the same DynamoDB and S3 through `endpoint_url`. `deploy(template)` creates the
template's tables, functions, state machines, topics, secrets, buckets and parameters with
boto3 (not through moto's CloudFormation: a state machine created there is never executed)
and records its schedules, so the local stack's own clock can fire them.

moto runs the real Step Functions definition. Three private moto internals are patched while a
`LocalAws` is open (moto is pinned; `check_moto_internals` is the canary when they move):

- `LambdaFunction._invoke_lambda` (moto wants Docker there) runs the Python handler named by the
  function's `Handler`, imported from this checkout, in process. An exception becomes the
  function error with the exception's class name as `errorType`, which is what Step Functions
  matches `Retry`/`Catch` `ErrorEquals` against.
- `WaitFunction._wait_interval` and the retrier's `time.sleep` wait `time_scale` × the
  seconds the definition asks for, so hour-long Wait states and Retry back-offs take
  milliseconds in tests.

The function's environment: each invocation sets the function's variables (and the ones the
Lambda runtime sets) in `os.environ`, runs the handler and restores `os.environ` exactly, all
under one process-wide lock. Invocations are therefore serialized, like one Lambda sandbox;
variables never leak from one function into the next. Two consequences: a handler must not
synchronously invoke another function (that would wait on the lock; the lock gives up after
`INVOCATION_LOCK_TIMEOUT_S` with a clear error), and module-level caches in code shared by
several functions are shared too (in AWS each function has its own process).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import logging
import os
import re
import secrets
import threading
import time
import traceback
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
import httpx

from tether_local.template import Resolver, StackContext, TemplateError, creation_order

LOG = logging.getLogger(__name__)

MOTO_VERSION = "5.2.5"  # the internals patched below were read at this version
ACCOUNT_ID = "123456789012"  # moto's default account
INVOCATION_LOCK_TIMEOUT_S = 120.0
_HARNESS_ROLE = "tether-local-harness"
_FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}

_LAMBDA_INVOKE = ("moto.awslambda.models", "LambdaFunction", "_invoke_lambda")
_WAIT_INTERVAL = (
    "moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function",
    "WaitFunction",
    "_wait_interval",
)
_RETRIER_MODULE = "moto.stepfunctions.parser.asl.component.common.retry.retrier_decl"
_ENVIRONMENT_MODULE = "moto.stepfunctions.parser.asl.eval.environment"


class MotoInternalsMoved(RuntimeError):
    """A moto internal the harness patches is gone or changed shape: re-read moto's source."""


class LambdaInvocationError(RuntimeError):
    """A function invoked through `LocalAws.invoke` raised; `error_type` is the class name."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


# --- the moto internals ---------------------------------------------------------------------


def check_moto_internals() -> None:
    """Raise `MotoInternalsMoved` naming every patched moto symbol that moved or changed shape."""
    problems: list[str] = []

    def method(module_name: str, class_name: str, name: str, params: list[str]) -> None:
        symbol = f"{module_name}.{class_name}.{name}"
        try:
            owner = getattr(importlib.import_module(module_name), class_name)
            found = list(inspect.signature(getattr(owner, name)).parameters)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{symbol} is gone ({exc})")
            return
        if found[: len(params)] != params:
            problems.append(f"{symbol} takes {found}, the harness expects {params}")

    method(*_LAMBDA_INVOKE, ["self", "event"])
    method(*_WAIT_INTERVAL, ["self", "env", "wait_seconds"])
    try:
        retrier = importlib.import_module(_RETRIER_MODULE)
        if retrier.time is not time or "time.sleep(" not in inspect.getsource(
            retrier.RetrierDecl._eval_body
        ):
            problems.append(f"{_RETRIER_MODULE}.RetrierDecl._eval_body no longer sleeps with time")
        environment = importlib.import_module(_ENVIRONMENT_MODULE)
        init = inspect.getsource(environment.Environment.__init__)
        if "program_state_event" not in init or not hasattr(environment.Environment, "is_running"):
            problems.append(f"{_ENVIRONMENT_MODULE}.Environment lost program_state_event")
    except (ImportError, AttributeError, OSError, TypeError) as exc:
        problems.append(f"{_RETRIER_MODULE} or {_ENVIRONMENT_MODULE} moved ({exc})")
    import moto

    if moto.__version__ != MOTO_VERSION:
        problems.append(f"moto is {moto.__version__}; the patches were written for {MOTO_VERSION}")
    if problems:
        raise MotoInternalsMoved(
            "tether_local/aws.py patches moto internals that changed: " + "; ".join(problems)
        )


class _ScaledTime:
    """Stands in for the `time` module inside moto's retrier: `sleep` is scaled."""

    def __init__(self, scale: float) -> None:
        self._scale = scale

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds * self._scale))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class _MotoPatches:
    """Applies and restores the three patches; restoring puts back exactly what was there."""

    def __init__(self, time_scale: float) -> None:
        self._time_scale = time_scale
        self._saved: list[tuple[Any, str, Any]] = []

    def apply(self) -> None:
        check_moto_internals()
        lambda_class = _owner(_LAMBDA_INVOKE)
        wait_class = _owner(_WAIT_INTERVAL)
        retrier = importlib.import_module(_RETRIER_MODULE)
        scale = self._time_scale

        def invoke_lambda(fn: Any, event: Any = None) -> tuple[str, bool, str]:
            return _invoke_in_process(fn, {} if event is None else event)

        def wait_interval(_self: Any, env: Any, wait_seconds: float) -> None:
            # As moto's own: wake early when the execution stops (program_state_event is set).
            deadline = time.monotonic() + max(0.0, wait_seconds * scale)
            while env.is_running() and (left := deadline - time.monotonic()) > 0:
                env.program_state_event.wait(left)

        self._replace(lambda_class, _LAMBDA_INVOKE[2], invoke_lambda)
        self._replace(wait_class, _WAIT_INTERVAL[2], wait_interval)
        self._replace(retrier, "time", _ScaledTime(scale))
        # Not a dict attribute like the others: os.environ's class, restored the same way.
        self._saved.append((os.environ, "__class__", type(os.environ)))
        os.environ.__class__ = _SnapshotEnviron

    def restore(self) -> None:
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)

    def _replace(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, value)


class _SnapshotEnviron(os._Environ):  # type: ignore[type-arg]
    """os.environ whose `items()` and `copy()` read one atomic snapshot.

    Handlers run with their function's variables set in os.environ (under a lock) while other
    threads keep sending requests, and botocore and httpx read proxy settings with
    `os.environ.items()` on every request: a plain iteration that meets a key removed meanwhile
    raises KeyError. Copying the underlying dict is atomic, so snapshot readers never see that.
    """

    def items(self) -> list[tuple[str, str]]:  # type: ignore[override]
        return [(self.decodekey(k), self.decodevalue(v)) for k, v in dict(self._data).items()]  # type: ignore[attr-defined]

    def copy(self) -> dict[str, str]:
        return dict(self.items())


def _owner(symbol: tuple[str, str, str]) -> Any:
    return getattr(importlib.import_module(symbol[0]), symbol[1])


# --- Lambda, in process ---------------------------------------------------------------------


@dataclass
class LambdaContext:
    """What the Lambda runtime passes as `context` (the attributes Powertools reads)."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    timeout_s: float
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = ""
    log_stream_name: str = ""
    identity: Any = None
    client_context: Any = None
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_s
        self.log_group_name = self.log_group_name or f"/aws/lambda/{self.function_name}"
        self.log_stream_name = self.log_stream_name or f"local/[$LATEST]{self.aws_request_id}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


_INVOCATION_LOCK = threading.Lock()


def _invoke_in_process(fn: Any, event: Any) -> tuple[str, bool, str]:
    """moto's `_invoke_lambda` contract: (response payload, errored, log text)."""
    context = LambdaContext(
        function_name=fn.function_name,
        invoked_function_arn=fn.function_arn,
        memory_limit_in_mb=int(fn.memory_size),
        timeout_s=float(fn.timeout),
    )
    runtime_env = {
        "_HANDLER": fn.handler,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{fn.run_time}",
        "AWS_LAMBDA_FUNCTION_NAME": fn.function_name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(fn.memory_size),
        "AWS_LAMBDA_LOG_GROUP_NAME": context.log_group_name,
        "AWS_LAMBDA_LOG_STREAM_NAME": context.log_stream_name,
        "AWS_REGION": fn.region,
        "AWS_DEFAULT_REGION": fn.region,
        # With AWS_LAMBDA_FUNCTION_NAME set, Powertools' Tracer would talk to an X-Ray daemon.
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
    env = {**runtime_env, **{k: str(v) for k, v in fn.environment_vars.items()}}
    if not _INVOCATION_LOCK.acquire(timeout=INVOCATION_LOCK_TIMEOUT_S):
        return _error_payload(
            "LocalAws.InvocationLockTimeout",
            f"{fn.function_name} waited {INVOCATION_LOCK_TIMEOUT_S:.0f} s for another "
            "invocation: a handler that invokes a function synchronously deadlocks here",
        )
    try:
        with _environment(env):
            try:
                handler = _load_handler(fn.handler)
            except _HandlerNotLoadable as exc:
                return _error_payload(exc.error_type, str(exc))
            try:
                result = handler(event, context)
            except Exception as exc:
                trace = traceback.format_exc()
                LOG.debug("%s raised %s", fn.function_name, trace)
                payload = {
                    "errorType": type(exc).__name__,
                    "errorMessage": str(exc),
                    "stackTrace": traceback.format_tb(exc.__traceback__),
                }
                return json.dumps(payload), True, trace
    finally:
        _INVOCATION_LOCK.release()
    try:
        return json.dumps(result), False, ""
    except (TypeError, ValueError) as exc:
        return _error_payload("Runtime.MarshalError", f"Unable to marshal response: {exc}")


def _error_payload(error_type: str, message: str) -> tuple[str, bool, str]:
    return json.dumps({"errorType": error_type, "errorMessage": message}), True, message


class _HandlerNotLoadable(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def _load_handler(handler: str) -> Callable[[Any, Any], Any]:
    """`package.module.function` (or `package/module.function`) from this checkout."""
    module_name, _, attribute = handler.replace("/", ".").rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import error in user code is the function's error, as in AWS
        raise _HandlerNotLoadable(
            "Runtime.ImportModuleError", f"Unable to import module '{module_name}': {exc}"
        ) from exc
    target = getattr(module, attribute, None)
    if not callable(target):
        raise _HandlerNotLoadable(
            "Runtime.HandlerNotFound", f"Handler '{attribute}' missing on module '{module_name}'"
        )
    return target  # type: ignore[no-any-return]


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set `values` in os.environ for the block, then put back exactly what was there."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# --- what a deployment produced -------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """An EventBridge schedule (or scheduled rule target), for the local clock to fire."""

    logical_id: str
    name: str
    expression: str
    interval_s: float | None  # rate(...) in seconds; None for cron/at expressions
    target_arn: str
    input: str | None
    enabled: bool


@dataclass(frozen=True)
class HttpRoute:
    """An API Gateway HTTP API route and the function behind it, for a local HTTP front."""

    route_key: str  # "POST /jobs/{id}/cancel" or "$default"
    function_arn: str
    authorization_type: str  # NONE, AWS_IAM, JWT, CUSTOM
    payload_format_version: str


@dataclass(frozen=True)
class DeployedResource:
    logical_id: str
    type: str
    physical_id: str  # what Ref returns
    attributes: Mapping[str, Any]
    created: bool  # False: recorded only (roles, policies, log groups, unknown types)


@dataclass
class Deployed:
    """A template deployed on LocalAws: logical ids → physical names/ARNs, resolved outputs."""

    stack_name: str
    resources: dict[str, DeployedResource]
    outputs: dict[str, Any]
    schedules: list[Schedule]
    http_routes: list[HttpRoute] = field(default_factory=list)

    def resource(self, logical_id: str, type_: str | None = None) -> DeployedResource:
        """By exact logical id, or by the construct id CDK suffixed with an 8-hex-digit hash."""
        candidates = [r for r in self.resources.values() if type_ in (None, r.type)]
        exact = [r for r in candidates if r.logical_id == logical_id]
        if exact:
            return exact[0]
        pattern = re.compile(re.escape(logical_id) + r"[0-9A-F]{8}")
        matches = [r for r in candidates if pattern.fullmatch(r.logical_id)]
        if len(matches) == 1:
            return matches[0]
        kind = f" of type {type_}" if type_ else ""
        found = ", ".join(r.logical_id for r in matches) or "none"
        raise KeyError(f"no single resource{kind} with logical id {logical_id!r} (found {found})")

    def table_name(self, logical_id: str) -> str:
        return self._physical(logical_id, "AWS::DynamoDB::Table", "AWS::DynamoDB::GlobalTable")

    def function_name(self, logical_id: str) -> str:
        return self._physical(logical_id, "AWS::Lambda::Function")

    def function_arn(self, logical_id: str) -> str:
        return str(self.resource(logical_id, "AWS::Lambda::Function").attributes["Arn"])

    def state_machine_arn(self, logical_id: str) -> str:
        return self._physical(logical_id, "AWS::StepFunctions::StateMachine")

    def topic_arn(self, logical_id: str) -> str:
        return self._physical(logical_id, "AWS::SNS::Topic")

    def secret_arn(self, logical_id: str) -> str:
        return self._physical(logical_id, "AWS::SecretsManager::Secret")

    def bucket_name(self, logical_id: str) -> str:
        return self._physical(logical_id, "AWS::S3::Bucket")

    def _physical(self, logical_id: str, *types_: str) -> str:
        for type_ in types_:
            with contextlib.suppress(KeyError):
                return self.resource(logical_id, type_).physical_id
        return self.resource(logical_id, types_[0]).physical_id  # raises, naming the id


# --- the harness ----------------------------------------------------------------------------

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

    def __init__(self, *, region: str = "us-east-1", time_scale: float = 1.0) -> None:
        if time_scale < 0:
            raise ValueError("time_scale must be ≥ 0")
        self.region = region
        self.time_scale = time_scale
        self._server: Any = None
        self._port = 0
        self._patches = _MotoPatches(time_scale)
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
            self._moto_api("reset")
            self._saved_config = self._moto_api("config")
            self._moto_api("config", {"stepfunctions": {"execute_state_machine": True}})
            self.client("iam").create_role(
                RoleName=_HARNESS_ROLE,
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
        return _Deployer(self, template, dict(parameters or {}), stack_name).run()

    # Lambda

    def invoke(self, function: str, event: Any = None) -> Any:
        """Invoke a function (name or ARN) through moto, as Step Functions does; return its
        result, or raise `LambdaInvocationError` with the handler's exception class name."""
        response = self.client("lambda").invoke(
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


# --- the deployer ---------------------------------------------------------------------------

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


class _Deployer:
    def __init__(
        self, aws: LocalAws, template: Mapping[str, Any], parameters: dict[str, Any], stack: str
    ) -> None:
        self.aws = aws
        self.template = template
        self.stack = stack
        self.context = StackContext(stack_name=stack, region=aws.region, account_id=ACCOUNT_ID)
        self.resolver = Resolver(template, self.context, parameters)
        self.role_arn = f"arn:aws:iam::{ACCOUNT_ID}:role/{_HARNESS_ROLE}"
        self.resources: dict[str, DeployedResource] = {}
        self.schedules: list[Schedule] = []
        self.integrations: dict[str, dict[str, Any]] = {}
        self.routes: list[HttpRoute] = []
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
        return Deployed(self.stack, self.resources, outputs, self.schedules, self.routes)

    def name(self, logical_id: str, limit: int, given: Any = None) -> str:
        # CloudFormation adds a random suffix; a deterministic name makes local runs repeatable.
        return str(given) if given else f"{self.stack}-{logical_id}"[:limit]

    def arn(self, service: str, resource: str) -> str:
        return f"arn:aws:{service}:{self.aws.region}:{ACCOUNT_ID}:{resource}"

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
        dynamodb = self.aws.client("dynamodb")
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
        response = self.aws.client("lambda").create_function(
            FunctionName=name,
            Runtime=props.get("Runtime", "python3.12"),
            Role=self.role_arn,
            Handler=props["Handler"],
            Code={"ZipFile": _dummy_zip()},
            Environment={"Variables": {k: str(v) for k, v in variables.items()}},
            Timeout=int(props.get("Timeout", 3)),
            MemorySize=int(props.get("MemorySize", 128)),
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
        response = self.aws.client("stepfunctions").create_state_machine(
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
        arn = str(self.aws.client("sns").create_topic(Name=name, Attributes=attributes)["TopicArn"])
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
        arn = str(
            self.aws.client("secretsmanager").create_secret(Name=name, SecretString=value)["ARN"]
        )
        return arn, {"Id": arn}

    def bucket(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = self.name(logical_id, 63, props.get("BucketName")).lower()
        s3 = self.aws.client("s3")
        if self.aws.region == "us-east-1":
            s3.create_bucket(Bucket=name)
        else:
            s3.create_bucket(
                Bucket=name, CreateBucketConfiguration={"LocationConstraint": self.aws.region}
            )
        return name, {
            "Arn": f"arn:aws:s3:::{name}",
            "DomainName": f"{name}.s3.amazonaws.com",
            "RegionalDomainName": f"{name}.s3.{self.aws.region}.amazonaws.com",
        }

    def parameter(self, logical_id: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = self.name(logical_id, 2048, props.get("Name"))
        self.aws.client("ssm").put_parameter(
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
            endpoint = f"https://{api_id}.execute-api.{self.aws.region}.amazonaws.com"
            return api_id, {"ApiEndpoint": endpoint, "ApiId": api_id}
        name = self.name(logical_id, 255)
        service = type_.split("::")[1].lower() if type_.count("::") == 2 else "cloudformation"
        return name, _AnyAttribute(self.arn(service, f"{logical_id}/{name}"))


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


__all__ = [
    "ACCOUNT_ID",
    "Deployed",
    "DeployedResource",
    "HttpRoute",
    "LambdaContext",
    "LambdaInvocationError",
    "LocalAws",
    "MotoInternalsMoved",
    "Schedule",
    "check_moto_internals",
    "rate_seconds",
]
