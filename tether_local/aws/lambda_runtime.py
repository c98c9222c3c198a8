"""Lambda, locally: the execution environments `LocalAws` runs the deployed functions in.

Two runtimes keep one contract (moto's `_invoke_lambda`: response payload, errored, log text)
and the same limits; they differ in what they isolate.

`ProcessRuntime` (`tether_local.aws.lambda_process`; `LocalAws(runtime="process")`, the default, and
what the local stack, the demo, `tether local up` and the e2e tests run): one OS process per
execution environment, as Lambda gives each environment its own sandbox. A small worker
(`tether_local.aws.lambda_worker`) starts with the function's environment as its process
environment, imports the handler once (the cold start) and serves one invocation at a time; a
function's pool grows an environment whenever all of its environments are busy, so invocations
run concurrently and race as they do in AWS. Module caches, Powertools' logger and metrics,
settings read from the environment and `os.environ` itself belong to one environment. The
workers reach moto (`AWS_ENDPOINT_URL`) and the simulators over loopback, exactly as the
handlers did in process. Their stdout and stderr (Powertools' JSON lines, EMF, tracebacks) go
to `<log_dir>/<function>.log`.

`InProcessRuntime` (`LocalAws(runtime="in_process")`) runs handlers in this process. It exists
for the tests that hand the handlers Python objects — `functions.adapters.factory.install_hooks`
with a fake clock, an `httpx.MockTransport` into an in-process simulator and no-op sleeps
(`tests/integration/supervision_harness.py`), monkeypatched dependencies, and the benchmarks'
meters through `wrap_handlers` (`bench/lib/local_run.py`). Carrying those into workers would
mean rebuilding each as a service (a clock file, simulators on sockets, meters reporting back)
for tests whose point is determinism; keeping them in process keeps one harness (`LocalAws`)
with one switch. It keeps ONE lock around invocations, on purpose: one interpreter has one
module table, one Powertools logger and metrics buffer, one `sys.stdout` and one `os.environ`,
so no two invocations can run at once in it without sharing exactly what separate environments
never share (a metrics flush would carry another invocation's metrics). Concurrency and races
between the monitor, the lifecycle and the API are what `ProcessRuntime` is for, and are tested
there. A handler must therefore not invoke another function synchronously in process (it would
wait on the lock, which gives up after `INVOCATION_LOCK_TIMEOUT_S`).

Limits, in both runtimes:
- An invocation that runs past its function's `Timeout` ends with Lambda's timeout error: an
  unhandled function error whose `errorType` is `Sandbox.Timedout` (`TIMEOUT_ERROR_TYPE`), which
  Step Functions matches in `Retry`/`Catch` (and `States.ALL`, `States.TaskFailed`). The
  timed-out environment stops working: `ProcessRuntime` kills the worker and its process group
  (Lambda discards the sandbox; the next invocation cold-starts); `InProcessRuntime` raises
  `SandboxKilled` (a BaseException: handlers' `except Exception` cannot swallow it) in the
  handler's thread, which stops it at its next Python instruction, once a blocking call it is
  in has returned.
- Timeouts count real seconds, unscaled. `LocalAws.time_scale` scales the Step Functions
  timers (Wait states, Retry intervals, the execution's TimeoutSeconds: time in which nothing
  happens); handler code always runs at real speed (its I/O, and in the local stack its
  back-off sleeps), so nowhere is a handler's time scaled, and its configured Timeout is the
  real limit, as in AWS.
- The Init phase (import of the handler's module) is not counted in the invocation's timeout,
  as Lambda counts it separately; it is bounded by the function's timeout too.

Sources for the timeout error: the AWS Lambda Developer Guide, "Troubleshoot invocation issues
in Lambda" (the `Sandbox.Timedout` error type), and an AWS AppSync community report
(https://github.com/aws/aws-appsync-community/issues/386), where a function timeout surfaces
as `unhandledErrorType: "Sandbox.Timedout"`; Step Functions' older
documentation ("Handle Lambda service exceptions") calls the same unhandled error
`Lambda.Unknown`, the name it used when older runtimes sent no `errorType`.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import logging
import os
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

LOG = logging.getLogger(__name__)

INVOCATION_LOCK_TIMEOUT_S = 120.0
TIMEOUT_ERROR_TYPE = "Sandbox.Timedout"
RuntimeKind = Literal["process", "in_process"]
RUNTIME_KINDS: tuple[RuntimeKind, ...] = ("process", "in_process")

Handler = Callable[[Any, Any], Any]
InvokeResult = tuple[str, bool, str]  # moto's contract: payload text, errored, log text
_wrappers: list[Callable[[Handler], Handler]] = []


@dataclass(frozen=True)
class FunctionConfig:
    """What an execution environment is made from: the function's configuration at the time of
    the invocation (a changed configuration means new environments, as in Lambda)."""

    name: str
    arn: str
    handler: str
    runtime: str
    memory_mb: int
    timeout_s: float
    region: str
    environment: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_moto(cls, fn: Any) -> FunctionConfig:
        return cls(
            name=str(fn.function_name),
            arn=str(fn.function_arn),
            handler=str(fn.handler),
            runtime=str(fn.run_time),
            memory_mb=int(fn.memory_size),
            timeout_s=float(fn.timeout),
            region=str(fn.region),
            environment={str(k): str(v) for k, v in (fn.environment_vars or {}).items()},
        )

    @property
    def fingerprint(self) -> str:
        """Environments are reused only for exactly this configuration."""
        return json.dumps(
            [self.arn, self.handler, self.runtime, self.memory_mb, self.timeout_s,
             sorted(self.environment.items())],
        )  # fmt: skip


def runtime_variables(config: FunctionConfig, log_stream_name: str) -> dict[str, str]:
    """The variables the Lambda runtime sets in every environment, then the function's own."""
    values = {
        "_HANDLER": config.handler,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{config.runtime}",
        "AWS_LAMBDA_FUNCTION_NAME": config.name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(config.memory_mb),
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{config.name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": log_stream_name,
        "AWS_REGION": config.region,
        "AWS_DEFAULT_REGION": config.region,
        # With AWS_LAMBDA_FUNCTION_NAME set, Powertools' Tracer would talk to an X-Ray daemon.
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
    values.update(config.environment)
    return values


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


class LambdaRuntime(Protocol):
    """What `LocalAws` needs of a runtime."""

    kind: RuntimeKind

    def invoke(self, config: FunctionConfig, event: Any) -> InvokeResult: ...

    def prewarm(self, configs: list[FunctionConfig]) -> None: ...

    def close(self) -> None: ...


# --- results --------------------------------------------------------------------------------


def error_result(error_type: str, message: str, trace: list[str] | None = None) -> InvokeResult:
    payload: dict[str, Any] = {"errorType": error_type, "errorMessage": message}
    if trace is not None:
        payload["stackTrace"] = trace
    return json.dumps(payload), True, message


def timeout_result(request_id: str, timeout_s: float) -> InvokeResult:
    """What Lambda answers for an invocation past its timeout (Sandbox.Timedout)."""
    return error_result(
        TIMEOUT_ERROR_TYPE,
        f"RequestId: {request_id} Error: Task timed out after {timeout_s:.2f} seconds",
    )


def exception_result(exc: BaseException) -> InvokeResult:
    """An unhandled exception: its class name is the error type Retry/Catch match."""
    text = "".join(traceback.format_exception(exc))
    payload = {
        "errorType": type(exc).__name__,
        "errorMessage": str(exc),
        "stackTrace": traceback.format_tb(exc.__traceback__),
    }
    return json.dumps(payload), True, text


def response_result(result: Any) -> InvokeResult:
    try:
        return json.dumps(result), False, ""
    except (TypeError, ValueError) as exc:
        return error_result("Runtime.MarshalError", f"Unable to marshal response: {exc}")


# --- handlers -------------------------------------------------------------------------------


class HandlerNotLoadable(Exception):
    """The function's `Handler` names no importable callable; `error_type` is Lambda's."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def load_handler(handler: str) -> Handler:
    """`package.module.function` (or `package/module.function`) from this checkout."""
    module_name, _, attribute = handler.replace("/", ".").rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import error in user code is the function's error, as in AWS
        raise HandlerNotLoadable(
            "Runtime.ImportModuleError", f"Unable to import module '{module_name}': {exc}"
        ) from exc
    target = getattr(module, attribute, None)
    if not callable(target):
        raise HandlerNotLoadable(
            "Runtime.HandlerNotFound", f"Handler '{attribute}' missing on module '{module_name}'"
        )
    return target  # type: ignore[no-any-return]


def wrap_handlers(wrap: Callable[[Handler], Handler]) -> Callable[[], None]:
    """Run every handler invoked in process from now on as `wrap(handler)`; returns what undoes
    it. The seam the benchmarks meter invocations through (`bench/lib/local_run.py`); it sees
    only `InProcessRuntime`'s invocations (a worker process has its own modules)."""
    _wrappers.append(wrap)

    def undo() -> None:
        with contextlib.suppress(ValueError):
            _wrappers.remove(wrap)

    return undo


# --- in process -----------------------------------------------------------------------------


class SandboxKilled(BaseException):
    """Raised inside a timed-out in-process handler: its sandbox is gone, it must stop."""


_INVOCATION_LOCK = threading.Lock()


class InProcessRuntime:
    """Handlers in this process, one invocation at a time (the module docstring says why),
    each on a thread of its own so that its timeout can end it."""

    kind: RuntimeKind = "in_process"

    def invoke(self, config: FunctionConfig, event: Any) -> InvokeResult:
        context = LambdaContext(
            function_name=config.name,
            invoked_function_arn=config.arn,
            memory_limit_in_mb=config.memory_mb,
            timeout_s=config.timeout_s,
        )
        env = runtime_variables(config, context.log_stream_name)
        call = _InProcessCall(config, event, context, env)
        thread = threading.Thread(target=call.run, name=f"lambda-{config.name}", daemon=True)
        thread.start()
        if not call.started.wait(INVOCATION_LOCK_TIMEOUT_S):
            call.abandon()
            return error_result(
                "LocalAws.InvocationLockTimeout",
                f"{config.name} waited {INVOCATION_LOCK_TIMEOUT_S:.0f} s for another "
                "invocation: a handler that invokes a function synchronously deadlocks here",
            )
        if call.done.wait(config.timeout_s):
            assert call.result is not None
            return call.result
        call.kill(thread)
        LOG.warning("%s timed out after %.2f s", config.name, config.timeout_s)
        return timeout_result(context.aws_request_id, config.timeout_s)

    def prewarm(self, configs: list[FunctionConfig]) -> None:
        """Nothing to start: handlers are imported on first use."""

    def close(self) -> None:
        """Nothing to stop: a killed handler unwinds on its own thread."""


class _InProcessCall:
    """One in-process invocation on its own thread. `kill` raises SandboxKilled in that thread
    at most once, and only while the handler (import included) runs; the thread disarms a
    pending kill before it restores os.environ, so a late kill cannot cut the restore short."""

    def __init__(
        self, config: FunctionConfig, event: Any, context: LambdaContext, env: dict[str, str]
    ) -> None:
        self.config = config
        self.event = event
        self.context = context
        self.env = env
        self.started = threading.Event()
        self.done = threading.Event()
        self.result: InvokeResult | None = None
        self._state_lock = threading.Lock()
        self._abandoned = False
        self._kill_requested = False
        self._killable = False
        self._injected = False

    def run(self) -> None:
        with _INVOCATION_LOCK:
            with self._state_lock:
                if self._abandoned:
                    return
                self.started.set()
            saved = {key: os.environ.get(key) for key in self.env}
            result: InvokeResult | None = None
            try:
                try:
                    os.environ.update(self.env)
                    if self._arm():
                        # A fresh deadline: the wait for the lock is not the invocation's time.
                        self.context._deadline = time.monotonic() + self.config.timeout_s
                        result = self._call()
                except SandboxKilled:
                    result = None
                self._disarm()
            except SandboxKilled:  # delivered between the handler's end and the disarm
                result = None
                self._disarm()
            _restore(saved)
            self.result = result
            self.done.set()

    def _call(self) -> InvokeResult:
        try:
            handler = load_handler(self.config.handler)
        except HandlerNotLoadable as exc:
            return error_result(exc.error_type, str(exc))
        for wrap in list(_wrappers):
            handler = wrap(handler)
        try:
            result = handler(self.event, self.context)
        except SandboxKilled:
            raise
        except Exception as exc:
            LOG.debug("%s raised %s", self.config.name, traceback.format_exc())
            return exception_result(exc)
        return response_result(result)

    def _arm(self) -> bool:
        with self._state_lock:
            self._killable = not self._kill_requested
            return self._killable

    def _disarm(self) -> None:
        with self._state_lock:
            self._killable = False
            if self._injected:  # clear it if it is still pending (a no-op once delivered)
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(threading.get_ident()), None
                )

    def abandon(self) -> None:
        with self._state_lock:
            self._abandoned = True

    def kill(self, thread: threading.Thread) -> None:
        with self._state_lock:
            self._kill_requested = True
            if self._killable and not self._injected and thread.ident is not None:
                self._injected = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(thread.ident), ctypes.py_object(SandboxKilled)
                )


def _restore(saved: Mapping[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


__all__ = [
    "INVOCATION_LOCK_TIMEOUT_S",
    "RUNTIME_KINDS",
    "TIMEOUT_ERROR_TYPE",
    "FunctionConfig",
    "Handler",
    "HandlerNotLoadable",
    "InProcessRuntime",
    "InvokeResult",
    "LambdaContext",
    "LambdaRuntime",
    "RuntimeKind",
    "SandboxKilled",
    "error_result",
    "exception_result",
    "load_handler",
    "response_result",
    "runtime_variables",
    "timeout_result",
    "wrap_handlers",
]
