"""The moto internals `LocalAws` patches while it is open, and the canary for when they move.

moto runs the real Step Functions definition. Three private moto internals are patched (moto is
pinned; `check_moto_internals` is the canary when they move):

- `LambdaFunction._invoke_lambda` (moto wants Docker there) runs the Python handler named by the
  function's `Handler` in process (`tether_local.lambda_runtime`). An exception becomes the
  function error with the exception's class name as `errorType`, which is what Step Functions
  matches `Retry`/`Catch` `ErrorEquals` against.
- `WaitFunction._wait_interval` and the retrier's `time.sleep` wait `time_scale` × the
  seconds the definition asks for, so hour-long Wait states and Retry back-offs take
  milliseconds in tests.

And one of the standard library's: `os.environ` reads its items from a snapshot while the
patches are in place (`_SnapshotEnviron` says why).
"""

from __future__ import annotations

import importlib
import inspect
import os
import time
from typing import Any

from tether_local.lambda_runtime import invoke_in_process

MOTO_VERSION = "5.2.5"  # the internals patched below were read at this version

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
            "tether_local/moto_patches.py patches moto internals that changed: "
            + "; ".join(problems)
        )


class _ScaledTime:
    """Stands in for the `time` module inside moto's retrier: `sleep` is scaled."""

    def __init__(self, scale: float) -> None:
        self._scale = scale

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds * self._scale))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class MotoPatches:
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
            return invoke_in_process(fn, {} if event is None else event)

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


__all__ = ["MOTO_VERSION", "MotoInternalsMoved", "MotoPatches", "check_moto_internals"]
