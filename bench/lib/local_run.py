"""Watch the local stack from inside, for the benchmarks that run it.

`StackRecorder` records, while installed:
- every Lambda invocation the local AWS runs in process (`recorded_stack` chooses the
  in-process runtime; `tether_local.aws.lambda_runtime` runs each handler through the wrapper
  installed here with `wrap_handlers`): function, memory size
  from the template, wall time, the AWS calls made inside it (botocore events on boto3's
  default session, counted only on the invoking thread, so the harness's own calls stay out)
  with the time spent in them and estimated DynamoDB units (`bench.lib.meter`), the Vast /
  Cloudflare calls (through the adapters' transport hook) with their time, the EMF metrics it
  printed and the bytes it logged;
- every heartbeat that reached the API (the front's heartbeat observer), with its arrival time;
- the demo's timeline, on one absolute clock (`timeline`).

Install it before the stack starts (clients built earlier would miss the botocore hooks), and
`attach(stack)` once it has started.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.lib.meter import AwsMeter

# The invocation being recorded. A ContextVar, not a thread-local: the monitor's pools run each
# task in a copy of the caller's context, so calls made on pool threads count for it too.
_current: contextvars.ContextVar[Invocation | None] = contextvars.ContextVar(
    "tether_bench_invocation", default=None
)
INDEX_KEYS = ("active_pk", "list_pk")  # attributes that put an item into the table's GSIs


@dataclass
class Invocation:
    function: str
    memory_mb: int
    started_at: float
    wall_s: float = 0.0
    aws_calls: Counter[str] = field(default_factory=Counter)
    aws_s: float = 0.0
    provider_calls: Counter[str] = field(default_factory=Counter)
    provider_s: float = 0.0
    read_units: float = 0.0
    write_units: float = 0.0
    metrics: set[str] = field(default_factory=set)  # "namespace/name/dim=value,…"
    log_bytes: int = 0
    errored: bool = False

    @property
    def own_s(self) -> float:
        """Wall time minus the time spent waiting for moto and the simulators."""
        return max(0.0, self.wall_s - self.aws_s - self.provider_s)

    def estimated_s(self, aws_call_s: float, provider_call_s: dict[str, float]) -> float:
        """What the invocation would bill in Lambda: its own time plus an assumed round trip
        per remote call (the local stand-ins answer faster or slower than the real services)."""
        remote = sum(n * provider_call_s.get(p, 0.0) for p, n in self.provider_calls.items())
        return self.own_s + sum(self.aws_calls.values()) * aws_call_s + remote


@dataclass
class Heartbeat:
    at: float
    job_id: str
    generation: int
    phase: str | None
    step: int | None


@dataclass
class TimelineEntry:
    at: float  # absolute (epoch seconds)
    source: str  # "demo", "agent" or a timeline event kind ("dead", "rented", …)
    text: str


class _GatedMeter(AwsMeter):
    """AwsMeter that counts only calls made inside a recorded invocation, and times them."""

    def _before(self, params: Any, model: Any, context: Any, **kwargs: Any) -> None:
        if _current.get() is None:
            return
        context["tether_bench_started"] = time.perf_counter()
        super()._before(params=params, model=model, context=context, **kwargs)

    def _after(self, http_response: Any, parsed: Any, model: Any, context: Any, **kw: Any) -> None:
        invocation: Invocation | None = _current.get()
        if invocation is None:
            return
        reads, writes = self.read_units, self.write_units
        super()._after(http_response=http_response, parsed=parsed, model=model, context=context)
        invocation.aws_calls[f"{model.service_model.service_name}.{model.name}"] += 1
        invocation.read_units += self.read_units - reads
        invocation.write_units += self.write_units - writes
        started = context.get("tether_bench_started")
        if started is not None:
            invocation.aws_s += time.perf_counter() - started


class _CountingTransport(httpx.BaseTransport):
    """The adapters' real HTTP transport, counting and timing calls per invocation."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        invocation: Invocation | None = _current.get()
        started = time.perf_counter()
        try:
            response = self.inner.handle_request(request)
            response.read()
            return response
        finally:
            if invocation is not None:
                invocation.provider_calls[self.provider] += 1
                invocation.provider_s += time.perf_counter() - started


class _LogCounter(io.TextIOBase):
    """Stands in for the functions' log stream: counts the bytes each invocation logs."""

    def write(self, text: str) -> int:
        invocation: Invocation | None = _current.get()
        if invocation is not None:
            invocation.log_bytes += len(text.encode())
        return len(text)


def emf_metrics(output: str) -> tuple[set[str], int]:
    """Distinct metrics (namespace, name, dimension values) in EMF lines, and their bytes."""
    found: set[str] = set()
    size = 0
    for line in output.splitlines():
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if not isinstance(document, dict) or "_aws" not in document:
            continue
        size += len(line.encode()) + 1
        for directive in document["_aws"].get("CloudWatchMetrics", []):
            namespace = directive.get("Namespace", "")
            for dimension_set in directive.get("Dimensions", [[]]):
                dims = ",".join(f"{d}={document.get(d)}" for d in dimension_set)
                for metric in directive.get("Metrics", []):
                    found.add(f"{namespace}/{metric['Name']}/{dims}")
    return found, size


