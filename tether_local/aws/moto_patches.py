"""The moto internals `LocalAws` patches while it is open, and the canary for when they move.

moto runs the real Step Functions definition. These private moto internals are patched (moto is
pinned; `check_moto_internals` is the canary when they move):

- `LambdaFunction._invoke_lambda` (moto wants Docker there) hands the invocation to the local
  AWS's Lambda runtime (`tether_local.aws.lambda_runtime`: a worker process per execution
  environment, or in process). An exception becomes the function error with the exception's
  class name as `errorType`, which is what Step Functions matches `Retry`/`Catch`
  `ErrorEquals` against; a timeout is `Sandbox.Timedout`.
- `WaitFunction._wait_interval` and the retrier's `time.sleep` wait `time_scale` × the
  seconds the definition asks for, so hour-long Wait states and Retry back-offs take
  milliseconds in tests.
- `Program.eval` (the execution) counts the execution's top-level `TimeoutSeconds` on the same
  scaled clock: each execution's time is the real time it has run plus the time its scaled
  Wait states and Retry intervals skipped (`_ExecutionClock`). Work (Lambda, DynamoDB) takes
  real time in AWS and locally alike, so it counts 1:1; a Wait of an hour counts an hour
  however few milliseconds it really took. Past its timeout the execution is TIMED_OUT, as in
  AWS. A wait is charged when it begins, so an execution whose timeout falls inside a Wait
  times out as that Wait begins (the same outcome, a few scaled milliseconds early); waits in
  parallel branches each count (an overestimate; the tether definition has none).
  `RetrierDecl._eval_body` is wrapped only to tell the retrier's sleep which execution it
  belongs to.

- `DynamoHandler.call_action` runs one DynamoDB request at a time. moto's tables are plain
  dicts served by a threaded server: `TransactWriteItems` deep-copies every table it touches
  as its rollback copy while other requests write to it ("dictionary changed size during
  iteration", a 500 real DynamoDB never answers for that), and a rollback would put back that
  copy over their writes. Real DynamoDB serializes writes to an item; one request at a time is
  stricter, never kinder, and moto answers each in about a millisecond.

And one of the standard library's: `os.environ` reads its items from a snapshot while the
patches are in place (`_SnapshotEnviron` says why).
"""

from __future__ import annotations

import importlib
import inspect
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from tether_local.aws.lambda_runtime import InvokeResult

MOTO_VERSION = "5.2.5"  # the internals patched below were read at this version

_LAMBDA_INVOKE = ("moto.awslambda.models", "LambdaFunction", "_invoke_lambda")
_WAIT_INTERVAL = (
    "moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function",
    "WaitFunction",
    "_wait_interval",
)
_RETRIER_MODULE = "moto.stepfunctions.parser.asl.component.common.retry.retrier_decl"
_RETRIER_BODY = (_RETRIER_MODULE, "RetrierDecl", "_eval_body")
_PROGRAM_EVAL = ("moto.stepfunctions.parser.asl.component.program.program", "Program", "eval")
_EVAL_COMPONENT = ("moto.stepfunctions.parser.asl.component.eval_component", "EvalComponent")
_THREADS_MODULE = "moto.stepfunctions.parser.utils"
_ENVIRONMENT_MODULE = "moto.stepfunctions.parser.asl.eval.environment"
_DYNAMO_DISPATCH = ("moto.dynamodb.responses", "DynamoHandler", "call_action")


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
    method(*_RETRIER_BODY, ["self", "env"])
    method(*_PROGRAM_EVAL, ["self", "env"])
    method(*_DYNAMO_DISPATCH, ["self"])
    try:
        program = getattr(importlib.import_module(_PROGRAM_EVAL[0]), _PROGRAM_EVAL[1])
        source = inspect.getsource(program.eval)
        expected = ("super().eval", "TMP_THREADS.append", "join(timeout=timeout)", "set_timed_out")
        if not all(part in source for part in expected):
            problems.append(f"{'.'.join(_PROGRAM_EVAL)} no longer runs a thread it joins")
        if not hasattr(importlib.import_module(_THREADS_MODULE), "TMP_THREADS"):
            problems.append(f"{_THREADS_MODULE}.TMP_THREADS is gone")
        component = getattr(importlib.import_module(_EVAL_COMPONENT[0]), _EVAL_COMPONENT[1])
        if not issubclass(program, component):
            problems.append(f"{'.'.join(_PROGRAM_EVAL[:2])} is no longer an EvalComponent")
    except (ImportError, AttributeError, OSError, TypeError) as exc:
        problems.append(f"{'.'.join(_PROGRAM_EVAL)} moved ({exc})")
    try:
        retrier = importlib.import_module(_RETRIER_MODULE)
        if retrier.time is not time or "time.sleep(" not in inspect.getsource(
            retrier.RetrierDecl._eval_body
        ):
            problems.append(f"{_RETRIER_MODULE}.RetrierDecl._eval_body no longer sleeps with time")
        environment = importlib.import_module(_ENVIRONMENT_MODULE)
        init = inspect.getsource(environment.Environment.__init__)
        if "program_state_event" not in init or "event_manager" not in init:
            problems.append(f"{_ENVIRONMENT_MODULE}.Environment lost program_state_event")
        for name in ("is_running", "is_frame", "set_timed_out"):
            if not hasattr(environment.Environment, name):
                problems.append(f"{_ENVIRONMENT_MODULE}.Environment.{name} is gone")
    except (ImportError, AttributeError, OSError, TypeError) as exc:
        problems.append(f"{_RETRIER_MODULE} or {_ENVIRONMENT_MODULE} moved ({exc})")
    import moto

    if moto.__version__ != MOTO_VERSION:
        problems.append(f"moto is {moto.__version__}; the patches were written for {MOTO_VERSION}")
    if problems:
        raise MotoInternalsMoved(
            "tether_local/aws/moto_patches.py patches moto internals that changed: "
            + "; ".join(problems)
        )


