"""The agent as a real process: training, heartbeats, the lease and commands, kills."""

from __future__ import annotations

import hashlib
import signal
import sys
import time
from pathlib import Path

from tether_agent.agent import ExitCode
from tether_agent.checkpoints import Manifest, RemoteCheckpointId
from tether_agent.restore import parse_candidates, restore_latest

from tests.integration.agent.conftest import (
    ControlPlane,
    agent_env,
    create_bucket,
    fake_train,
    finish,
    kill_host,
    make_storage,
    recorded,
    start_agent,
)
from tests.paths import ROOT
from tether_local.hosts.images import stand_in
from tether_local.r2.s3server import S3Server


def remote_steps(s3: S3Server, bucket: str, generation: int = 1) -> dict[int, bool]:
    """step → has a manifest, of `generation`'s checkpoints."""
    storage = make_storage(s3.endpoint_url, bucket)
    try:
        return {
            c.step: storage.read_manifest(c) is not None
            for c in storage.list_checkpoints(generation)
        }
    finally:
        storage.close()


def test_training_runs_uploads_and_reports(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(tmp_path, s3_server, bucket, control_plane)
    code, out = finish(start_agent(env, fake_train("--steps", "3", "--exit-code", "0")))
    assert code == 0, out
    assert remote_steps(s3_server, bucket) == {1: True, 2: True, 3: True}
    last = control_plane.last()
    assert last is not None
    assert last["phase"] == "finished" and last["exit_code"] == 0
    assert last["last_checkpoint"]["step"] == 3 and last["step"] == 3
    assert last["authorization"] == "Bearer agent-token-1"
    assert last["gpu"]["available"] is False
    assert "saved 3" in out  # training output reaches the console…
    assert "saved 3" in (tmp_path / "work" / "logs" / "training.log").read_text()  # …and the log


def test_training_failure_code_passes_through(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(tmp_path, s3_server, bucket, control_plane)
    code, out = finish(start_agent(env, fake_train("--steps", "1", "--exit-code", "7")))
    assert code == 7, out
    last = control_plane.last()
    assert last is not None and last["phase"] == "failed" and last["exit_code"] == 7


def test_lease_expiry_stops_training_uploads_final_checkpoint_and_stops_machine(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    control_plane.down = True  # the supervisor is gone: nothing renews the lease
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane,
        # Long enough for the agent and the script to start on a loaded machine (2 s flaked).
        TETHER_LEASE_EXPIRES_AT=str(time.time() + 8),
    )  # fmt: skip
    agent = start_agent(env, fake_train("--steps", "2", "--hold", "--save-on-term"))
    code, out = finish(agent)
    assert code == ExitCode.LEASE_EXPIRED, out
    steps = remote_steps(s3_server, bucket)
    assert steps.get(102) is True, f"final checkpoint (saved on SIGTERM) not uploaded: {steps}"
    assert control_plane.vast_calls == [
        {
            "method": "PUT",
            "path": "/api/v0/instances/4242/",
            "body": {"state": "stopped"},
            "authorization": "Bearer instance-key-4242",
        }
    ]


def test_superseded_uploads_nothing_more_and_stops_machine(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_ON_DEAD_MAN="destroy")
    agent = start_agent(env, fake_train("--steps", "1", "--hold", "--save-on-term"))
    control_plane.wait_for(lambda hb: (hb.get("last_checkpoint") or {}).get("step") == 1)
    control_plane.command = "superseded"
    code, out = finish(agent)
    assert code == ExitCode.SUPERSEDED, out
    assert remote_steps(s3_server, bucket) == {1: True}  # the SIGTERM save (101) stays local
    assert (tmp_path / "ckpt" / "checkpoint-101" / ".tether-complete").is_file()
    assert [c["method"] for c in control_plane.vast_calls] == ["DELETE"]


def test_stop_command_uploads_final_checkpoint(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(tmp_path, s3_server, bucket, control_plane)
    agent = start_agent(env, fake_train("--steps", "1", "--hold", "--save-on-term"))
    # Past step 1 the script has set its SIGTERM handler (it does before its first step): a stop
    # at the first `training` beat could reach it still importing, and it would die unsaved.
    control_plane.wait_for(lambda hb: hb["phase"] == "training" and (hb.get("step") or 0) >= 1)
    control_plane.command = "stop"
    code, out = finish(agent)
    assert code == ExitCode.STOPPED, out
    assert remote_steps(s3_server, bucket).get(101) is True
    assert len(control_plane.vast_calls) == 1


def test_heartbeat_api_down_for_many_intervals_does_not_stop_training(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    # 3 s down at a 0.05 s interval = 60 intervals: "minutes" at the real 15 s interval.
    control_plane.down = True
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_HEARTBEAT_INTERVAL_S="0.05")
    agent = start_agent(env, fake_train("--steps", "30", "--every-s", "0.1"))
    time.sleep(3)
    assert agent.poll() is None, "agent stopped while the API was down"
    control_plane.down = False
    code, out = finish(agent)
    assert code == 0, out
    assert remote_steps(s3_server, bucket).get(30) is True
    assert control_plane.heartbeats, "heartbeats did not resume"
    assert "heartbeat failed" in out


def test_heartbeats_throttled_for_many_intervals_do_not_stop_training(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    """A flood of junk empties the heartbeat route's bucket: every beat gets a 429 for 60
    intervals. Training goes on, the agent keeps retrying, and heartbeats resume after."""
    control_plane.throttled = True
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_HEARTBEAT_INTERVAL_S="0.05")
    agent = start_agent(env, fake_train("--steps", "30", "--every-s", "0.1"))
    time.sleep(3)
    assert agent.poll() is None, "agent stopped while its heartbeats were throttled"
    control_plane.throttled = False
    code, out = finish(agent)
    assert code == 0, out
    assert remote_steps(s3_server, bucket).get(30) is True
    assert control_plane.throttled_count > 0 and control_plane.heartbeats
    assert "HTTP 429 (throttled)" in out


def test_agent_killed_mid_upload_leaves_no_manifest_and_restore_ignores_it(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(tmp_path, s3_server, bucket, control_plane)
    agent = start_agent(
        env,
        fake_train("--steps", "2", "--big-step", "2", "--big-mb", "24", "--hold"),
        ["--bandwidth-limit-mb-s", "8", "--part-size-mb", "5"],
    )
    storage = make_storage(s3_server.endpoint_url, bucket)
    try:
        control_plane.wait_for(lambda hb: (hb.get("last_checkpoint") or {}).get("step") == 1)
        control_plane.wait_for(lambda hb: hb["bytes_uploaded"] > 6 * 1024 * 1024)
        kill_host(agent)  # the agent and its training, mid-upload
        finish(agent)
        assert storage.read_manifest(RemoteCheckpointId(2, 1)) is None
        # The control plane recorded step 1 only: step 2 never got a manifest, so the agent
        # never reported it, and a later generation cannot even be told about it.
        last = control_plane.last()
        assert last is not None and last["last_checkpoint"]["step"] == 1
        candidates = parse_candidates(recorded(last))[0]
        result = restore_latest(storage, candidates, 2, tmp_path / "next")
        assert result.restored is not None and result.restored.ref.step == 1
    finally:
        storage.close()


def test_restored_checkpoint_is_reported_and_not_uploaded_again(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env1 = agent_env(tmp_path / "host1", s3_server, bucket, control_plane)
    assert finish(start_agent(env1, fake_train("--steps", "2")))[0] == 0
    env2 = agent_env(
        tmp_path / "host2", s3_server, bucket, control_plane, TETHER_GENERATION="2",
        TETHER_RESTORE_CHECKPOINTS=recorded(control_plane.last()),
    )  # fmt: skip
    code, out = finish(start_agent(env2, fake_train("--steps", "1")))
    assert code == 0, out
    last = control_plane.last()
    assert last is not None and last["generation"] == 2
    restored = last["restored_checkpoint"]
    assert restored["step"] == 2 and restored["generation"] == 1
    assert last["restore"] == {"outcome": "restored", "candidates": 1, "skipped": []}
    # the fake script resumed at 2 and saved 3, under generation 2's own prefix
    assert last["last_checkpoint"]["step"] == 3
    assert last["last_checkpoint"]["manifest_key"] == (
        "jobs/j1/g2/checkpoints/000000000003/manifest.json"
    )
    assert remote_steps(s3_server, bucket, 1) == {1: True, 2: True}
    assert remote_steps(s3_server, bucket, 2) == {3: True}


def test_gpu_probe_hang_reported_in_heartbeat(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    probe_file = tmp_path / "gpu-mode"
    probe_file.write_text("hung")
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane,
        TETHER_GPU_PROBE=f"fake:{probe_file}", TETHER_PROBE_TIMEOUT_S="0.3",
    )  # fmt: skip
    agent = start_agent(env, fake_train("--steps", "1", "--hold"))
    try:
        hb = control_plane.wait_for(lambda hb: hb["gpu"]["responsive"] is False)
        assert hb["gpu"]["available"] is True
        assert "0.3s" in hb["gpu"]["error"]
        probe_file.write_text("responsive")
        hb = control_plane.wait_for(lambda hb: hb["gpu"]["utilization_pct"] == 97.0)
        assert hb["gpu"]["unresponsive_s"] == 0
        # Signalled before training, the agent would stop without running it (exit 143 too, but
        # not the training's): a loaded machine can still be restoring when the reading arrives.
        control_plane.wait_for(lambda hb: hb["phase"] == "training")
    finally:
        agent.send_signal(signal.SIGTERM)  # forwarded to training, which exits 143
        code, out = finish(agent)
    assert code == 143, out


def test_interrupted_and_resumed_equals_uninterrupted(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    python = str(stand_in("python:3.12-slim").python)  # the demo's image
    script = str(ROOT / "examples" / "tiny-cpu" / "tiny_train.py")
    tiny = [python, script, "--steps", "60", "--checkpoint-every", "10"]
    straight = tmp_path / "straight"
    env0 = agent_env(straight, s3_server, create_bucket(s3_server, bucket + "x"), control_plane)
    assert finish(start_agent(env0, tiny))[0] == 0

    # Generation 1 crashes after step 35 (last checkpoint 30); generation 2, on a fresh
    # host, restores step 30 from the bucket and trains to the end.
    env1 = agent_env(tmp_path / "host1", s3_server, bucket, control_plane)
    assert finish(start_agent(env1, [*tiny, "--crash-at-step", "35"]))[0] == 1
    env2 = agent_env(
        tmp_path / "host2", s3_server, bucket, control_plane, TETHER_GENERATION="2",
        TETHER_RESTORE_CHECKPOINTS=recorded(control_plane.last()),
    )  # fmt: skip
    code, out = finish(start_agent(env2, tiny))
    assert code == 0, out
    assert "resumed from" in out and "checkpoint-30" in out
    resumed = (tmp_path / "host2" / "ckpt" / "final_sha256.txt").read_text()
    assert resumed == (straight / "ckpt" / "final_sha256.txt").read_text()


def test_a_misplaced_output_dir_is_named_in_heartbeats_and_the_log(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    """output_dir one level below the checkpoint dir: the Trainer's checkpoints land in
    `$TETHER_CHECKPOINT_DIR/out/checkpoint-N`, nothing is uploaded, and the agent says so."""
    env = agent_env(tmp_path, s3_server, bucket, control_plane)
    script = Path(__file__).parents[2] / "unit" / "agent" / "hf_standin.py"
    command = [sys.executable, str(script), "--max-steps", "4", "--save-steps", "2",
               "--output-dir", str(tmp_path / "ckpt" / "out")]  # fmt: skip
    code, out = finish(start_agent(env, command))
    assert code == 0, out
    last = control_plane.last()
    assert last is not None and last["phase"] == "finished", last
    assert last["misplaced_checkpoints"] == ["out/checkpoint-2", "out/checkpoint-4"]
    assert "checkpoints found below the checkpoint dir, never uploaded: out/checkpoint-" in out
    storage = make_storage(s3_server.endpoint_url, bucket)
    try:
        keys = storage.list_keys("jobs/j1/")
        shipped = b"".join(storage.get_bytes(k) or b"" for k in keys).decode()
    finally:
        storage.close()
    assert keys and all(k.startswith("jobs/j1/g1/logs/") for k in keys)  # no checkpoint
    assert "[tether] checkpoints found below the checkpoint dir, never uploaded: out/" in shipped


def remote_outputs(s3: S3Server, bucket: str, generation: int = 1) -> dict[str, bytes]:
    """path → bytes of `generation`'s uploaded outputs, as its manifest lists them (checked
    against each file's size and sha256); {} without a manifest."""
    storage = make_storage(s3.endpoint_url, bucket)
    try:
        raw = storage.get_bytes(f"jobs/j1/g{generation}/outputs/manifest.json")
        if raw is None:
            return {}
        manifest = Manifest.model_validate_json(raw)
        found: dict[str, bytes] = {}
        for entry in manifest.files:
            data = storage.get_bytes(f"jobs/j1/g{generation}/outputs/files/{entry.path}")
            assert data is not None, entry.path
            assert (len(data), hashlib.sha256(data).hexdigest()) == (entry.size, entry.sha256)
            found[entry.path] = data
        return found
    finally:
        storage.close()


EXPECTED_OUTPUTS_AT_STEP_3 = {
    "adapter/weights.bin": bytes([3]) * 70_000,
    "manifest.json": b'{"mine": true}',
    "result.txt": b"final step 3\n",
}


def test_outputs_are_uploaded_with_a_manifest_when_training_exits_0(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    outputs = tmp_path / "outputs"
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_OUTPUTS_DIR=str(outputs))
    code, out = finish(start_agent(env, fake_train("--steps", "3", "--outputs")))
    assert code == 0, out
    assert remote_outputs(s3_server, bucket) == EXPECTED_OUTPUTS_AT_STEP_3
    raw = make_storage(s3_server.endpoint_url, bucket).get_bytes("jobs/j1/g1/outputs/manifest.json")
    assert raw is not None
    last = control_plane.last()
    assert last is not None and last["phase"] == "finished"
    assert last["outputs"] == {
        "generation": 1,
        "manifest_key": "jobs/j1/g1/outputs/manifest.json",
        "manifest_sha256": hashlib.sha256(raw).hexdigest(),
        "files": 3,
        "bytes": 70_000 + 14 + 13,
    }
    # Every heartbeat before the upload said nothing of outputs.
    assert all(hb.get("outputs") is None for hb in control_plane.heartbeats if hb is not last
               and hb["phase"] == "training")  # fmt: skip


def test_an_empty_outputs_dir_uploads_a_manifest_of_no_files(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane, TETHER_OUTPUTS_DIR=str(tmp_path / "out")
    )
    code, out = finish(start_agent(env, fake_train("--steps", "1")))
    assert code == 0, out
    last = control_plane.last()
    assert last is not None and last["outputs"]["files"] == 0
    assert remote_outputs(s3_server, bucket) == {}
    assert "outputs uploaded (nothing:" in out


def test_a_failed_training_uploads_no_outputs(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane, TETHER_OUTPUTS_DIR=str(tmp_path / "out")
    )
    code, out = finish(
        start_agent(env, fake_train("--steps", "1", "--outputs", "--exit-code", "3"))
    )
    assert code == 3, out
    last = control_plane.last()
    assert last is not None and last.get("outputs") is None
    storage = make_storage(s3_server.endpoint_url, bucket)
    assert storage.list_keys("jobs/j1/g1/outputs/") == []


def test_stop_uploads_the_outputs_after_the_final_checkpoint(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane, TETHER_OUTPUTS_DIR=str(tmp_path / "out")
    )
    agent = start_agent(env, fake_train("--steps", "1", "--hold", "--save-on-term", "--outputs"))
    # Past step 1 the script has set its SIGTERM handler (it does before its first step): a stop
    # at the first `training` beat could reach it still importing, and it would die unsaved.
    control_plane.wait_for(lambda hb: hb["phase"] == "training" and (hb.get("step") or 0) >= 1)
    control_plane.command = "stop"
    code, out = finish(agent)
    assert code == ExitCode.STOPPED, out
    assert remote_steps(s3_server, bucket).get(101) is True
    assert remote_outputs(s3_server, bucket)["result.txt"] == b"final step 1\n"
    # The final checkpoint's manifest went up before the outputs' manifest was written.
    assert out.index("checkpoint 101 uploaded") < out.index("outputs uploaded")
    last = control_plane.last()
    assert last is not None and last["outputs"]["files"] == 3
