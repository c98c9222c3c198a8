"""`ProcessRuntime`: each Lambda execution environment is an OS process (see
`tether_local.aws.lambda_runtime` for why, and `tether_local.aws.lambda_worker` for the process).

Per function configuration there is a pool of environments. An invocation takes an idle one, or
starts one (a cold start: Init imports the handler) while fewer than `max_environments` exist,
or waits for one to come free (a small machine's stand-in for Lambda's scaling: the wait counts
against API Gateway's timeout at the front, not against the function's). An environment
serves one invocation at a time. Past the function's timeout the invocation answers
`Sandbox.Timedout` and the environment's process group is killed, as Lambda discards the
sandbox; an environment that dies (the handler exits, a segfault) answers `Runtime.ExitError`.
A changed configuration (`update_function_configuration`) gets new environments; the old ones
go once idle. `close()` kills every environment, busy or idle, and reaps it.

Each environment's process environment is `base_env` (the local AWS endpoint and fake
credentials, PATH, the checkout on PYTHONPATH; nothing else of this process's) plus what the
Lambda runtime sets and the function's variables. Its stdout and stderr go to
`<log_dir>/<function name>.log` (appended; a timeout is logged there too, as Lambda logs
"Task timed out"), or to this process's own when `log_dir` is None.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from tether_local.aws.lambda_runtime import (
    FunctionConfig,
    InvokeResult,
    RuntimeKind,
    error_result,
    runtime_variables,
    timeout_result,
)

LOG = logging.getLogger(__name__)

CHECKOUT = Path(__file__).resolve().parents[2]  # the handlers are imported from here
DEFAULT_MAX_ENVIRONMENTS = 4
MIN_INIT_TIMEOUT_S = 10.0  # Lambda's Init phase limit; a function's longer timeout extends it


class _Dead(Exception):
    """The environment's process is gone (killed, exited): it cannot take this invocation."""


class _Closed(Exception):
    """The runtime is closing: no new invocations."""


class ProcessRuntime:
    """See the module docstring. Thread-safe: every thread may invoke at once."""

    kind: RuntimeKind = "process"

    def __init__(
        self,
        *,
        base_env: Mapping[str, str],
        log_dir: Path | None = None,
        max_environments: int = DEFAULT_MAX_ENVIRONMENTS,
        python: str = sys.executable,
    ) -> None:
        if max_environments < 1:
            raise ValueError("max_environments must be ≥ 1")
        self.base_env = dict(base_env)
        self.log_dir = log_dir
        self.max_environments = max_environments
        self.python = python
        self._pools: dict[str, _Pool] = {}
        self._retired: list[_Pool] = []  # old configurations' pools, until closed
        self._lock = threading.Lock()
        self._closed = False
        self.cold_starts = 0
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)

    # invoking

    def invoke(self, config: FunctionConfig, event: Any) -> InvokeResult:
        for _attempt in range(3):  # an idle environment may have died since its last use
            try:
                pool = self._pool(config)
                environment = pool.acquire()
            except _Closed:
                return error_result("LocalAws.Closed", "the local AWS is closing")
            except _InitFailed as failed:
                return failed.result
            try:
                result, reusable = environment.invoke(config, event)
            except _Dead:
                pool.release(environment, reusable=False)
                continue
            pool.release(environment, reusable=reusable)
            return result
        return error_result("Runtime.ExitError", f"{config.name}: every environment died")

    def prewarm(self, configs: Iterable[FunctionConfig]) -> None:
        """Start one environment per function now, in the background (a deploy's first
        invocations then find them initialized, as with provisioned concurrency of one)."""
        for config in configs:
            threading.Thread(
                target=self._pool(config).prewarm, name=f"prewarm-{config.name}", daemon=True
            ).start()

    def pids(self) -> list[int]:
        """The live environments' process ids (busy or idle)."""
        with self._lock:
            pools = [*self._pools.values(), *self._retired]
        return [pid for pool in pools for pid in pool.pids()]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pools = [*self._pools.values(), *self._retired]
            self._pools.clear()
            self._retired.clear()
        for pool in pools:
            pool.close()

    def _pool(self, config: FunctionConfig) -> _Pool:
        with self._lock:
            if self._closed:
                raise _Closed
            pool = self._pools.get(config.fingerprint)
            if pool is None:
                for stale in [p for p in self._pools.values() if p.config.name == config.name]:
                    stale.retire()  # a new configuration: the old environments go when idle
                    del self._pools[stale.config.fingerprint]
                    self._retired.append(stale)
                pool = self._pools[config.fingerprint] = _Pool(self, config)
            return pool

    def _log_target(self, config: FunctionConfig) -> IO[bytes] | None:
        if self.log_dir is None:
            return None
        return (self.log_dir / f"{config.name}.log").open("ab")

    def log_line(self, config: FunctionConfig, text: str) -> None:
        """A line in the function's log, as the platform writes it (timeouts)."""
        target = self._log_target(config)
        if target is None:
            sys.stderr.write(text + "\n")
            return
        with target:
            target.write(text.encode() + b"\n")


