"""The steps the script will train in all, as it says on disk (`progress.total_steps`): what
`tether status` counts step N of M against when the spec gives no `total_steps`. Never a value
the heartbeat contract would refuse."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from tether_agent._hooks import tether_hooks
from tether_agent.progress import StepsOnDisk, current_step, read_steps, total_steps
from tether_agent.protocol import MAX_STEP, HeartbeatRequest


def marked(checkpoint_dir: Path, name: str, state: dict[str, object]) -> None:
    folder = checkpoint_dir / name
    folder.mkdir(parents=True)
    (folder / ".done").write_text("")
    (folder / "trainer_state.json").write_text(json.dumps(state))


def test_the_progress_file_says_it_first(tmp_path: Path) -> None:
    progress = tmp_path / "progress.json"
    progress.write_text(json.dumps({"step": 40, "total_steps": 900}))
    marked(tmp_path / "ckpt", "checkpoint-20", {"global_step": 20, "max_steps": 500})
    assert total_steps(tmp_path / "ckpt", ".done", progress) == 900


def test_else_the_trainers_max_steps_in_its_newest_marked_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    marked(ckpt, "checkpoint-20", {"global_step": 20, "max_steps": 400})
    marked(ckpt, "checkpoint-40", {"global_step": 40, "max_steps": 500})
    progress = tmp_path / "progress"
    progress.write_text("40")  # a bare step says no total
    assert total_steps(ckpt, ".done", progress) == 500


@pytest.mark.parametrize("said", [0, -1, MAX_STEP + 1, 12.5, True, "900", None])
def test_a_value_the_contract_refuses_is_not_sent(tmp_path: Path, said: object) -> None:
    progress = tmp_path / "progress.json"
    progress.write_text(json.dumps({"step": 1, "total_steps": said}))
    marked(tmp_path / "ckpt", "checkpoint-1", {"global_step": 1, "max_steps": said})
    assert total_steps(tmp_path / "ckpt", ".done", progress) is None


def test_nothing_on_disk_says_none(tmp_path: Path) -> None:
    assert total_steps(tmp_path / "missing", ".done", tmp_path / "nope") is None


def test_the_heartbeat_carries_it_within_its_bounds() -> None:
    fields = {"job_id": "j", "generation": 1, "phase": "training", "agent_time": 1.0,
              "gpu": {"available": False}}  # fmt: skip
    assert (
        HeartbeatRequest.model_validate(fields | {"total_steps": MAX_STEP}).total_steps == MAX_STEP
    )
    with pytest.raises(ValueError):
        HeartbeatRequest.model_validate(fields | {"total_steps": 0})


def test_the_hf_callback_writes_the_trainers_max_steps_and_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tether_hooks, "_total_steps", None)
    monkeypatch.setattr(tether_hooks, "_last_progress_write", 0.0)
    monkeypatch.setenv("TETHER_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("TETHER_MARKER", ".done")
    progress = tmp_path / "progress.json"
    monkeypatch.setenv("TETHER_PROGRESS_FILE", str(progress))
    callback = tether_hooks.TetherCallback()
    state = SimpleNamespace(global_step=40, max_steps=500, is_world_process_zero=True)
    control = SimpleNamespace(should_save=False, should_training_stop=False)
    callback.on_step_end(SimpleNamespace(output_dir=str(tmp_path)), state, control)
    assert json.loads(progress.read_text()) == {"step": 40, "total_steps": 500}
    tether_hooks.report_step(41, force=True)  # a later report without it keeps it
    assert json.loads(progress.read_text()) == {"step": 41, "total_steps": 500}
    assert total_steps(tmp_path / "ckpt", ".done", progress) == 500


def test_a_heartbeat_reads_the_step_and_the_total_in_one_pass(tmp_path: Path) -> None:
    """The step and the total come from one listing of the checkpoint dir and one read of each
    file, and agree with what each says alone."""
    ckpt = tmp_path / "ckpt"
    marked(ckpt, "checkpoint-20", {"global_step": 20, "max_steps": 400})
    marked(ckpt, "checkpoint-40", {"global_step": 40, "max_steps": 500})
    progress = tmp_path / "progress.json"
    progress.write_text(json.dumps({"step": 47}))
    on_disk = read_steps(ckpt, ".done", progress)
    assert (on_disk.step, on_disk.total) == (47, 500)
    assert on_disk.step == current_step(ckpt, ".done", progress)
    assert on_disk.total == total_steps(ckpt, ".done", progress)
    assert read_steps(tmp_path / "none", ".done", None) == StepsOnDisk(step=None, total=None)
