"""One Lambda execution environment: the process `tether_local.aws.lambda_process` starts per
environment (`python -m tether_local.aws.lambda_worker IN_FD OUT_FD`).

Its process environment is the function's (what the Lambda runtime sets, the function's
variables, the endpoints of the local AWS) and nothing of the parent's. It imports the handler
named by `_HANDLER` once, the Init phase, then serves invocations one at a time until its input
closes or it is killed (a timeout: the parent kills the whole process group).

Protocol, one JSON object per line on two pipes (stdout and stderr are the function's log):
- parent → worker: `{"request_id", "arn", "deadline_in_s", "event"}`;
- worker → parent: first `{"ready": true}` or `{"init_error": {"errorType", "errorMessage"}}`
  (then it exits), then per invocation `{"payload": <response or error JSON text>,
  "errored": bool}`.

Around each invocation it logs what Lambda's platform logs: `START`, `END` and `REPORT` lines
(duration, memory size, max memory used, init duration on the first invocation).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

from tether_local.aws.lambda_runtime import (
    HandlerNotLoadable,
    LambdaContext,
    exception_result,
    load_handler,
    response_result,
)


def _send(out: IO[bytes], message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def _log(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _peak_rss_mb() -> int:
    """This process's peak resident memory (VmHWM: reset at exec, unlike ru_maxrss)."""
    try:
        with Path("/proc/self/status").open(encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def serve(source: IO[bytes], out: IO[bytes]) -> int:
    env = os.environ
    started = time.perf_counter()
    try:
        handler = load_handler(env["_HANDLER"])
    except HandlerNotLoadable as exc:
        traceback.print_exc()
        _send(out, {"init_error": {"errorType": exc.error_type, "errorMessage": str(exc)}})
        return 1
    init_ms: float | None = (time.perf_counter() - started) * 1000
    _send(out, {"ready": True})
    memory_mb = int(env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
    for line in source:
        request = json.loads(line)
        request_id = str(request["request_id"])
        context = LambdaContext(
            function_name=env.get("AWS_LAMBDA_FUNCTION_NAME", ""),
            invoked_function_arn=str(request["arn"]),
            memory_limit_in_mb=memory_mb,
            timeout_s=float(request["deadline_in_s"]),
            aws_request_id=request_id,
            log_stream_name=env.get("AWS_LAMBDA_LOG_STREAM_NAME", ""),
        )
        _log(f"START RequestId: {request_id} Version: $LATEST")
        began = time.perf_counter()
        try:
            payload, errored, _ = response_result(handler(request["event"], context))
        except Exception as exc:
            # What the Python runtime logs for an unhandled exception.
            sys.stderr.write(f"[ERROR] {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            sys.stderr.flush()
            payload, errored, _ = exception_result(exc)
        duration_ms = (time.perf_counter() - began) * 1000
        used_mb = _peak_rss_mb()
        report = (
            f"REPORT RequestId: {request_id}\tDuration: {duration_ms:.2f} ms\t"
            f"Billed Duration: {int(duration_ms) + 1} ms\tMemory Size: {memory_mb} MB\t"
            f"Max Memory Used: {used_mb} MB"
        )
        if init_ms is not None:
            report += f"\tInit Duration: {init_ms:.2f} ms"
            init_ms = None
        _log(f"END RequestId: {request_id}\n{report}")
        _send(out, {"payload": payload, "errored": errored})
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write("usage: python -m tether_local.aws.lambda_worker IN_FD OUT_FD\n")
        return 2
    # Whole lines reach the log file (appended by every environment of the function).
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    with os.fdopen(int(argv[1]), "rb") as source, os.fdopen(int(argv[2]), "wb") as out:
        return serve(source, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
