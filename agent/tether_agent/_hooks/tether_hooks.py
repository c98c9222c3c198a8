"""Tell tether when a checkpoint is complete and how far training got. Standard library only.

Two ways onto the training process's path, one source: the agent puts this directory on the
training command's PYTHONPATH, and the same file is the `tether-hooks` distribution (this
directory's pyproject.toml), which a user's image or laptop can `pip install`, so the script runs
unchanged outside tether. Outside tether (no `TETHER_*` variables) every function is a harmless
no-op: `latest_checkpoint()` returns None, `report_step` writes nothing, the callback only marks
the checkpoints the Trainer saves.

Hugging Face Trainer::

    import tether_hooks
    trainer = Trainer(..., callbacks=[tether_hooks.TetherCallback()])
    trainer.train(resume_from_checkpoint=tether_hooks.latest_checkpoint())

Plain PyTorch loop::

    import tether_hooks
    tether_hooks.report_step(step, total_steps=n)       # every step (cheap); n: optional
    tether_hooks.checkpoint_saved(saved_dir_or_file)    # after each complete save

The agent exports `TETHER_CHECKPOINT_DIR`, `TETHER_MARKER` and `TETHER_PROGRESS_FILE`
(agent/README.md lists everything it sets), and `TETHER_CHECKPOINT_INTERVAL_S`, the interval
tether computed for this host: `TetherCallback(save_by_time=True)` saves on it by time, besides
the Trainer's own `save_steps`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

DEFAULT_MARKER = ".tether-complete"
_MIN_PROGRESS_INTERVAL_S = 1.0
_last_progress_write = 0.0
_total_steps: int | None = None  # the last total the script gave `report_step`
_stop_requested = threading.Event()


def checkpoint_dir() -> Path | None:
    value = os.environ.get("TETHER_CHECKPOINT_DIR")
    return Path(value) if value else None


def marker_name() -> str:
    return os.environ.get("TETHER_MARKER") or DEFAULT_MARKER


def checkpoint_saved(path: str | os.PathLike[str], step: int | None = None) -> None:
    """Mark the checkpoint `path` complete: call after every file of it is written. A
    directory gets the marker inside it; a single file (`epoch=0-step=50.ckpt`) gets a sibling
    marker next to it, its name plus `.` and the marker's name without its leading dot
    (`epoch=0-step=50.ckpt.tether-complete`). The agent uploads nothing before the marker."""
    saved = Path(path)
    files = [saved] if saved.is_file() else [e for e in saved.rglob("*") if e.is_file()]
    for entry in files:  # data must be on disk before the marker
        with entry.open("rb") as f:
            os.fsync(f.fileno())
    if saved.is_file():
        directory = saved.parent
        marker = sibling_marker(saved)
    else:
        directory = saved
        marker = directory / marker_name()
    tmp = directory / f".{marker.name}.tmp"
    tmp.write_text(json.dumps({"step": step, "time": time.time()}))
    tmp.replace(marker)  # atomic: the marker appears complete or not at all
    if step is not None:
        report_step(step, force=True)


def sibling_marker(path: str | os.PathLike[str]) -> Path:
    """The marker next to the single-file checkpoint `path` that says it is complete
    (`epoch=0-step=50.ckpt` → `epoch=0-step=50.ckpt.tether-complete`)."""
    saved = Path(path)
    return saved.parent / f"{saved.name}.{marker_name().lstrip('.') or marker_name()}"


def report_step(step: int, force: bool = False, total_steps: int | None = None) -> None:
    """Record the current training step (rate-limited to about once a second) and, once the
    script has given it, the steps it will train in all (`tether status` shows step N of M)."""
    global _last_progress_write, _total_steps
    if isinstance(total_steps, int) and total_steps > 0:
        _total_steps = total_steps
    target = os.environ.get("TETHER_PROGRESS_FILE")
    now = time.monotonic()
    if not target or (not force and now - _last_progress_write < _MIN_PROGRESS_INTERVAL_S):
        return
    _last_progress_write = now
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    record: dict[str, int] = {"step": int(step)}
    if _total_steps is not None:
        record["total_steps"] = _total_steps
    tmp.write_text(json.dumps(record))
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


def checkpoint_interval_s() -> float | None:
    """The checkpoint interval tether computed for this host (`TETHER_CHECKPOINT_INTERVAL_S`),
    or None outside tether (or with a value that is not a positive number)."""
    try:
        value = float(os.environ.get("TETHER_CHECKPOINT_INTERVAL_S") or "nan")
    except ValueError:
        return None
    return value if value > 0 else None  # NaN compares false: None


class SaveClock:
    """When a save is due by time: every `interval_s` seconds of `clock` since the last save
    (or since training began). Seconds from `clock`, `time.monotonic` unless a test passes one."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last = clock()

    def due(self) -> bool:
        return self._clock() - self._last >= self.interval_s

    def saved(self) -> None:
        self._last = self._clock()


