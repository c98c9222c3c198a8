"""examples/qlora-7b/train.py in its tiny mode, run as a process with real torch, transformers
and peft (CPU, a tiny Llama from a config, nothing downloaded): a SIGTERM mid-run (what the
agent sends on stop, cancel, lease expiry) makes the Trainer save and mark a final checkpoint
through `tether_hooks.TetherCallback` and the script save the adapter; resuming from that
checkpoint ends with the adapter an uninterrupted run saves, byte for byte."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.paths import EXAMPLES, ROOT

TRAIN = EXAMPLES / "qlora-7b" / "train.py"
HOOKS = ROOT / "agent" / "tether_agent" / "_hooks"
ADAPTER = ("adapter_config.json", "adapter_model.safetensors")


def _env(run_dir: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(run_dir),
        "PYTHONPATH": str(HOOKS),  # as the agent sets it on a host
        "QLORA_TINY": "1",
        "TETHER_CHECKPOINT_DIR": str(run_dir / "checkpoints"),
        "TETHER_OUTPUTS_DIR": str(run_dir / "outputs"),
        "TETHER_MARKER": ".tether-complete",
    }


def _train(run_dir: Path, *args: str) -> subprocess.Popen[str]:
    run_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, str(TRAIN), *args],
        cwd=run_dir,
        env=_env(run_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(process: subprocess.Popen[str], timeout_s: float = 120) -> str:
    try:
        out, _ = process.communicate(timeout=timeout_s)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, out[-3000:]
    return out


def test_sigterm_saves_a_marked_final_checkpoint_and_the_resumed_run_ends_identical(
    tmp_path: Path,
) -> None:
    straight = _train(tmp_path / "straight")  # runs meanwhile: the reference
    stopped_dir = tmp_path / "stopped"
    stopped = _train(stopped_dir, "--step-seconds", "0.1")
    try:
        first = stopped_dir / "checkpoints" / "checkpoint-10" / ".tether-complete"
        deadline = time.monotonic() + 90
        while not first.exists():
            assert stopped.poll() is None and time.monotonic() < deadline, "no checkpoint-10"
            time.sleep(0.05)
        time.sleep(0.35)  # a few steps past it, before the next one
        stopped.send_signal(signal.SIGTERM)
        out = _finish(stopped)
    finally:
        if stopped.poll() is None:
            stopped.kill()
            stopped.wait()

    assert "[tether_hooks] SIGTERM" in out
    marked = sorted(
        int(p.parent.name.removeprefix("checkpoint-"))
        for p in (stopped_dir / "checkpoints").glob("checkpoint-*/.tether-complete")
    )
    final = marked[-1]
    assert marked[0] == 10 and 10 < final < 20, marked  # a checkpoint between the scheduled ones
    state = json.loads(
        (stopped_dir / "checkpoints" / f"checkpoint-{final}" / "trainer_state.json").read_text()
    )
    assert state["global_step"] == final
    assert f"adapter at step {final} saved" in out and "stopped early: SIGTERM" in out
    assert all((stopped_dir / "outputs" / name).is_file() for name in ADAPTER)

    resumed = _finish(_train(stopped_dir))  # as a restarted process finds its disk
    restored = stopped_dir / "checkpoints" / f"checkpoint-{final}"
    assert f"HF_TOKEN not set, resuming from {restored}" in resumed
    assert "adapter at step 40 saved" in resumed
    _finish(straight)
    for name in ADAPTER:
        expected = (tmp_path / "straight" / "outputs" / name).read_bytes()
        assert (stopped_dir / "outputs" / name).read_bytes() == expected, name


def test_resumed_from_the_final_checkpoint_the_adapter_is_the_uninterrupted_runs(
    tmp_path: Path,
) -> None:
    """A host lost after the final checkpoint but before the result was kept: the replacement
    restores checkpoint-40 (max_steps). The Trainer resumed there would run a 41st step and
    save another adapter; the script keeps the checkpoint's (found by `tether rehearse`)."""
    run_dir = tmp_path / "run"
    _finish(_train(run_dir))
    expected = {name: (run_dir / "outputs" / name).read_bytes() for name in ADAPTER}
    for name in ADAPTER:
        (run_dir / "outputs" / name).unlink()  # the replacement's disk has no outputs
    resumed = _finish(_train(run_dir))  # the newest marked checkpoint is checkpoint-40
    assert f"resuming from {run_dir / 'checkpoints' / 'checkpoint-40'}" in resumed
    assert "adapter at step 40 saved" in resumed
    assert not (run_dir / "checkpoints" / "checkpoint-41").exists()
    for name in ADAPTER:
        assert (run_dir / "outputs" / name).read_bytes() == expected[name], name
