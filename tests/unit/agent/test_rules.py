"""Pure rules: candidates, remote names, retention, part sizing, progress sources, hooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from tether_agent import gpu
from tether_agent._hooks import tether_hooks
from tether_agent.checkpoints import (
    MAX_PARTS,
    MIB,
    MIN_PART,
    candidate_problem,
    parse_manifest_key,
    parse_remote_dir,
    part_size_for,
    retention_victims,
)
from tether_agent.checkpoints import (
    RemoteCheckpointId as C,
)
from tether_agent.progress import current_step
from tether_agent.protocol import CheckpointRef

SHA = "a" * 64


def ref(step: int, generation: int, key: str | None = None, sha: str | None = SHA) -> CheckpointRef:
    return CheckpointRef(
        step=step,
        generation=generation,
        manifest_key=key or C(step, generation).manifest_key("jobs/x/"),
        manifest_sha256=sha,
    )


@pytest.mark.parametrize(
    ("candidate", "reason"),
    [
        (ref(500, 1), None),
        (ref(500, 2), "written by g2, not an earlier generation"),  # its own generation
        (ref(500, 3), "written by g3, not an earlier generation"),  # a newer one
        (ref(500, 1, sha=None), "no recorded manifest sha256"),
        (ref(500, 1, key="jobs/x/checkpoints/000000000500-g1/manifest.json"), "layout"),
        (ref(500, 1, key="jobs/y/g1/checkpoints/000000000500/manifest.json"), "layout"),
        (ref(500, 1, key="jobs/x/g1/checkpoints/000000000500/../../m.json"), "layout"),
        (ref(400, 1, key=C(500, 1).manifest_key("jobs/x/")), "another step or generation"),
    ],
)
def test_a_candidate_is_tried_only_if_recorded_earlier_and_in_the_layout(
    candidate: CheckpointRef, reason: str | None
) -> None:
    cid, problem = candidate_problem(candidate, "jobs/x/", own_generation=2)
    if reason is None:
        assert (cid, problem) == (C(500, 1), None)
    else:
        assert cid is None and problem is not None and reason in problem


def test_remote_names_round_trip() -> None:
    assert C(500, 2).dirname == "000000000500"
    assert C(500, 2).dir_key("jobs/x/") == "jobs/x/g2/checkpoints/000000000500/"
    assert C(7, 1).manifest_key("jobs/x/") == "jobs/x/g1/checkpoints/000000000007/manifest.json"
    assert parse_remote_dir("000000000500/") == 500
    assert parse_remote_dir("500") is None
    assert parse_remote_dir("000000000500-g2") is None
    key = C(7, 12).manifest_key("jobs/x/")
    assert parse_manifest_key("jobs/x/", key) == C(7, 12)
    assert parse_manifest_key("jobs/y/", key) is None
    assert parse_manifest_key("jobs/x/", "jobs/x/g0/checkpoints/000000000007/manifest.json") is None


def test_retention_touches_only_its_own_generation() -> None:
    found = [C(1, 1), C(2, 1), C(3, 1), C(4, 2), C(5, 2), C(6, 2), C(7, 2), C(9, 3)]
    complete = {C(2, 1), C(3, 1), C(4, 2), C(5, 2), C(6, 2), C(9, 3)}  # 1 and 7: no manifest
    victims = retention_victims(found, complete, own_generation=2, keep_last=2)
    assert victims == [C(4, 2)]  # keeps 6 and 5; 7 may be in flight; g1 and g3 are not its own


def test_retention_deletes_nothing_until_n_complete_exist() -> None:
    assert retention_victims([C(1, 1), C(2, 1)], {C(2, 1)}, 1, keep_last=2) == []


@pytest.mark.parametrize("size", [0, 1, 5 * MIB, 1024 * MIB, 200 * 1024 * MIB, 5 * 1024**4])
def test_part_sizes_fit_r2_limits(size: int) -> None:
    part = part_size_for(size, preferred=16 * MIB)
    assert MIN_PART <= part <= 5 * 1024 * MIB
    assert -(-size // part) <= MAX_PARTS


def test_progress_is_the_most_advanced_source(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-10").mkdir()
    (tmp_path / "checkpoint-10" / "m").write_text("")
    (tmp_path / "checkpoint-20").mkdir()  # no marker: does not count
    assert current_step(tmp_path, "m", None) == 10
    progress = tmp_path / "progress"
    progress.write_text('{"step": 17}')
    assert current_step(tmp_path, "m", progress) == 17
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 19}))
    assert current_step(tmp_path, "m", progress) == 19
    progress.write_text("garbage")
    assert current_step(tmp_path, "m", progress) == 19


def test_hf_callback_marks_saved_checkpoint_and_reports_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("TETHER_MARKER", ".done")
    monkeypatch.setenv("TETHER_PROGRESS_FILE", str(tmp_path / "progress.json"))
    monkeypatch.setattr(tether_hooks, "_total_steps", None)  # no earlier Trainer's max_steps
    callback = tether_hooks.TetherCallback()
    args = SimpleNamespace(output_dir=str(tmp_path))
    state = SimpleNamespace(global_step=40, is_world_process_zero=True)
    (tmp_path / "checkpoint-40").mkdir()
    (tmp_path / "checkpoint-40" / "model.safetensors").write_bytes(b"w")
    assert tether_hooks.latest_checkpoint() is None
    callback.on_save(args, state, control="c")
    assert (tmp_path / "checkpoint-40" / ".done").is_file()
    assert tether_hooks.latest_checkpoint() == str(tmp_path / "checkpoint-40")
    assert json.loads((tmp_path / "progress.json").read_text()) == {"step": 40}


def test_hooks_are_noops_outside_tether(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_CHECKPOINT_DIR", "TETHER_PROGRESS_FILE", "TETHER_MARKER"):
        monkeypatch.delenv(name, raising=False)
    tether_hooks.report_step(5, force=True)
    assert tether_hooks.latest_checkpoint() is None


NOOP_SCRIPT = """
import os, sys, tether_hooks
from types import SimpleNamespace
cb = tether_hooks.TetherCallback()
args = SimpleNamespace(output_dir="out")
state = SimpleNamespace(global_step=3, is_world_process_zero=True)
control = SimpleNamespace(should_save=False, should_training_stop=False)
for event in ("on_init_end", "on_train_begin", "on_epoch_begin", "on_step_begin",
              "on_step_end", "on_save", "on_log", "on_epoch_end", "on_train_end"):
    getattr(cb, event)(args, state, control)