def _agree_on_rank_zero(flag: bool, args: Any) -> bool:
    """Rank 0's `flag` on every rank of a distributed run: every rank must save at the same
    step (a save gathers across ranks), and their clocks differ. One small broadcast a step.
    A run that never imported torch.distributed is not distributed: nothing is imported here."""
    dist: Any = sys.modules.get("torch.distributed")
    torch: Any = sys.modules.get("torch")
    if dist is None or torch is None:
        return flag
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return flag
    tensor = torch.tensor([int(flag)], device=getattr(args, "device", None))
    dist.broadcast(tensor, src=0)
    return bool(tensor.item())


def stop_requested() -> bool:
    """True once a SIGTERM reached a `TetherCallback` run: the Trainer saved a final marked
    checkpoint and stopped early. Check it after `trainer.train()` returns, to skip what only a
    finished run should do."""
    return _stop_requested.is_set()


class _SigtermWatch:
    """SIGTERM (the agent stopping training: stop, cancel, lease expiry, a replaced host) sets
    a flag instead of killing the process, so the Trainer saves at the end of the current step.
    A second SIGTERM acts as the handler before it would have (by default: the process dies)."""

    def __init__(self) -> None:
        self._previous: Any = None
        self._installed = False

    def install(self) -> None:
        if self._installed or threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if not _stop_requested.is_set():
            _stop_requested.set()
            print("[tether_hooks] SIGTERM: saving a checkpoint at the end of this step, then "
                  "stopping", file=sys.stderr, flush=True)  # fmt: skip
            return
        previous = self._previous
        self.uninstall()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


class _CallbackEvents:
    """Every event of transformers' `TrainerCallback`, doing nothing: the callback's base when
    transformers is not installed, so it stays a complete callback object."""

    def _pass(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        return None

    on_init_end = on_train_begin = on_train_end = on_epoch_begin = on_epoch_end = _pass
    on_step_begin = on_pre_optimizer_step = on_optimizer_step = on_substep_end = _pass
    on_step_end = on_evaluate = on_predict = on_save = on_log = on_prediction_step = _pass


def _callback_base() -> type:
    """A real TrainerCallback when transformers is installed, `_CallbackEvents` otherwise."""
    try:
        from transformers import TrainerCallback
    except ImportError:
        return _CallbackEvents
    base: type = TrainerCallback
    return base


def _make_callback() -> type:
    class TetherCallback(_callback_base()):  # type: ignore[misc]
        """Marks each checkpoint the Trainer saves (`output_dir/checkpoint-<step>`), reports
        the step, and on SIGTERM makes the Trainer save a final checkpoint at the end of the
        current step and stop. Set `output_dir` to the job's checkpoint dir
        (TETHER_CHECKPOINT_DIR).

        `save_by_time=True` also saves every `interval_s` seconds (default: tether's
        `TETHER_CHECKPOINT_INTERVAL_S`; unset outside tether, and then nothing changes), timed
        from the start of training and from each save. `clock` is for tests."""

        def __init__(
            self,
            save_by_time: bool = False,
            *,
            interval_s: float | None = None,
            clock: Callable[[], float] = time.monotonic,
        ) -> None:
            self._sigterm = _SigtermWatch()
            self.save_by_time = save_by_time
            self.interval_s = interval_s
            self._clock = clock
            self._save_clock: SaveClock | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            self._sigterm.install()
            interval = self.interval_s if self.interval_s is not None else checkpoint_interval_s()
            if self.save_by_time and interval is not None and interval > 0:
                self._save_clock = SaveClock(interval, self._clock)
            return control

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            self._sigterm.uninstall()
            return control

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            report_step(state.global_step, total_steps=getattr(state, "max_steps", None))
            if _stop_requested.is_set():
                control.should_save = True
                control.should_training_stop = True
            elif (
                self._save_clock is not None
                and not control.should_save  # the same on every rank: the broadcast is too
                and _agree_on_rank_zero(self._save_clock.due(), args)
            ):
                control.should_save = True
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if self._save_clock is not None:
                self._save_clock.saved()
            if not getattr(state, "is_world_process_zero", True):
                return control
            saved = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if saved.is_dir():
                checkpoint_saved(saved, state.global_step)
            return control

    TetherCallback.__module__ = __name__
    return TetherCallback


_callback: type | None = None


def __getattr__(name: str) -> Any:
    """`TetherCallback` is built on first use: importing tether_hooks stays cheap (no
    transformers import) for a script that never uses the callback."""
    global _callback
    if name == "TetherCallback":
        if _callback is None:
            _callback = _make_callback()
        return _callback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