class StackRecorder:
    """See the module docstring."""

    def __init__(self) -> None:
        self.invocations: list[Invocation] = []
        self.heartbeats: list[Heartbeat] = []
        self.timeline_entries: list[TimelineEntry] = []
        self._meter = _GatedMeter(index_keys=INDEX_KEYS)
        self._lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []
        self._run_started_at: float | None = None

    # installing

    def install(self) -> StackRecorder:
        from tether_local.aws.lambda_runtime import wrap_handlers

        self._meter.install(time_moto=False)
        self._undo.append(self._meter.uninstall)
        self._undo.append(wrap_handlers(self._wrap))
        return self

    def attach(self, stack: Any) -> None:
        """Once the stack runs: heartbeats from its front, provider calls through the hook
        (installing hooks clears the adapters' cached clients), log lines counted."""
        import functions.observability as observability
        from functions.adapters import factory

        assert stack.front is not None
        stack.front.observe_heartbeats(self._heartbeat)
        factory.install_hooks(factory.Hooks(clock=time.time, transport=_CountingTransport))
        handler = observability.logger.registered_handler
        stream = getattr(handler, "stream", None)
        if stream is not None:
            handler.stream = _LogCounter()  # type: ignore[attr-defined]
            self._undo.append(lambda: setattr(handler, "stream", stream))

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def __enter__(self) -> StackRecorder:
        return self.install()

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()

    # recording

    def _wrap(self, target: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def recorded(event: Any, context: Any) -> Any:
            invocation = Invocation(
                function=str(context.function_name),
                memory_mb=int(context.memory_limit_in_mb),
                started_at=time.time(),
            )
            printed = io.StringIO()
            token = _current.set(invocation)
            started = time.perf_counter()
            try:
                with contextlib.redirect_stdout(printed):  # EMF lines are printed
                    return target(event, context)
            except Exception:
                invocation.errored = True
                raise
            finally:
                invocation.wall_s = time.perf_counter() - started
                _current.reset(token)
                invocation.metrics, emf_bytes = emf_metrics(printed.getvalue())
                invocation.log_bytes += emf_bytes
                with self._lock:
                    self.invocations.append(invocation)

        return recorded

    def _heartbeat(self, body: dict[str, Any]) -> None:
        step = body.get("step")
        beat = Heartbeat(
            at=time.time(),
            job_id=str(body.get("job_id")),
            generation=int(body.get("generation") or 0),
            phase=body.get("phase") if isinstance(body.get("phase"), str) else None,
            step=step if isinstance(step, int) else None,
        )
        with self._lock:
            self.heartbeats.append(beat)

    def timeline(self, elapsed_s: float, source: str, text: str) -> None:
        """A demo `Timeline`: its lines on an absolute clock. The demo's own lines are stamped
        when said, which fixes the run's start; stored events carry their own time."""
        now = time.time()
        if source in ("demo", "agent"):
            self._run_started_at = now - elapsed_s
            at = now
        else:
            at = (self._run_started_at or now - elapsed_s) + elapsed_s
        with self._lock:
            self.timeline_entries.append(TimelineEntry(at=at, source=source, text=text))

    def mark(self) -> int:
        """A position in the invocation list (to split phases of a run)."""
        with self._lock:
            return len(self.invocations)


def executions(stack: Any) -> list[dict[str, Any]]:
    """Every lifecycle execution, oldest first: action, status, window (epoch seconds) and its
    state transitions (states entered, plus retried task attempts: AWS bills retries too)."""
    sfn = stack.aws.client("stepfunctions")
    found = []
    listed = sfn.list_executions(stateMachineArn=stack.state_machine_arn(), maxResults=1000)
    for item in listed["executions"]:
        arn = item["executionArn"]
        described = sfn.describe_execution(executionArn=arn)
        kinds = [e["type"] for e in stack.aws.execution_history(arn)]
        entered = sum(1 for k in kinds if k.endswith("StateEntered"))
        task_states = sum(1 for k in kinds if k == "TaskStateEntered")
        attempts = sum(1 for k in kinds if k in ("LambdaFunctionScheduled", "TaskScheduled"))
        stop = described.get("stopDate")
        found.append(
            {
                "arn": arn,
                "action": json.loads(described.get("input") or "{}").get("action", "?"),
                "status": described["status"],
                "start": described["startDate"].timestamp(),
                "stop": stop.timestamp() if stop is not None else None,
                "transitions": entered + max(0, attempts - task_states),
            }
        )
    return sorted(found, key=lambda e: e["start"])


@contextlib.contextmanager
def recorded_stack(config: Any) -> Iterator[tuple[Any, StackRecorder]]:
    """A started `LocalStack(config)` with a `StackRecorder` installed before and attached.

    Its Lambda runtime is the in-process one: the recorder's meters (botocore events, the
    adapters' transport hook, the handler wrapper) live in this process, and a worker process
    per execution environment would take its invocations out of their sight."""
    from tether_local.stack import LocalStack

    config = config.model_copy(update={"lambda_runtime": "in_process"})
    with StackRecorder() as recorder, LocalStack(config) as stack:
        recorder.attach(stack)
        yield stack, recorder