class _InitFailed(Exception):
    def __init__(self, result: InvokeResult) -> None:
        super().__init__(result[2])
        self.result = result


class _Pool:
    """The environments of one function configuration."""

    def __init__(self, runtime: ProcessRuntime, config: FunctionConfig) -> None:
        self.runtime = runtime
        self.config = config
        self._idle: list[_Environment] = []
        self._busy: set[_Environment] = set()
        self._starting = 0
        self._retired = False
        self._closed = False
        self._changed = threading.Condition()

    def acquire(self) -> _Environment:
        with self._changed:
            while True:
                if self._closed:
                    raise _Closed
                if self._idle:
                    environment = self._idle.pop()
                    self._busy.add(environment)
                    return environment
                if len(self._busy) + self._starting < self.runtime.max_environments:
                    self._starting += 1
                    break
                self._changed.wait()
        fresh: _Environment | None = None
        try:
            fresh = _Environment.start(self.runtime, self.config)  # a cold start
            fresh.wait_ready()
        except _InitFailed:
            if fresh is not None:
                fresh.discard()
            raise
        finally:
            with self._changed:
                self._starting -= 1
                closed = self._closed
                if fresh is not None and fresh.alive and not closed:
                    self._busy.add(fresh)
                self._changed.notify_all()
        if closed:
            fresh.discard()
            raise _Closed
        return fresh

    def prewarm(self) -> None:
        with contextlib.suppress(_Closed, _InitFailed):
            environment = self.acquire()
            self.release(environment, reusable=True)

    def release(self, environment: _Environment, *, reusable: bool) -> None:
        with self._changed:
            self._busy.discard(environment)
            keep = reusable and environment.alive and not (self._closed or self._retired)
            if keep:
                self._idle.append(environment)
            self._changed.notify_all()
        if not keep:
            environment.discard()

    def retire(self) -> None:
        with self._changed:
            self._retired = True
            idle, self._idle = self._idle, []
        for environment in idle:
            environment.discard()

    def pids(self) -> list[int]:
        with self._changed:
            return [e.pid for e in (*self._idle, *self._busy) if e.alive]

    def close(self) -> None:
        with self._changed:
            self._closed = True
            idle, busy = self._idle, list(self._busy)
            self._idle = []
            self._changed.notify_all()
        for environment in idle:
            environment.discard()
        for environment in busy:  # its invoking thread reads the end of file, then discards it
            environment.kill()


