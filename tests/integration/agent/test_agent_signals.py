"""The agent as a process, at its ends: killed outright (its training must not outlive it) and
signalled in any phase (a final `stopping` heartbeat, never a death by the signal)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.agent.conftest import (
    ControlPlane,
    agent_env,
    fake_train,
    finish,
    make_storage,
    start_agent,
)
from tether_local.r2.s3server import S3Server


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, …; None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _processes() -> Iterator[tuple[int, list[str]]]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            yield int(entry.name), fields


def live_in_group(pgid: int) -> list[int]:
    return [pid for pid, f in _processes() if int(f[2]) == pgid and f[0] != "Z"]


def children_of(pid: int) -> list[int]:
    return [child for child, f in _processes() if int(f[1]) == pid]


def test_training_ends_when_its_agent_is_killed(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    """The agent is SIGKILLed (the OOM killer): its training gets SIGTERM, saves, and is gone
    within the grace; nothing of it is left running."""
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_GRACE_S="20")
    agent = start_agent(env, fake_train("--steps", "2", "--hold", "--save-on-term"))
    group = 0
    try:
        control_plane.wait_for(
            lambda hb: hb["phase"] == "training" and (hb["last_checkpoint"] or {}).get("step") == 2
        )
        (guard,) = children_of(agent.pid)  # the training's group leader
        group = int((_stat(guard) or ["", "", "0"])[2])
        assert group == guard and len(live_in_group(group)) == 2  # the guard and fake_train
        os.kill(agent.pid, signal.SIGKILL)  # the agent alone, not its training
        agent.wait(timeout=30)
        deadline = time.monotonic() + 60  # a bound, not a speed: the grace is 20 s
        while live_in_group(group) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = live_in_group(group)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGKILL)
        agent.communicate()
    assert not left, f"still running after the agent died: {left}"
    # SIGTERM, not SIGKILL nor a broken pipe: it saved its last checkpoint on the way out…
    assert (tmp_path / "ckpt" / "checkpoint-102" / ".tether-complete").is_file()
    # …and what it printed after the agent was gone is in the host's training log.
    log = (tmp_path / "work" / "logs" / "training.log").read_text()
    assert f"the agent (pid {agent.pid}) is gone" in log
    assert "saved 102" in log


@contextlib.contextmanager
def silent_s3() -> Iterator[str]:
    """An endpoint that accepts connections and never answers: a restore hangs in it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        server.close()


