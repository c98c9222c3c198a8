"""Lambda, in process: `invoke_in_process` runs the Python handler a moto function names.

The handler is imported from this checkout (`load_handler`), so the code that runs is the code
under test, not a bundle. Each invocation sets the function's variables (and the ones the Lambda
runtime sets) in `os.environ`, runs the handler and restores `os.environ` exactly, all under one
process-wide lock. Invocations are therefore serialized, like one Lambda sandbox; variables never
leak from one function into the next. Two consequences: a handler must not synchronously invoke
another function (that would wait on the lock; the lock gives up after
`INVOCATION_LOCK_TIMEOUT_S` with a clear error), and module-level caches in code shared by
several functions are shared too (in AWS each function has its own process).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

LOG = logging.getLogger(__name__)

INVOCATION_LOCK_TIMEOUT_S = 120.0

Handler = Callable[[Any, Any], Any]
_wrappers: list[Callable[[Handler], Handler]] = []


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


def invoke_in_process(fn: Any, event: Any) -> tuple[str, bool, str]:
    """Run moto function `fn`'s handler on `event`, with the function's environment, under the
    invocation lock. moto's `_invoke_lambda` contract: (response payload, errored, log text)."""
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
                handler = load_handler(fn.handler)
            except HandlerNotLoadable as exc:
                return _error_payload(exc.error_type, str(exc))
            for wrap in _wrappers:
                handler = wrap(handler)
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
    """Run every handler invoked from now on as `wrap(handler)`; returns what undoes it.

    The seam the benchmarks meter invocations through (`bench/lib/local_run.py`)."""
    _wrappers.append(wrap)

    def undo() -> None:
        with contextlib.suppress(ValueError):
            _wrappers.remove(wrap)

    return undo


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


__all__ = [
    "INVOCATION_LOCK_TIMEOUT_S",
    "Handler",
    "HandlerNotLoadable",
    "LambdaContext",
    "invoke_in_process",
    "load_handler",
    "wrap_handlers",
]