tether_hooks.report_step(3, force=True)
print(type(cb).__mro__[1].__name__, tether_hooks.latest_checkpoint(),
      tether_hooks.stop_requested(), control.should_save, sorted(os.listdir(".")))
"""


def test_hooks_import_in_a_bare_interpreter_and_do_nothing_outside_tether(tmp_path: Path) -> None:
    """No site-packages, no TETHER_* variable: the import works, `latest_checkpoint()` is None,
    every callback event runs and changes nothing, nothing is written."""
    hooks_dir = Path(tether_hooks.__file__).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    done = subprocess.run(
        [sys.executable, "-S", "-I", "-c",
         f"import sys; sys.path.insert(0, {str(hooks_dir)!r})\n{NOOP_SCRIPT}"],
        capture_output=True, text=True, timeout=30, check=False, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "_CallbackEvents None False False []"
    assert done.stderr == ""


def test_gpu_probe_hang_is_reported_unresponsive_at_the_deadline(tmp_path: Path) -> None:
    script = tmp_path / "gpu"
    script.write_text("hung")
    # The deadline is also how long a probe child may take to start and answer: on a loaded
    # machine an interpreter's start alone has taken over 0.5 s, so a healthy answer needs room.
    monitor = gpu.GpuMonitor(gpu.make_probe(f"fake:{script}", timeout_s=2.5), interval_s=1)
    first = monitor.probe_once()
    assert first.available and not first.responsive
    assert "2.5s" in (first.error or "")
    second = monitor.probe_once()
    assert second.unresponsive_s >= 2.5  # the streak grows while it stays hung
    script.write_text("idle")
    recovered = monitor.probe_once()
    assert recovered.responsive and recovered.utilization_pct == 0 and recovered.unresponsive_s == 0


def test_no_nvml_means_no_gpu_not_unhealthy() -> None:
    reading = gpu.make_probe("nvml", timeout_s=10).probe()
    if reading.available:
        pytest.skip("this machine has a working NVML")
    assert reading.responsive
