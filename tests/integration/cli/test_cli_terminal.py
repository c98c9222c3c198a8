"""The `tether` process as a terminal sees it: `submit`'s price and question on a
pseudo-terminal, Ctrl-C (SIGINT) at the question, while the API stores the job and while the
commands load, and readers that leave early (`tether logs JOB | head`).

The CLI runs as its own process (`python -m tether_cli.main`) against the real API handlers
under moto, served over loopback HTTP (`tether_local.http.LoopbackServer`); the store is read
directly to see what was, and was not, stored.
"""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import httpx
import pytest
from moto import mock_aws

from functions.adapters import factory
from functions.adapters.store import JobStore
from functions.adapters.table import create_table
from functions.settings import (
    CLOUDFLARE_SECRET_ARN_ENV,
    METRICS_NAMESPACE_ENV,
    SERVICE_NAME_ENV,
    STATE_MACHINE_ARN_ENV,
    TABLE_NAME_ENV,
)
from tests.integration.cli.test_cli_jobs import EXAMPLE, PASS, TABLE, Backend, FakeBucket
from tests.paths import ROOT
from tether_cli import api_client
from tether_cli import jobs as cli_jobs
from tether_cli.main import main
from tether_local.http import LoopbackServer

OFFERS = str(ROOT / "tests" / "fixtures" / "offers_small.json")
QUESTION = "submit and rent a host? [y/N] "
WAIT_S = 60.0  # generous: the machine running the tests may be busy


class LoopbackBucket(FakeBucket):
    """The fake bucket with presigned URLs on the loopback server (the CLI is another
    process: it fetches them over HTTP)."""

    base_url = ""

    def presign_get(self, prefix: str, key: str, expires_s: int) -> tuple[str, float]:
        assert key.startswith(prefix), (prefix, key)
        return f"{self.base_url}/{quote(key)}?X-Amz-Signature=ok", 2e9


class Served:
    """The backend over HTTP; `hold_submit` makes `POST /jobs` store the job, then hold its
    reply until `release` is set (a slow API)."""

    def __init__(self, backend: Backend, bucket: LoopbackBucket) -> None:
        self.backend = backend
        self.bucket = bucket
        self.hold_submit = False
        self.submit_stored = threading.Event()
        self.release = threading.Event()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if "X-Amz-Signature" in str(request.url.query):
            return self.bucket.serve(request)
        response = self.backend(request)
        if self.hold_submit and request.method == "POST" and request.url.path == "/jobs":
            self.submit_stored.set()
            self.release.wait(WAIT_S)
        return response


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Served, str]]:
    with mock_aws():
        ddb = boto3.client("dynamodb")
        create_table(ddb, TABLE)
        arn = boto3.client("stepfunctions").create_state_machine(
            name="lifecycle", definition=PASS, roleArn="arn:aws:iam::123456789012:role/x"
        )["stateMachineArn"]
        for key, value in {
            TABLE_NAME_ENV: TABLE,
            STATE_MACHINE_ARN_ENV: arn,
            SERVICE_NAME_ENV: "tether-test",
            METRICS_NAMESPACE_ENV: "TetherTest",
            CLOUDFLARE_SECRET_ARN_ENV: "arn:aws:secretsmanager:us-east-1:123456789012:secret:cf",
        }.items():
            monkeypatch.setenv(key, value)
        factory.reset()
        bucket = LoopbackBucket()
        monkeypatch.setattr(factory, "read_only_bucket", lambda *_: bucket)
        handler = Served(Backend(JobStore(TABLE, ddb), bucket), bucket)
        with LoopbackServer(handler, name="cli-terminal-api") as server:
            bucket.base_url = server.url
            try:
                yield handler, server.url
            finally:
                handler.release.set()
        factory.reset()