class _ExecutionClock:
    """One execution's time on the scaled clock (see the module docstring): real seconds since
    it started plus the seconds its scaled waits skipped. `wait_for_end` returns False when
    that time passes `timeout_s` before the execution ends."""

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s
        self._started = time.monotonic()
        self._skipped = 0.0
        self._ended = False
        self._changed = threading.Condition()

    def skip(self, seconds: float) -> None:
        with self._changed:
            self._skipped += seconds
            self._changed.notify_all()

    def end(self) -> None:
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def elapsed(self) -> float:
        return time.monotonic() - self._started + self._skipped

    def wait_for_end(self) -> bool:
        with self._changed:
            while not self._ended:
                if self.timeout_s is None:
                    self._changed.wait()
                    continue
                left = self.timeout_s - self.elapsed()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True


# One DynamoDB request at a time (see the module docstring).
_DYNAMO_LOCK = threading.RLock()

# The clock of each running execution, by its event manager (shared with its frames).
_clocks: weakref.WeakKeyDictionary[Any, _ExecutionClock] = weakref.WeakKeyDictionary()
_retrying = threading.local()  # the environment whose retrier is sleeping on this thread


def _skip(env: Any, seconds: float) -> None:
    clock = _clocks.get(getattr(env, "event_manager", None)) if env is not None else None
    if clock is not None:
        clock.skip(seconds)


class _ScaledTime:
    """Stands in for the `time` module inside moto's retrier: `sleep` is scaled, and the
    seconds it skips count on the execution's clock."""

    def __init__(self, scale: float) -> None:
        self._scale = scale

    def sleep(self, seconds: float) -> None:
        real = max(0.0, seconds * self._scale)
        _skip(getattr(_retrying, "env", None), seconds - real)
        time.sleep(real)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


Invoke = Callable[[Any, Any], InvokeResult]


class MotoPatches:
    """Applies and restores the patches; restoring puts back exactly what was there.
    `invoke(fn, event)` runs moto function `fn` (the local AWS's Lambda runtime)."""

    def __init__(self, time_scale: float, invoke: Invoke) -> None:
        self._time_scale = time_scale
        self._invoke = invoke
        self._saved: list[tuple[Any, str, Any]] = []

    def apply(self) -> None:
        check_moto_internals()
        lambda_class = _owner(_LAMBDA_INVOKE)
        wait_class = _owner(_WAIT_INTERVAL)
        retrier = importlib.import_module(_RETRIER_MODULE)
        retrier_class = _owner(_RETRIER_BODY)
        program_class = _owner(_PROGRAM_EVAL)
        component_eval = _owner(_EVAL_COMPONENT).eval
        threads = importlib.import_module(_THREADS_MODULE).TMP_THREADS
        scale = self._time_scale
        invoke = self._invoke
        original_program_eval = program_class.__dict__[_PROGRAM_EVAL[2]]
        original_retrier_body = retrier_class.__dict__[_RETRIER_BODY[2]]

        def invoke_lambda(fn: Any, event: Any = None) -> InvokeResult:
            return invoke(fn, {} if event is None else event)

        def wait_interval(_self: Any, env: Any, wait_seconds: float) -> None:
            # As moto's own: wake early when the execution stops (program_state_event is set).
            real = max(0.0, wait_seconds * scale)
            _skip(env, wait_seconds - real)
            deadline = time.monotonic() + real
            while env.is_running() and (left := deadline - time.monotonic()) > 0:
                env.program_state_event.wait(left)

        def retrier_body(self: Any, env: Any) -> None:
            previous = getattr(_retrying, "env", None)
            _retrying.env = env
            try:
                original_retrier_body(self, env)
            finally:
                _retrying.env = previous

        def program_eval(self: Any, env: Any) -> None:
            """moto's Program.eval with the timeout counted on the execution's clock."""
            if env.is_frame():
                original_program_eval(self, env)
                return
            declared = self.timeout_seconds
            timeout = None
            if declared is not None and not declared.is_default_value():
                timeout = float(declared.timeout_seconds)
            clock = _ExecutionClock(timeout)
            _clocks[env.event_manager] = clock
            env.next_state_name = self.start_at.start_at_name

            def run() -> None:
                try:
                    component_eval(self, env)
                finally:
                    clock.end()

            worker = threading.Thread(target=run, daemon=True)
            threads.append(worker)
            worker.start()
            if not clock.wait_for_end():
                env.set_timed_out()

        self._replace(lambda_class, _LAMBDA_INVOKE[2], invoke_lambda)
        self._replace(wait_class, _WAIT_INTERVAL[2], wait_interval)
        self._replace(retrier, "time", _ScaledTime(scale))
        self._replace(retrier_class, _RETRIER_BODY[2], retrier_body)
        self._replace(program_class, _PROGRAM_EVAL[2], program_eval)
        dynamo_class = _owner(_DYNAMO_DISPATCH)
        dynamo_dispatch = dynamo_class.__dict__[_DYNAMO_DISPATCH[2]]

        def dynamo_one_at_a_time(self: Any) -> Any:
            with _DYNAMO_LOCK:
                return dynamo_dispatch(self)

        self._replace(dynamo_class, _DYNAMO_DISPATCH[2], dynamo_one_at_a_time)
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


def _owner(symbol: tuple[str, ...]) -> Any:
    return getattr(importlib.import_module(symbol[0]), symbol[1])


__all__ = ["MOTO_VERSION", "MotoInternalsMoved", "MotoPatches", "check_moto_internals"]
