"""`tether local up` records its API URL for `--local` while it serves and removes it on exit.

The local stack itself is replaced by a stand-in (the real one is exercised in tests/e2e): what
is tested here is the state file's life around it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tether_cli import api_client
from tether_cli.main import main
from tether_local import stack as local_stack

API_URL = "http://127.0.0.1:50123/"
AWS_URL = "http://127.0.0.1:50127"  # the stack's moto, for `tether secrets … --local`


class FakeStack:
    """Stands in for LocalStack; once `local up` has written its state file, reads it and
    sends the process SIGTERM, as a user's Ctrl-C (or `kill`) would."""

    def __init__(self, config: Any, state_path: Path, seen: dict[str, Any]) -> None:
        self.api_url = API_URL
        self.aws = SimpleNamespace(endpoint_url=AWS_URL)
        self.s3_url = "http://127.0.0.1:50124/"
        self.vast_url = "http://127.0.0.1:50125/"
        self.cloudflare_url = "http://127.0.0.1:50126/"
        self.root = Path("/tmp/tether-local-test")
        self.log_dir = self.root / "logs"
        self.state_path = state_path
        self.seen = seen
        self.watcher = threading.Thread(target=self._stop_once_serving, daemon=True)

    def table_name(self) -> str:
        return "tether-local-test"

    def __enter__(self) -> FakeStack:
        self.watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.watcher.join(timeout=30)
        self.seen["closed_with_file"] = self.state_path.exists()

    def _stop_once_serving(self) -> None:
        deadline = time.monotonic() + 30  # a bound for a broken run, not a timing assertion
        while not self.state_path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.state_path.exists():
            self.seen["state"] = json.loads(self.state_path.read_text())
            self.seen["resolved"] = api_client.resolve_api_url(local=True).url
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture
def state_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "build" / "local-stack.json"
    monkeypatch.setenv(api_client.LOCAL_STATE_ENV, str(path))
    return path


def test_local_up_writes_the_state_file_while_serving_and_removes_it_on_exit(
    state_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(
        local_stack, "LocalStack", lambda config: FakeStack(config, state_path, seen)
    )

    assert main(["local", "up", "--port", "0"]) == 0

    assert seen["state"]["api_url"] == API_URL
    assert seen["state"]["aws_url"] == AWS_URL  # for `tether secrets set NAME --local`
    # and the control endpoint `tether local kill-host` and `tether ssh --local` call
    assert set(seen["state"]) == {"api_url", "aws_url", "control_url", "control_token"}
    assert seen["resolved"] == API_URL  # what `tether jobs --local` would call
    assert not state_path.exists() and seen["closed_with_file"] is False
    out = capsys.readouterr().out
    assert f"State: {state_path}" in out
    assert "Logs: /tmp/tether-local-test/logs/<function>.log" in out


def test_a_state_file_taken_over_by_another_stack_is_left_alone(
    state_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    other = "http://127.0.0.1:60000/"

    class TakenOver(FakeStack):
        def _stop_once_serving(self) -> None:
            deadline = time.monotonic() + 30
            while not self.state_path.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            api_client.write_local_state(other, self.state_path)  # a second `local up`
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(
        local_stack, "LocalStack", lambda config: TakenOver(config, state_path, seen)
    )

    assert main(["local", "up", "--port", "0"]) == 0

    assert json.loads(state_path.read_text()) == {"api_url": other}


def test_a_stack_that_fails_to_start_leaves_no_state_file(
    state_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Broken:
        def __init__(self, config: Any) -> None:
            pass

        def __enter__(self) -> Broken:
            raise RuntimeError("rclone not found")

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr(local_stack, "LocalStack", Broken)
    assert main(["local", "up", "--port", "0"]) == 1
    assert not state_path.exists()
    assert "rclone not found" in capsys.readouterr().err


def test_a_reader_never_finds_the_state_file_half_written(tmp_path: Path) -> None:
    """`tether jobs --local` run while `local up` (re)writes its state finds a whole file: the
    old one or the new one, never an empty or partial one (a reader's error there would send
    the user away with "not a state file")."""
    path = tmp_path / "local-stack.json"
    api_client.write_local_state(API_URL, path, aws_url=AWS_URL)
    environ = {api_client.LOCAL_STATE_ENV: str(path)}
    stop = threading.Event()
    errors: list[str] = []

    def read_all_along() -> None:
        while not stop.is_set():
            try:
                found = api_client.read_local_state(environ)
            except Exception as exc:  # the failure this test is for, whatever its type
                errors.append(f"{type(exc).__name__}: {exc}")
                return
            if found is None or found.get("api_url") != API_URL:
                errors.append(f"read {found!r}")
                return

    reader = threading.Thread(target=read_all_along)
    reader.start()
    try:
        for _ in range(2000):
            api_client.write_local_state(API_URL, path, aws_url=AWS_URL)
            if errors:
                break
    finally:
        stop.set()
        reader.join(timeout=30)
    assert errors == []
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["local-stack.json"]  # no staged file left