class Cli:
    """`tether ARGS` as a process: stdin a pseudo-terminal (`tty=True`) or /dev/null, stdout
    and stderr read as they come."""

    def __init__(self, api_url: str, *argv: str, tty: bool, stdout: Any = subprocess.PIPE):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        env.update({api_client.API_URL_ENV: api_url, "PYTHONPATH": str(ROOT)})
        self.terminal: int | None = None
        stdin: Any = subprocess.DEVNULL
        if tty:
            self.terminal, stdin = pty.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tether_cli.main", *argv],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        if tty:
            os.close(stdin)
        self._err = bytearray()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.process.stderr is not None
        while chunk := os.read(self.process.stderr.fileno(), 4096):
            self._err += chunk

    @property
    def stderr(self) -> str:
        return self._err.decode(errors="replace")

    def wait_for(self, text: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while text not in self.stderr:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self._reader.join(timeout=5)
                raise AssertionError(f"no {text!r} on stderr; it has:\n{self.stderr}")
            time.sleep(0.02)

    def type(self, line: str) -> None:
        assert self.terminal is not None
        os.write(self.terminal, line.encode())

    def interrupt(self) -> None:
        self.process.send_signal(signal.SIGINT)

    def end(self) -> tuple[int, str, str]:
        out = b""
        try:
            if self.process.stdout is not None:  # stderr is read by `_pump`
                out = self.process.stdout.read()
            self.process.wait(timeout=WAIT_S)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            if self.terminal is not None:
                os.close(self.terminal)
        self._reader.join(timeout=5)
        return self.process.returncode, out.decode(), self.stderr


def stored(handler: Served) -> list[str]:
    return handler.backend.job_ids()


def sent(handler: Served) -> list[str]:
    """What the CLI asked the API, as `METHOD path` (the price reads `GET /measures`)."""
    return [f"{r.method} {r.url.path}" for r in handler.backend.requests]


# --- the price and the question ---------------------------------------------------------------


def test_submit_prints_the_price_and_asks_on_a_terminal(served) -> None:
    handler, url = served
    cli = Cli(url, "submit", EXAMPLE, "--offers", OFFERS, tty=True)
    cli.wait_for(QUESTION)
    assert sent(handler) == ["GET /measures"]  # the pace learned for the name; nothing else
    price = cli.stderr
    assert "host      offer 1001 (1x RTX 3090, Quebec, CA), $0.153/h on-demand, first of 5" in price
    assert "expected  $0.086 over 0.50 h" in price
    assert "range     $0.086 to $0.152: the expected totals of the 5 offers it tries" in price
    assert "budget    $1.00: the job is stopped when its spend reaches it" in price
    cli.type("y\n")
    code, out, err = cli.end()
    assert code == 0, err
    (job_id,) = stored(handler)
    assert f"submitted: {job_id} (PENDING)" in out


def test_declining_stores_nothing(served) -> None:
    handler, url = served
    cli = Cli(url, "submit", EXAMPLE, "--offers", OFFERS, tty=True)
    cli.wait_for(QUESTION)
    cli.type("n\n")
    code, out, err = cli.end()
    assert code == 1 and out == ""
    assert err.endswith("tether: not submitted (declined): no code uploaded, no job stored\n")
    assert sent(handler) == ["GET /measures"] and stored(handler) == []


def test_the_price_is_unknown_without_a_vast_key_and_the_question_still_asked(served) -> None:
    handler, url = served
    cli = Cli(url, "submit", EXAMPLE, tty=True)
    cli.wait_for(QUESTION)
    assert "price     unknown: VAST_API_KEY is not set on this machine" in cli.stderr
    cli.type("\n")  # Enter: the default is no
    code, _, err = cli.end()
    assert code == 1 and "not submitted (declined)" in err
    assert stored(handler) == []


@pytest.mark.parametrize(("extra", "tty"), [(("--yes",), True), ((), False)])
def test_yes_or_no_terminal_submits_without_asking(served, extra, tty) -> None:
    handler, url = served
    cli = Cli(url, "submit", EXAMPLE, "--offers", OFFERS, *extra, tty=tty)
    code, out, err = cli.end()
    assert code == 0, err
    assert QUESTION not in err
    assert "expected  $0.086" in err  # the price is still said
    (job_id,) = stored(handler)
    assert f"submitted: {job_id}" in out


def test_json_neither_prices_nor_asks(served) -> None:
    handler, url = served
    code, _, err = Cli(url, "submit", EXAMPLE, "--json", tty=True).end()
    assert code == 0, err
    assert err == ""
    assert len(stored(handler)) == 1


# --- Ctrl-C -----------------------------------------------------------------------------------


def test_ctrl_c_at_the_question_stores_nothing(served) -> None:
    handler, url = served
    cli = Cli(url, "submit", EXAMPLE, "--offers", OFFERS, tty=True)
    cli.wait_for(QUESTION)
    cli.interrupt()
    code, out, err = cli.end()
    assert code == 130 and out == ""
    assert err.endswith(
        "tether: interrupted: nothing was submitted (no job stored); no code uploaded\n"
    )
    assert "Traceback" not in err
    assert sent(handler) == ["GET /measures"] and stored(handler) == []


def test_ctrl_c_while_the_api_stores_the_job_names_the_job(served) -> None:
    handler, url = served
    handler.hold_submit = True
    cli = Cli(url, "submit", EXAMPLE, "--yes", tty=True)
    assert handler.submit_stored.wait(WAIT_S)
    cli.interrupt()
    cli.wait_for("waiting for the API's reply")
    handler.release.set()
    code, out, err = cli.end()
    (job_id,) = stored(handler)
    assert code == 130 and out == ""
    assert err.endswith(
        f"tether: interrupted: job {job_id} was submitted (PENDING) and will rent a host: "
        f"`tether cancel {job_id}` stops it\n"
    )
    assert "Traceback" not in err


def test_a_second_ctrl_c_leaves_saying_the_job_may_exist(served) -> None:
    handler, url = served
    handler.hold_submit = True
    cli = Cli(url, "submit", EXAMPLE, "--yes", "--idempotency-key", "k-1", tty=True)
    assert handler.submit_stored.wait(WAIT_S)
    cli.interrupt()
    cli.wait_for("waiting for the API's reply")
    cli.interrupt()
    code, _, err = cli.end()
    assert code == 130
    assert err.endswith(
        "tether: interrupted: the job may have been stored: `tether jobs` lists it and "
        "`tether cancel JOB` stops it (Idempotency-Key k-1)\n"
    )
    assert "Traceback" not in err


def test_ctrl_c_while_the_commands_load_is_one_line(tmp_path: Path) -> None:
    """SIGINT arrives while `tether_cli.main` imports its commands (a second, on a slow
    machine): the process sends it to itself when `tether_cli.jobs` starts loading."""
    script = (
        "import os, signal, sys, time\n"
        # as a terminal's foreground process has it (a runner may start tests with it ignored)
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "class Interrupting:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tether_cli.jobs':\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "            time.sleep(1)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Interrupting())\n"
        "from tether_cli.main import main\n"  # what the `tether` script does
        "sys.exit(main(['jobs']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        timeout=WAIT_S,
        check=False,
    )
    assert done.returncode == 130
    assert done.stderr == "tether: interrupted\n"


