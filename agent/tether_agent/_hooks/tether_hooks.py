"""Tell tether when a checkpoint is complete and how far training got. Standard library only:
the agent puts this directory on the training process's PYTHONPATH, so the user's own Python
imports it without any of the agent's dependencies.

Hugging Face Trainer::

    from tether_hooks import TetherCallback
    trainer = Trainer(..., callbacks=[TetherCallback()])
    trainer.train(resume_from_checkpoint=tether_hooks.latest_checkpoint())

Plain PyTorch loop::

    import tether_hooks
    tether_hooks.report_step(step)                      # every step (cheap)
    tether_hooks.checkpoint_saved(path_of_saved_dir)    # after each complete save

The agent exports `TETHER_CHECKPOINT_DIR`, `TETHER_MARKER` and `TETHER_PROGRESS_FILE`; outside
tether (no variables) every function is a harmless no-op.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

DEFAULT_MARKER = ".tether-complete"
_MIN_PROGRESS_INTERVAL_S = 1.0
_last_progress_write = 0.0


def checkpoint_dir() -> Path | None:
    value = os.environ.get("TETHER_CHECKPOINT_DIR")
    return Path(value) if value else None


def marker_name() -> str:
    return os.environ.get("TETHER_MARKER") or DEFAULT_MARKER


def checkpoint_saved(path: str | os.PathLike[str], step: int | None = None) -> None:
    """Mark the checkpoint directory `path` complete: call after every file in it is written.
    The agent uploads nothing from a directory before this marker exists."""
    directory = Path(path)
    for entry in directory.rglob("*"):  # data must be on disk before the marker
        if entry.is_file():
            with entry.open("rb") as f:
                os.fsync(f.fileno())
    marker = directory / marker_name()
    tmp = directory / f".{marker_name()}.tmp"
    tmp.write_text(json.dumps({"step": step, "time": time.time()}))
    tmp.replace(marker)  # atomic: the marker appears complete or not at all
    if step is not None:
        report_step(step, force=True)


def report_step(step: int, force: bool = False) -> None:
    """Record the current training step (rate-limited to about once a second)."""
    global _last_progress_write
    target = os.environ.get("TETHER_PROGRESS_FILE")
    now = time.monotonic()
    if not target or (not force and now - _last_progress_write < _MIN_PROGRESS_INTERVAL_S):
        return
    _last_progress_write = now
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"step": int(step)}))
    tmp.replace(path)


def latest_checkpoint(directory: str | os.PathLike[str] | None = None) -> str | None:
    """The newest marked checkpoint directory (the one the agent restored, after a move), or
    None for a fresh start. Pass it to `resume_from_checkpoint` or your own loader."""
    root = Path(directory) if directory else checkpoint_dir()
    if root is None or not root.is_dir():
        return None
    best: tuple[int, Path] | None = None
    for entry in root.iterdir():
        match = re.search(r"(\d+)(?!.*\d)", entry.name)
        if match and not entry.name.startswith(".") and (entry / marker_name()).is_file():
            step = int(match.group(1))
            if best is None or step > best[0]:
                best = (step, entry)
    return str(best[1]) if best else None


def _callback_base() -> type:
    """A real TrainerCallback when transformers is installed, a duck-typed object otherwise."""
    try:
        from transformers import TrainerCallback
    except ImportError:
        return object
    base: type = TrainerCallback
    return base


class TetherCallback(_callback_base()):  # type: ignore[misc]
    """Writes the marker into `output_dir/checkpoint-<step>` after each save and the progress
    file at each step. Set `output_dir` to the job's checkpoint dir (TETHER_CHECKPOINT_DIR)."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        report_step(state.global_step)
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if not getattr(state, "is_world_process_zero", True):
            return control
        saved = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if saved.is_dir():
            checkpoint_saved(saved, state.global_step)
        return control
