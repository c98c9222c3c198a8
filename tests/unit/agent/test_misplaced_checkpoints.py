"""Checkpoints saved one level below the checkpoint dir (a Trainer's `output_dir` set to a
folder below it), or saved in it but never marked: the agent never uploads them, so it names
them in heartbeats and the log."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tether_agent.progress import MisplacedReporter, misplaced_checkpoints, unmarked_checkpoints


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


def test_complete_looking_unmarked_checkpoints_are_found_newest_first(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "checkpoint-8", "model.safetensors", "trainer_state.json")  # HF
    _checkpoint(tmp_path / "step_12", "model.safetensors", "random_states_0.pkl")  # accelerate
    (tmp_path / "epoch=0-step=20.ckpt").write_text("x")  # Lightning's ModelCheckpoint
    (tmp_path / "ckpt_4.pt").write_text("x")  # a plain torch.save
    assert unmarked_checkpoints(tmp_path, ".done", limit=4, settled_s=0) == [
        "epoch=0-step=20.ckpt",
        "step_12",
        "checkpoint-8",
        "ckpt_4.pt",
    ]
    assert unmarked_checkpoints(tmp_path, ".done", limit=1, settled_s=0) == ["epoch=0-step=20.ckpt"]


def test_marked_or_unfinished_or_stepless_entries_are_not_unmarked_checkpoints(
    tmp_path: Path,
) -> None:
    _checkpoint(tmp_path / "checkpoint-8", "trainer_state.json", ".done")  # marked: uploaded
    _checkpoint(tmp_path / "checkpoint-9", "config.json")  # nothing a finished save writes
    _checkpoint(tmp_path / "final", "model.safetensors")  # no step in its name
    _checkpoint(tmp_path / ".staging-3", "model.safetensors")  # hidden
    (tmp_path / "progress-10.json").write_text("x")  # not a checkpoint file
    assert unmarked_checkpoints(tmp_path, ".done", limit=4, settled_s=0) == []


def test_a_save_still_being_written_is_not_named_until_it_settles(tmp_path: Path) -> None:
    """A script that marks writes the marker right after its save: a large save that has not
    changed for less than `settled_s` may still be on its way to its marker."""
    _checkpoint(tmp_path / "checkpoint-8", "model.safetensors", "trainer_state.json")
    written = max(p.stat().st_mtime for p in (tmp_path / "checkpoint-8").iterdir())
    assert unmarked_checkpoints(tmp_path, ".done", 4, settled_s=120, now=written + 60) == []
    assert unmarked_checkpoints(tmp_path, ".done", 4, settled_s=120, now=written + 121) == [
        "checkpoint-8"
    ]


def _settled(folder: Path) -> None:
    """Every file of `folder` last changed an hour ago."""
    for path in folder.iterdir():
        os.utime(path, (time.time() - 3600, time.time() - 3600))


def test_each_unmarked_checkpoint_is_said_once_with_the_fix(tmp_path: Path) -> None:
    said: list[str] = []
    reporter = MisplacedReporter(tmp_path, ".done", said.append)
    _checkpoint(tmp_path / "checkpoint-8", "trainer_state.json")
    _settled(tmp_path / "checkpoint-8")
    assert reporter.unmarked(4) == ["checkpoint-8"]
    assert reporter.unmarked(4) == ["checkpoint-8"]
    _checkpoint(tmp_path / "checkpoint-16", "trainer_state.json")
    _settled(tmp_path / "checkpoint-16")
    assert reporter.unmarked(4) == ["checkpoint-16", "checkpoint-8"]
    assert len(said) == 2
    assert said[0].startswith("checkpoints that look complete but are not marked, never uploaded")
    assert "checkpoint-8" in said[0] and "checkpoint-16" in said[1]
    assert "checkpoint-8" not in said[1]
    assert "marker file '.done'" in said[0] and "checkpoint_saved(path)" in said[0]
