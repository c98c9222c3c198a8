"""The demo's training script (examples/tiny-cpu/tiny_train.py) keeps its contract on the
standard library alone: a run crashed, SIGTERMed or moved to another checkpoint dir and resumed
writes a final checkpoint byte for byte the uninterrupted run's, and its RNG state survives JSON
exactly. Each run is a process of this interpreter with the hooks on PYTHONPATH, as the agent
starts it."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from tether_agent.training_env import HOOKS_DIR

from tests.paths import ROOT

EXAMPLE = ROOT / "examples" / "tiny-cpu"
MARKER = ".tether-complete"
STATE_FILES = ["optimizer.json", "state.json", "weights.json"]


def _env(**extra: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{HOOKS_DIR}{os.pathsep}{EXAMPLE}",
        "LANG": "C.UTF-8",
        **extra,
    }


def _train(ckpt: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiny_train", "--checkpoint-dir", str(ckpt), *args],
        env=_env(**env),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _files(checkpoint: Path) -> dict[str, bytes]:
    """Every file of a checkpoint but the marker (it holds the time it was written)."""
    return {p.name: p.read_bytes() for p in sorted(checkpoint.iterdir()) if p.name != MARKER}


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted run to step 120."""
    ckpt = tmp_path_factory.mktemp("straight")
    done = _train(ckpt, "--steps", "120", "--checkpoint-every", "20")
    assert done.returncode == 0, done.stderr
    return ckpt


def test_a_checkpoint_holds_the_full_state_in_canonical_json(straight: Path) -> None:
    checkpoint = straight / "checkpoint-120"
    assert sorted(p.name for p in checkpoint.iterdir()) == [MARKER, *STATE_FILES]
    state = json.loads((checkpoint / "state.json").read_text())
    assert state["step"] == 120
    version, internal, _ = state["rng"]
    assert version == 3 and len(internal) == 625  # Random.getstate(), whole
    weights = json.loads((checkpoint / "weights.json").read_text())["w"]
    momentum = json.loads((checkpoint / "optimizer.json").read_text())["m"]
    assert len(weights) == len(momentum) == 16
    for name in STATE_FILES:  # sorted keys, one line: the same state is the same bytes
        raw = (checkpoint / name).read_text()
        assert raw == json.dumps(json.loads(raw), sort_keys=True) + "\n"


def test_a_second_uninterrupted_run_writes_the_same_bytes(straight: Path, tmp_path: Path) -> None:
    assert _train(tmp_path, "--steps", "120", "--checkpoint-every", "20").returncode == 0
    for step in (20, 120):
        assert _files(tmp_path / f"checkpoint-{step}") == _files(straight / f"checkpoint-{step}")
    final = (tmp_path / "final_sha256.txt").read_text()
    assert final == (straight / "final_sha256.txt").read_text()


def test_a_crashed_run_resumes_to_the_same_bytes(straight: Path, tmp_path: Path) -> None:
    argv = ["--steps", "120", "--checkpoint-every", "20"]
    crashed = _train(tmp_path, *argv, "--crash-at-step", "50")
    assert crashed.returncode == 1
    assert "crashing on purpose after step 50" in crashed.stdout
    resumed = _train(tmp_path, *argv)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {tmp_path / 'checkpoint-40'} at step 40" in resumed.stdout
    assert _files(tmp_path / "checkpoint-120") == _files(straight / "checkpoint-120")
    final = (tmp_path / "final_sha256.txt").read_text()
    assert final == (straight / "final_sha256.txt").read_text()


def test_it_resumes_from_the_checkpoint_the_agent_restored(straight: Path, tmp_path: Path) -> None:
    """TETHER_RESUME_FROM wins over a newer marked checkpoint left in the checkpoint dir."""
    restored = tmp_path / "ckpt" / "checkpoint-60"
    shutil.copytree(straight / "checkpoint-60", restored)
    shutil.copytree(straight / "checkpoint-80", tmp_path / "ckpt" / "checkpoint-80")
    done = _train(
        tmp_path / "ckpt", "--steps", "120", "--checkpoint-every", "20",
        TETHER_RESUME_FROM=str(restored),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"resumed from {restored} at step 60" in done.stdout
    assert _files(tmp_path / "ckpt" / "checkpoint-120") == _files(straight / "checkpoint-120")


def test_sigterm_saves_the_step_it_is_at_and_exits_143(straight: Path, tmp_path: Path) -> None:
    argv = ["--steps", "120", "--checkpoint-every", "20"]
    progress = tmp_path / "progress.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "tiny_train", "--checkpoint-dir", str(tmp_path / "ckpt"), *argv,
         "--step-seconds", "0.02"],
        env=_env(TETHER_PROGRESS_FILE=str(progress)),
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "ckpt" / "checkpoint-20" / MARKER).exists():
            assert time.monotonic() < deadline, "no checkpoint-20 within 30 s"
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 143, out
    saved = int(out.split("SIGTERM: saved step ")[1].split()[0])
    assert 20 <= saved < 120
    assert (tmp_path / "ckpt" / f"checkpoint-{saved}" / MARKER).exists()
    resumed = _train(tmp_path / "ckpt", *argv)
    assert resumed.returncode == 0, resumed.stderr
    assert f"at step {saved}" in resumed.stdout
    assert _files(tmp_path / "ckpt" / "checkpoint-120") == _files(straight / "checkpoint-120")


@pytest.fixture
def tiny_train(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(HOOKS_DIR))
    spec = importlib.util.spec_from_file_location("tiny_train", EXAMPLE / "tiny_train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "tiny_train", module)  # its dataclass looks itself up
    spec.loader.exec_module(module)
    return module


def test_the_rng_state_survives_json_exactly_with_a_gaussian_pending(
    tiny_train: ModuleType,
) -> None:
    rng = random.Random(7)
    rng.gauss(0.0, 1.0)  # an odd number of draws: the pair's second value is cached
    saved = json.loads(json.dumps(tiny_train._rng_state(rng)))
    assert isinstance(saved[2], float)
    restored = random.Random()
    tiny_train._set_rng_state(restored, saved)
    assert restored.getstate() == rng.getstate()
    assert [restored.gauss(0.0, 1.0) for _ in range(5)] == [rng.gauss(0.0, 1.0) for _ in range(5)]
