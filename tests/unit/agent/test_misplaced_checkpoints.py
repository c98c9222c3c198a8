"""Checkpoints saved anywhere below the checkpoint dir (a Trainer's `output_dir` set to a folder
below it, Lightning's `lightning_logs/version_0/checkpoints/`), or saved in it but never marked:
the agent never uploads them, so it names them in heartbeats and the log, found by one bounded
walk per heartbeat."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tether_agent.progress import (
    NeverUploaded,
    NeverUploadedReporter,
    misplaced_checkpoints,
    never_uploaded_checkpoints,
    unmarked_checkpoints,
)


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
    reporter = NeverUploadedReporter(tmp_path, ".done", said.append)
    _checkpoint(tmp_path / "checkpoint-8", "trainer_state.json")
    _settled(tmp_path / "checkpoint-8")
    assert reporter.scan(4).unmarked == ["checkpoint-8"]
    assert reporter.scan(4).unmarked == ["checkpoint-8"]
    _checkpoint(tmp_path / "checkpoint-16", "trainer_state.json")
    _settled(tmp_path / "checkpoint-16")
    assert reporter.scan(4).unmarked == ["checkpoint-16", "checkpoint-8"]
    assert len(said) == 2
    assert said[0].startswith("checkpoints that look complete but are not marked, never uploaded")
    assert "checkpoint-8" in said[0] and "checkpoint-16" in said[1]
    assert "checkpoint-8" not in said[1]
    assert "marker file '.done'" in said[0] and "checkpoint_saved(path)" in said[0]


def test_checkpoints_several_levels_below_the_checkpoint_dir_are_found(tmp_path: Path) -> None:
    """Lightning's default layout, a Trainer's `output_dir` two folders down, a loop's
    `torch.save` deep in an outputs folder: none is uploaded, each is named by its path."""
    lightning = tmp_path / "lightning_logs" / "version_0"
    _checkpoint(lightning / "checkpoints")
    (lightning / "checkpoints" / "epoch=0-step=10.ckpt").write_text("x")
    (lightning / "hparams.yaml").write_text("x")
    _checkpoint(tmp_path / "run1" / "checkpoint-500", "model.safetensors", "trainer_state.json")
    _checkpoint(tmp_path / "outputs" / "2026-12-04" / "seed_1" / "step_20", ".done")
    (tmp_path / "outputs" / "2026-12-04" / "seed_1" / "ckpt_30.pt").write_text("x")
    assert misplaced_checkpoints(tmp_path, ".done", limit=4) == [
        "run1/checkpoint-500",
        "lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt",
        "outputs/2026-12-04/seed_1/ckpt_30.pt",
        "outputs/2026-12-04/seed_1/step_20",
    ]


def test_the_shallowest_misplaced_checkpoints_are_named_first_up_to_the_limit(
    tmp_path: Path,
) -> None:
    _checkpoint(tmp_path / "a" / "b" / "c" / "step_1", ".done")
    _checkpoint(tmp_path / "z" / "step_2", ".done")
    assert misplaced_checkpoints(tmp_path, ".done", limit=2) == ["z/step_2", "a/b/c/step_1"]
    assert misplaced_checkpoints(tmp_path, ".done", limit=1) == ["z/step_2"]


def test_a_checkpoint_below_the_top_is_misplaced_not_unmarked_whether_marked_or_not(
    tmp_path: Path,
) -> None:
    """A deeper checkpoint needs moving and marking: one report (misplaced) with both fixes."""
    _checkpoint(tmp_path / "out" / "checkpoint-8", "model.safetensors")  # unmarked, complete
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "epoch=1-step=40.ckpt").write_text("x")  # unmarked single file
    _settled(tmp_path / "out" / "checkpoint-8")
    _settled(tmp_path / "logs")
    _checkpoint(tmp_path / "checkpoint-4", "optimizer.pt")  # in its place, unmarked
    _settled(tmp_path / "checkpoint-4")
    assert never_uploaded_checkpoints(tmp_path, ".done", 4) == NeverUploaded(
        unmarked=["checkpoint-4"], misplaced=["logs/epoch=1-step=40.ckpt", "out/checkpoint-8"]
    )


def test_what_lies_deeper_but_is_no_checkpoint_is_not_named(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "runs" / "a" / "step_9", ".done")  # the one checkpoint here
    # A save still being written at the top (DeepSpeed under a Trainer): its parts are no steps.
    _checkpoint(tmp_path / "checkpoint-8" / "global_step8", "mp_rank_00_model_states.pt")
    # A saved model without a step: nothing in it is looked at.
    _checkpoint(tmp_path / "final", "model.safetensors")
    _checkpoint(tmp_path / "final" / "sub" / "step_3", ".done")
    # A dataset: numbered shards, tensors and weights, none named as a checkpoint.
    _checkpoint(tmp_path / "data", "shard_0001.bin", "tokens_0002.pt", "emb_3.safetensors")
    _checkpoint(tmp_path / "data" / "hf", "model-00001-of-00002.safetensors")
    # A marked folder without a step is no checkpoint, nor anything in it.
    _checkpoint(tmp_path / "exported" / "step_4", ".done")
    (tmp_path / "exported" / ".done").write_text("x")
    assert misplaced_checkpoints(tmp_path, ".done", limit=4) == ["runs/a/step_9"]


def test_symlinks_below_the_checkpoint_dir_are_neither_followed_nor_named(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    _checkpoint(outside / "step_5", ".done")
    (outside / "step_6.pt").write_text("x")
    root = tmp_path / "ckpt"
    _checkpoint(root / "run" / "a" / "step_1", ".done")
    (root / "run" / "elsewhere").symlink_to(outside)
    (root / "run" / "step_6.pt").symlink_to(outside / "step_6.pt")
    (root / "run" / "loop").symlink_to(root)  # a loop back up costs nothing either
    assert misplaced_checkpoints(root, ".done", limit=4) == ["run/a/step_1"]


def test_the_walk_stops_at_its_depth(tmp_path: Path) -> None:
    """`max_depth`: how deep a folder may be and still be read. A checkpoint folder in the
    deepest one read is found (its marker is looked up, not read), one below it is not."""
    _checkpoint(tmp_path / "1" / "2" / "3" / "step_4", ".done")  # a folder 4 deep
    (tmp_path / "1" / "2" / "ckpt_5.pt").write_text("x")  # a file in a folder 2 deep
    found = never_uploaded_checkpoints(tmp_path, ".done", 4, max_depth=3).misplaced
    assert found == ["1/2/ckpt_5.pt", "1/2/3/step_4"]
    found = never_uploaded_checkpoints(tmp_path, ".done", 4, max_depth=2).misplaced
    assert found == ["1/2/ckpt_5.pt"]
    assert never_uploaded_checkpoints(tmp_path, ".done", 4, max_depth=1).misplaced == []


def test_the_walk_reads_at_most_its_budget_of_entries_in_all(tmp_path: Path) -> None:
    """A dataset kept in the checkpoint dir uses up the walk's budget, not the heartbeat: the
    top (2 entries), `a-data` (50) and `z-run` (1) are 53 entries read, so 52 miss the last."""
    _checkpoint(tmp_path / "a-data", *(f"row-{n}.txt" for n in range(50)))
    _checkpoint(tmp_path / "z-run")
    (tmp_path / "z-run" / "step_7.pt").write_text("x")
    assert never_uploaded_checkpoints(tmp_path, ".done", 4, max_entries=53).misplaced == [
        "z-run/step_7.pt"
    ]
    assert never_uploaded_checkpoints(tmp_path, ".done", 4, max_entries=52).misplaced == []


def test_a_big_dataset_in_the_checkpoint_dir_leaves_the_shallow_checkpoints_found(
    tmp_path: Path,
) -> None:
    """Breadth-first with the default budget: 5,000 files in folders of a dataset hide no
    checkpoint of the first two levels, and one under the dataset past the budget is not
    looked for."""
    for shard in range(5):
        _checkpoint(tmp_path / "data" / f"part-{shard}", *(f"{n}.txt" for n in range(1000)))
    _checkpoint(tmp_path / "data" / "part-9" / "checkpoint-9", ".done")
    _checkpoint(tmp_path / "out" / "checkpoint-3", "trainer_state.json")
    (tmp_path / "step_2.pt").write_text("x")
    found = never_uploaded_checkpoints(tmp_path, ".done", 4, settled_s=0)
    assert found == NeverUploaded(unmarked=["step_2.pt"], misplaced=["out/checkpoint-3"])


def test_both_kinds_are_said_once_each_with_their_own_fix(tmp_path: Path) -> None:
    said: list[str] = []
    reporter = NeverUploadedReporter(tmp_path / "ckpt", ".done", said.append)
    _checkpoint(tmp_path / "ckpt" / "lightning_logs" / "version_0" / "checkpoints")
    deep = tmp_path / "ckpt" / "lightning_logs" / "version_0" / "checkpoints"
    (deep / "epoch=0-step=10.ckpt").write_text("x")
    _checkpoint(tmp_path / "ckpt" / "checkpoint-8", "trainer_state.json")
    _settled(tmp_path / "ckpt" / "checkpoint-8")
    assert reporter.scan(4) == NeverUploaded(
        unmarked=["checkpoint-8"],
        misplaced=["lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt"],
    )
    reporter.scan(4)
    assert len(said) == 2
    unmarked, misplaced = said
    assert unmarked.startswith("checkpoints that look complete but are not marked")
    assert misplaced.startswith(
        "checkpoints found below the checkpoint dir, never uploaded: "
        "lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt; "
        f"save each checkpoint directly in {tmp_path / 'ckpt'} ("
    )
    # Where each framework saves there, and how the save is marked.
    assert f"Lightning: ModelCheckpoint(dirpath={tmp_path / 'ckpt'})" in misplaced
    assert f"Hugging Face: output_dir={tmp_path / 'ckpt'}" in misplaced
    assert "the marker file '.done' in its folder" in misplaced
    assert "step_50.pt.done for step_50.pt" in misplaced
    assert "tether_hooks.checkpoint_saved(path)" in misplaced
