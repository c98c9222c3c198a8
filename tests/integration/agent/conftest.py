"""Agent test support: a real S3 server (`rclone serve s3`), a fake control plane that answers
heartbeats and records Vast stop calls, and helpers to run the agent as a real process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tether_agent.storage import Storage
from tether_agent.storage_credentials import Credentials, CredentialStore

from tests.paths import ROOT
from tether_local.r2.s3server import S3Server, start_s3_server

FAKE_TRAIN = Path(__file__).with_name("fake_train.py")
ACCESS_KEY = "TETHERTESTKEY01"
SECRET_KEY = "tether-test-secret-0001"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with start_s3_server(tmp_path_factory.mktemp("s3"), {ACCESS_KEY: SECRET_KEY}) as srv:
        yield srv


def create_bucket(s3: S3Server, name: str) -> str:
    """Create a bucket through the S3 API: a directory made on disk shows up only once rclone's
    directory cache expires (1 s), and an agent that lists it before gets NoSuchBucket and
    spends its start-up retrying (a test then signalled it before training had begun)."""
    creds = Credentials(ACCESS_KEY, SECRET_KEY, "", None, s3.endpoint_url, name)
    CredentialStore(creds).client(creds).create_bucket(Bucket=name)
    return name


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    return create_bucket(s3_server, f"b{uuid.uuid4().hex[:12]}")


def make_storage(endpoint: str, bucket: str, prefix: str = "jobs/j1/", **kwargs: Any) -> Storage:
    creds = Credentials(ACCESS_KEY, SECRET_KEY, "", None, endpoint, bucket)
    kwargs.setdefault("backoff_s", 0.05)
    kwargs.setdefault("part_size", 5 * 1024 * 1024)
    return Storage(CredentialStore(creds), prefix, **kwargs)


@pytest.fixture
def storage(s3_server: S3Server, bucket: str) -> Iterator[Storage]:
    st = make_storage(s3_server.endpoint_url, bucket)
    yield st
    st.close()


@dataclass
class ControlPlane:
    """Answers POST /agent/heartbeat and records Vast instance calls."""

    command: str = "continue"
    lease_s: float = 3600.0
    down: bool = False
    throttled: bool = False  # answer 429 as API Gateway does past the route's bucket
    throttled_count: int = 0
    credentials: dict[str, Any] | None = None
    secrets: dict[str, Any] | None = None  # the reply's `secrets`, to heartbeats that ask
    job: dict[str, Any] | None = None  # the reply's `job`, to heartbeats that ask
    job_withheld: int = 0  # heartbeats asking for the job answered without it first
    token: str | None = None  # when set, any other bearer token gets 401
    heartbeats: list[dict[str, Any]] = field(default_factory=list)
    vast_calls: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def last(self) -> dict[str, Any] | None:
        with self._lock:
            return self.heartbeats[-1] if self.heartbeats else None

    def wait_for(self, predicate, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                found = [hb for hb in self.heartbeats if predicate(hb)]
            if found:
                return found[-1]
            time.sleep(0.02)
        raise AssertionError(f"no matching heartbeat; last: {self.last()}")


@pytest.fixture
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            body: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
            return body

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = self._body()
            if plane.down:
                self._reply(503, {"message": "Service Unavailable"})
                return
            if plane.throttled:
                with plane._lock:
                    plane.throttled_count += 1
                self._reply(429, {"message": "Too Many Requests"})
                return
            if plane.token is not None and self.headers.get("Authorization") != (
                f"Bearer {plane.token}"
            ):
                self._reply(401, {"error": "unauthenticated", "message": "not this token"})
                return
            with plane._lock:
                plane.heartbeats.append(
                    {**body, "authorization": self.headers.get("Authorization")}
                )
            now = time.time()
            reply: dict[str, Any] = {
                "command": plane.command,
                "lease_expires_at": 0 if plane.command == "superseded" else now + plane.lease_s,
                "server_time": now,
            }
            if plane.credentials:
                reply["credentials"] = plane.credentials
            if plane.secrets is not None and body.get("wants_secrets"):
                reply["secrets"] = plane.secrets
            if plane.job is not None and body.get("wants_job") and plane.command == "continue":
                with plane._lock:
                    withheld = plane.job_withheld > 0
                    plane.job_withheld -= 1
                if not withheld:
                    reply["job"] = plane.job
            self._reply(200, reply)

        def _vast(self, method: str) -> None:
            body = self._body() if method == "PUT" else {}
            with plane._lock:
                plane.vast_calls.append(
                    {"method": method, "path": self.path, "body": body,
                     "authorization": self.headers.get("Authorization")}
                )  # fmt: skip
            self._reply(200, {"success": True})

        def do_PUT(self) -> None:
            self._vast("PUT")

        def do_DELETE(self) -> None:
            self._vast("DELETE")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    plane.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield plane
    server.shutdown()
    server.server_close()


def agent_env(
    tmp_path: Path, s3: S3Server, bucket: str, plane: ControlPlane, **overrides: str
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "CONTAINER_"))}
    env.update(
        {
            "TETHER_JOB_ID": "j1",
            "TETHER_GENERATION": "1",
            "TETHER_API_URL": plane.url,
            "TETHER_AGENT_TOKEN": "agent-token-1",
            "TETHER_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
            "TETHER_MARKER": ".tether-complete",
            "TETHER_KEEP_LAST": "3",
            "TETHER_S3_ENDPOINT": s3.endpoint_url,
            "TETHER_S3_BUCKET": bucket,
            "TETHER_S3_PREFIX": "jobs/j1/",
            # rclone holds one static key: the read and the write key are the same here (the
            # scopes are the R2 front's to enforce: tests/integration/agent/test_storage_*).
            "TETHER_S3_ACCESS_KEY_ID": ACCESS_KEY,
            "TETHER_S3_SECRET_ACCESS_KEY": SECRET_KEY,
            "TETHER_S3_WRITE_ACCESS_KEY_ID": ACCESS_KEY,
            "TETHER_S3_WRITE_SECRET_ACCESS_KEY": SECRET_KEY,
            "TETHER_LEASE_EXPIRES_AT": str(time.time() + 3600),
            "TETHER_HEARTBEAT_INTERVAL_S": "0.1",
            "TETHER_GRACE_S": "5",
            "TETHER_VAST_URL": plane.url,
            "TETHER_GPU_PROBE": "none",
            "TETHER_PROBE_TIMEOUT_S": "1",
            "TETHER_WORK_DIR": str(tmp_path / "work"),
            "CONTAINER_ID": "4242",
            "CONTAINER_API_KEY": "instance-key-4242",
        }
    )
    env.update(overrides)
    return env


def recorded(*heartbeats: dict[str, Any] | None) -> str:
    """`TETHER_RESTORE_CHECKPOINTS` as the control plane would set it after these heartbeats
    (each one's `last_checkpoint`, newest first): what a next generation may restore."""
    refs = [hb["last_checkpoint"] for hb in reversed(heartbeats) if hb and hb["last_checkpoint"]]
    return json.dumps(refs)


def start_agent(
    env: dict[str, str], command: list[str], options: list[str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether_agent", "run", *(options or []), "--", *command],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def kill_host(agent: subprocess.Popen[str]) -> None:
    """SIGKILL the agent and its training command, as a dying host does. The training command
    runs in a session of its own, so killing the agent's process group alone leaves it running
    (and, with `--hold`, running forever after the test)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == agent.pid:  # fields[1]: the parent's pid
            children.append(int(stat.parent.name))
    os.killpg(agent.pid, signal.SIGKILL)
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child, signal.SIGKILL)


def finish(process: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        out, _ = process.communicate()
        raise AssertionError(f"agent did not finish:\n{out[-3000:]}") from None
    return process.returncode, out


def fake_train(*args: str) -> list[str]:
    return [sys.executable, str(FAKE_TRAIN), *args]