class _Environment:
    """One worker process and its two pipes."""

    def __init__(self, config: FunctionConfig, process: subprocess.Popen[bytes], to_worker: int,
                 from_worker: int, runtime: ProcessRuntime) -> None:  # fmt: skip
        self.config = config
        self.process = process
        self.pid = process.pid
        self._to_worker = to_worker
        self._from_worker = from_worker
        self._runtime = runtime
        self._buffer = b""
        self._lock = threading.Lock()
        self._killed = False
        self._fds_closed = False

    @classmethod
    def start(cls, runtime: ProcessRuntime, config: FunctionConfig) -> _Environment:
        stream = f"{datetime.date.today():%Y/%m/%d}/[$LATEST]{uuid.uuid4().hex}"
        env = {**runtime.base_env, **runtime_variables(config, stream)}
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        log = runtime._log_target(config)
        try:
            process = subprocess.Popen(
                [runtime.python, "-m", "tether_local.aws.lambda_worker",
                 str(to_worker_r), str(from_worker_w)],
                env=env,
                cwd=CHECKOUT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(to_worker_r, from_worker_w),
                start_new_session=True,  # its own process group: a timeout kills all of it
            )  # fmt: skip
        except BaseException:
            for fd in (to_worker_r, to_worker_w, from_worker_r, from_worker_w):
                os.close(fd)
            raise
        finally:
            if log is not None:
                log.close()
        os.close(to_worker_r)
        os.close(from_worker_w)
        with runtime._lock:
            runtime.cold_starts += 1
        return cls(config, process, to_worker_w, from_worker_r, runtime)

    @property
    def alive(self) -> bool:
        return not self._killed and self.process.poll() is None

    def wait_ready(self) -> None:
        """The Init phase: the handler imported, or `_InitFailed` with Lambda's error."""
        limit = max(MIN_INIT_TIMEOUT_S, self.config.timeout_s)
        try:
            message = self._read(time.monotonic() + limit)
        except _Dead:
            raise _InitFailed(
                error_result("Runtime.ExitError", f"{self.config.name}: exited during Init")
            ) from None
        if message is None:
            self.kill()
            raise _InitFailed(timeout_result("init", limit))
        if "init_error" in message:
            error = message["init_error"]
            raise _InitFailed(error_result(str(error["errorType"]), str(error["errorMessage"])))

    def invoke(self, config: FunctionConfig, event: Any) -> tuple[InvokeResult, bool]:
        """Run one invocation; returns its result and whether this environment may serve
        another. Raises `_Dead` when the process was already gone (nothing was run)."""
        request_id = str(uuid.uuid4())
        request = {
            "request_id": request_id,
            "arn": config.arn,
            "deadline_in_s": config.timeout_s,
            "event": event,
        }
        deadline = time.monotonic() + config.timeout_s
        try:
            self._write((json.dumps(request) + "\n").encode())
        except OSError:
            raise _Dead from None
        try:
            message = self._read(deadline)
        except _Dead:
            code = self.process.poll()
            return error_result(
                "Runtime.ExitError",
                f"RequestId: {request_id} Error: Runtime exited with error: exit status {code}",
            ), False
        if message is None:
            self.kill()
            when = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
            self._runtime.log_line(
                config,
                f"{when} {request_id} Task timed out after {config.timeout_s:.2f} seconds",
            )
            LOG.warning("%s timed out after %.2f s", config.name, config.timeout_s)
            return timeout_result(request_id, config.timeout_s), False
        return (str(message["payload"]), bool(message["errored"]), ""), True

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._to_worker, view)
            view = view[written:]

    def _read(self, deadline: float) -> dict[str, Any] | None:
        """The worker's next message, or None past `deadline`; `_Dead` at end of file."""
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                ready, _, _ = select.select([self._from_worker], [], [], left)
            except (OSError, ValueError):
                raise _Dead from None
            if not ready:
                continue
            try:
                chunk = os.read(self._from_worker, 1 << 16)
            except OSError:
                raise _Dead from None
            if not chunk:
                raise _Dead
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        parsed: dict[str, Any] = json.loads(line)
        return parsed

    def kill(self) -> None:
        """SIGKILL the environment's process group and reap it (idempotent). Its pipes stay
        open: a thread still reading from it sees the end of file, not a reused descriptor."""
        with self._lock:
            if self._killed:
                return
            self._killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)

    def discard(self) -> None:
        """Kill it and close its pipes: only by whoever holds it (no reader left)."""
        self.kill()
        with self._lock:
            if self._fds_closed:
                return
            self._fds_closed = True
        for fd in (self._to_worker, self._from_worker):
            with contextlib.suppress(OSError):
                os.close(fd)


__all__ = ["CHECKOUT", "DEFAULT_MAX_ENVIRONMENTS", "ProcessRuntime"]
