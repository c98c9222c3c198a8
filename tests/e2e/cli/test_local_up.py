"""`tether local up` as a person runs it: the terminal shows the jobs' timeline, the functions'
logs (JSON lines, EMF metrics) go to files under the root, and Ctrl-C leaves no process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from tests.e2e.cli.local_up import TETHER, local_up
from tests.e2e.conftest import SIGNED, example_code, tiny_spec
from tests.e2e.processes import alive, live_processes

pytestmark = pytest.mark.slow

LAMBDA_WORKER = "tether_local.aws.lambda_worker"  # an execution environment
TRAIN = "python tiny_train.py --steps 150 --checkpoint-every 50 --step-seconds 0.02"


def test_local_up_shows_the_timeline_and_logs_the_functions_to_files(tmp_path: Path) -> None:
    root = tmp_path / "root"
    env = {**os.environ, "TETHER_LOCAL_STATE": str(tmp_path / "local-stack.json")}
    with local_up(TETHER, root, env, tmp_path / "stderr.txt") as stack:
        terminal = stack.terminal
        terminal.wait_for("serving", timeout_s=180)
        api = terminal.wait_for("API: ", 1).split()[1]
        logs = Path(terminal.wait_for("Logs: ", 1).split()[1]).parent
        spec = tiny_spec(name="watched", run=TRAIN, code=example_code(api))
        created = httpx.post(f"{api}/jobs", json=spec, headers=SIGNED, timeout=60)
        assert created.status_code == 201, created.text
        job_id = created.json()["job_id"]
        for kind in ("submitted", "rented", "generation 1 training", "job ended FINISHED"):
            assert job_id in terminal.wait_for(kind, timeout_s=120)
        workers = live_processes(LAMBDA_WORKER, parent=stack.process.pid)
        assert workers, "each execution environment is a process of the stack"
    assert stack.process.returncode == 0, stack.stderr
    terminal.wait_for("stopped", timeout_s=10)

    # The terminal: the timeline, never a function's JSON log line or metrics.
    assert not [line for line in terminal.lines if line.lstrip().startswith("{")]
    # The files: each function's own log, JSON lines and EMF included.
    assert logs == root / "logs"
    by_function = {path.name: path.read_text() for path in logs.glob("*.log")}
    monitor = next(text for name, text in by_function.items() if "Monitor" in name)
    lifecycle = next(text for name, text in by_function.items() if "Lifecycle" in name)
    records = [json.loads(line) for line in monitor.splitlines() if line.startswith("{")]
    assert any(r.get("message") == "monitor run" for r in records)
    assert any("_aws" in r for r in records)  # an EMF metrics blob
    assert job_id in lifecycle and "START RequestId: " in lifecycle
    assert not [pid for pid in workers if alive(pid)]