def test_sigterm_during_restore_sends_a_final_stopping_heartbeat(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    # Restore reads only what the control plane recorded: one candidate of g1 for this g2, so the
    # restore goes to the bucket, which never answers.
    candidate = {
        "step": 100,
        "generation": 1,
        "manifest_key": "jobs/j1/g1/checkpoints/000000000100/manifest.json",
        "manifest_sha256": "0" * 64,
    }
    with silent_s3() as endpoint:
        env = agent_env(
            tmp_path, s3_server, bucket, control_plane,
            TETHER_S3_ENDPOINT=endpoint, TETHER_GENERATION="2",
            TETHER_RESTORE_CHECKPOINTS=json.dumps([candidate]),
        )  # fmt: skip
        agent = start_agent(env, fake_train("--steps", "1"))
        try:
            control_plane.wait_for(lambda hb: hb["phase"] == "restoring")
        finally:
            agent.send_signal(signal.SIGTERM)  # e.g. the container is being stopped
            code, out = finish(agent)
    assert code == 128 + signal.SIGTERM, out  # it exits; it does not die of the signal
    last = control_plane.last()
    assert last is not None and last["phase"] == "stopping" and last["exit_code"] is None, last
    assert "Traceback" not in out
    assert not list((tmp_path / "ckpt").glob("checkpoint-*"))  # training never started
    assert control_plane.vast_calls == []  # the control plane decides what comes next


def test_sigterm_during_training_ends_stopping_not_failed_and_uploads_the_last_save(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(tmp_path, s3_server, bucket, control_plane)
    agent = start_agent(env, fake_train("--steps", "1", "--hold", "--save-on-term"))
    try:
        control_plane.wait_for(lambda hb: (hb["last_checkpoint"] or {}).get("step") == 1)
    finally:
        agent.send_signal(signal.SIGTERM)  # forwarded to the training group
        code, out = finish(agent)
    assert code == 143, out  # the training's own status
    last = control_plane.last()
    assert last is not None and last["phase"] == "stopping" and last["exit_code"] == 143, last
    assert last["last_checkpoint"]["step"] == 101  # saved on SIGTERM, then uploaded
    storage = make_storage(s3_server.endpoint_url, bucket)
    try:
        assert {c.step for c in storage.list_checkpoints(1)} == {1, 101}
    finally:
        storage.close()


def test_sigterm_during_training_uploads_the_outputs_after_the_final_checkpoint(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane, TETHER_OUTPUTS_DIR=str(tmp_path / "out")
    )
    agent = start_agent(env, fake_train("--steps", "1", "--hold", "--save-on-term", "--outputs"))
    try:
        control_plane.wait_for(lambda hb: (hb["last_checkpoint"] or {}).get("step") == 1)
    finally:
        agent.send_signal(signal.SIGTERM)
        code, out = finish(agent)
    assert code == 143, out
    last = control_plane.last()
    assert last is not None and last["phase"] == "stopping", last
    assert last["last_checkpoint"]["step"] == 101
    assert last["outputs"]["manifest_key"] == "jobs/j1/g1/outputs/manifest.json"
    assert last["outputs"]["files"] == 3
    assert out.index("checkpoint 101 uploaded") < out.index("outputs uploaded")
    storage = make_storage(s3_server.endpoint_url, bucket)
    try:
        assert sorted(storage.list_keys("jobs/j1/g1/outputs/")) == [
            "jobs/j1/g1/outputs/files/adapter/weights.bin",
            "jobs/j1/g1/outputs/files/manifest.json",
            "jobs/j1/g1/outputs/files/result.txt",
            "jobs/j1/g1/outputs/manifest.json",
        ]
    finally:
        storage.close()


HF_STANDIN = Path(__file__).parents[2] / "unit" / "agent" / "hf_standin.py"


@pytest.mark.parametrize("stopped_by", ["sigterm", "stop command"])
def test_hf_callback_saves_a_final_checkpoint_on_sigterm_and_the_agent_uploads_it(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane, stopped_by: str
) -> None:
    """A Trainer run (the callback protocol's stand-in) with `TetherCallback`, imported from
    the PYTHONPATH the agent sets, saving only every 100,000 steps: the agent is signalled (the
    container stops) or told to stop (cancel, budget), so the training gets SIGTERM; the
    Trainer saves a marked checkpoint at the step it was in, and the agent uploads it."""
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_GRACE_S="30")
    command = [sys.executable, str(HF_STANDIN),
               "--max-steps", "1000000", "--save-steps", "100000", "--step-s", "0.02"]  # fmt: skip
    agent = start_agent(env, command)
    try:
        control_plane.wait_for(lambda hb: hb["phase"] == "training" and (hb["step"] or 0) >= 3)
    finally:
        if stopped_by == "sigterm":
            agent.send_signal(signal.SIGTERM)  # forwarded to the training group
        else:
            control_plane.command = "stop"
        code, out = finish(agent)
    assert code == (0 if stopped_by == "sigterm" else 11), out  # the script itself exits 0
    (line,) = [x for x in out.splitlines() if x.startswith("stopped by SIGTERM at step ")]
    final = int(line.rsplit(" ", 1)[1])
    assert 3 <= final < 100_000, out
    last = control_plane.last()
    assert last is not None and last["phase"] == "stopping", last
    assert last["last_checkpoint"]["step"] == final, last
    storage = make_storage(s3_server.endpoint_url, bucket)
    try:
        (uploaded,) = storage.list_checkpoints(1)
        assert uploaded.step == final
    finally:
        storage.close()
    assert "Traceback" not in out
