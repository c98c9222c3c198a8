"""Checkpoints saved one level below the checkpoint dir (a Trainer's `output_dir` set to a
folder below it): the agent never uploads them, so it names them in heartbeats and the log."""

from __future__ import annotations

from pathlib import Path

from tether_agent.progress import misplaced_checkpoints


def _checkpoint(path: Path, *files: str) -> None:
    path.mkdir(parents=True)
    for name in files:
        (path / name).write_text("x")


def test_marked_or_hf_checkpoints_one_level_down_are_found(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "out" / "checkpoint-5", ".done", "model.bin")
    _checkpoint(tmp_path / "out" / "checkpoint-10", "trainer_state.json")  # HF, no callback
    _checkpoint(tmp_path / "run2" / "step_7", ".done")
    assert misplaced_checkpoints(tmp_path, ".done", limit=4) == [
        "out/checkpoint-10",
        "out/checkpoint-5",
        "run2/step_7",
    ]
    assert misplaced_checkpoints(tmp_path, ".done", limit=2) == [
        "out/checkpoint-10",
        "out/checkpoint-5",
    ]


def test_what_is_not_a_misplaced_checkpoint_is_not_reported(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "checkpoint-5", ".done")  # in its place
    _checkpoint(tmp_path / "checkpoint-5" / "global_step5", ".done")  # inside a marked one
    _checkpoint(tmp_path / "out" / "checkpoint-8", "model.bin")  # being written: no marker yet
    _checkpoint(tmp_path / "out" / "logs", ".done")  # no step in its name
    _checkpoint(tmp_path / "out" / ".checkpoint-9", ".done")  # hidden
    _checkpoint(tmp_path / ".staging" / "checkpoint-9", ".done")  # the agent's own staging
    _checkpoint(tmp_path / "deeper" / "a" / "checkpoint-3", ".done")  # two levels: not looked at
    (tmp_path / "out" / "checkpoint-11").write_text("a file")
    (tmp_path / "elsewhere").mkdir()
    _checkpoint(tmp_path / "elsewhere" / "checkpoint-12", ".done")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")  # symlinks are not followed
    assert misplaced_checkpoints(tmp_path, ".done", limit=4) == ["elsewhere/checkpoint-12"]


def test_a_missing_checkpoint_dir_has_nothing_misplaced(tmp_path: Path) -> None:
    assert misplaced_checkpoints(tmp_path / "absent", ".done", limit=4) == []