# --- readers that leave early -----------------------------------------------------------------


def closed_pipe() -> int:
    """A pipe's writing end whose reader has already gone (`| head -c 0`)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    return write_end


@pytest.mark.parametrize(
    "command",
    [("logs", "{job}"), ("jobs",), ("status", "{job}", "--json"), ("status", "{job}")],
    ids=["logs", "jobs", "status --json", "status"],
)
def test_a_reader_that_left_ends_the_command_quietly(served, command) -> None:
    handler, url = served
    code, _, err = Cli(url, "submit", EXAMPLE, "--json", tty=False).end()
    assert code == 0, err
    (job_id,) = stored(handler)
    handler.bucket.put(job_id, 1, 0, "step 1 loss 2.0\n" * 20_000)
    pipe = closed_pipe()
    try:
        argv = [part.format(job=job_id) for part in command]
        code, _, err = Cli(url, *argv, tty=False, stdout=pipe).end()
    finally:
        os.close(pipe)
    assert (code, err) == (141, "")


def test_a_closed_pipe_elsewhere_is_still_an_error(monkeypatch, capsys) -> None:
    """Only our own output's reader leaving is quiet: a BrokenPipeError from anything else
    (a command's pipe to a child process, say) is reported."""

    def broken(_args: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli_jobs, "run_jobs", broken)
    assert main(["jobs"]) == 1
    assert capsys.readouterr().err == (
        "tether: error: unexpected BrokenPipeError: [Errno 32] Broken pipe\n"
    )
