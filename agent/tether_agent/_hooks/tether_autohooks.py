"""Hooks into the training frameworks, so an unchanged script has its checkpoints marked.

Installed at the training process's start by this directory's `sitecustomize.py` (on a tether
host only: `TETHER_CHECKPOINT_DIR` set, and not turned off with `TETHER_AUTO_HOOKS=0` in the
job's `env`). `install()` adds one finder to `sys.meta_path`; it acts only when a module named in
`PATCHES` (transformers' trainer, accelerate's accelerator, Lightning's trainer and
ModelCheckpoint) is imported (it never imports them), and patches the class the module defines
once that module has run:

- transformers' `Trainer`: each Trainer gets a `TetherCallback` (unless it has one), which marks
  each `checkpoint-<step>` the Trainer saves under the checkpoint dir, on the main process only;
  SIGTERM keeps its default (the script did not ask for a save on it). `trainer.train()` called
  without `resume_from_checkpoint` resumes from `$TETHER_RESUME_FROM` when the agent restored a
  Trainer checkpoint there.
- accelerate's `Accelerator.save_state(output_dir)`: once it returns (on every process: all of
  them call it), the saved folder is marked on the main process, when it lies under the
  checkpoint dir. Resuming stays the script's one line:
  `accelerator.load_state(os.environ["TETHER_RESUME_FROM"])` when set.

- PyTorch Lightning's `Trainer` (`lightning.pytorch` and `pytorch_lightning` alike):
  `save_checkpoint` (what `ModelCheckpoint` saves with, and a script's own calls) removes the
  file's old sibling marker before writing and, once every process is done, marks the file on
  the main process when it lies in the checkpoint dir and its name carries a step
  (`epoch=0-step=20.ckpt`; `last.ckpt` stays unmarked, the agent never uploads it). The marker
  goes before the file when `ModelCheckpoint` deletes one (top-k), so none outlives its
  checkpoint. Each training batch reports the step when a `ModelCheckpoint` saves into the
  checkpoint dir. `trainer.fit(..., ckpt_path=None)` resumes from `$TETHER_RESUME_FROM` when
  that is a file (a restored `.ckpt`), and so does `ckpt_path="last"` when the checkpoint dir
  holds no `last*.ckpt` (on a replacement host it never does); any other `ckpt_path` is the
  script's own choice. Checkpoints written by an asynchronous CheckpointIO are not marked.

Supported: transformers 4.36 up to (not including) 6, accelerate 0.20 up to 2, Lightning 2.0 up
to 3 (tested with transformers 5.24, accelerate 1.16 and lightning 2.6.6). Standard library only.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

OFF_VALUES = {"0", "false", "no", "off"}
_PATCHED = "_tether_autohooks_patched"


def enabled(env: Any = None) -> bool:
    """On a tether host (TETHER_CHECKPOINT_DIR set), unless TETHER_AUTO_HOOKS turns it off."""
    env = os.environ if env is None else env
    off = str(env.get("TETHER_AUTO_HOOKS", "")).strip().lower() in OFF_VALUES
    return bool(env.get("TETHER_CHECKPOINT_DIR")) and not off


def under_checkpoint_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` lies inside $TETHER_CHECKPOINT_DIR (not the dir itself)."""
    root = os.environ.get("TETHER_CHECKPOINT_DIR")
    if not root:
        return False
    inside = Path(os.path.realpath(path))
    return Path(os.path.realpath(root)) in inside.parents


def saves_into_checkpoint_dir(directory: Any) -> bool:
    """Whether `directory` (a ModelCheckpoint's dirpath) is $TETHER_CHECKPOINT_DIR or in it."""
    root = os.environ.get("TETHER_CHECKPOINT_DIR")
    if not root or not isinstance(directory, (str, os.PathLike)) or "://" in str(directory):
        return False
    inside = Path(os.path.realpath(directory))
    return inside == Path(os.path.realpath(root)) or under_checkpoint_dir(inside)


def step_of(name: str) -> int | None:
    """The step a checkpoint folder's name ends in (`checkpoint-40`, `step_40`), if any."""
    match = re.search(r"(\d+)(?!.*\d)", name)
    return int(match.group(1)) if match else None


def mark_if_under(path: str | os.PathLike[str]) -> bool:
    """Mark the saved folder `path` complete when it is under the checkpoint dir."""
    if not (Path(path).is_dir() and under_checkpoint_dir(path)):
        return False
    import tether_hooks

    tether_hooks.checkpoint_saved(path, step_of(Path(path).name))
    return True


def _auto_callback_class() -> type:
    import tether_hooks

    base: type = tether_hooks.TetherCallback

    class AutoTetherCallback(base):  # type: ignore[misc]
        """TetherCallback as the auto hook adds it: marks only checkpoints under the checkpoint
        dir, and leaves SIGTERM alone (the script did not ask to save on it)."""

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if not under_checkpoint_dir(Path(args.output_dir) / f"checkpoint-{state.global_step}"):
                return control  # a Trainer saving elsewhere: not a checkpoint tether keeps
            return super().on_save(args, state, control, **kwargs)

    return AutoTetherCallback


def _has_tether_callback(trainer: Any) -> bool:
    handler = getattr(trainer, "callback_handler", None)
    callbacks = getattr(handler, "callbacks", ())
    return any(type(c).__name__ in ("TetherCallback", "AutoTetherCallback") for c in callbacks)


def _restored_trainer_checkpoint() -> str | None:
    resume = os.environ.get("TETHER_RESUME_FROM")
    if resume and (Path(resume) / "trainer_state.json").is_file():
        return resume
    return None


def patch_trainer(module: ModuleType) -> None:
    """Wrap `module.Trainer`'s __init__ (add the callback) and train (resume); once."""
    trainer_class: Any = getattr(module, "Trainer", None)
    if trainer_class is None or getattr(trainer_class, _PATCHED, False):
        return
    original_init = trainer_class.__init__
    original_train = trainer_class.train

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if not _has_tether_callback(self):
            self.add_callback(_auto_callback_class()())

    @functools.wraps(original_train)
    def train(self: Any, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        if resume_from_checkpoint is None:
            resume_from_checkpoint = _restored_trainer_checkpoint()
            if resume_from_checkpoint is not None:
                print(f"[tether] resuming the Trainer from {resume_from_checkpoint}",
                      file=sys.stderr, flush=True)  # fmt: skip
        return original_train(self, resume_from_checkpoint, *args, **kwargs)

    trainer_class.__init__ = __init__
    trainer_class.train = train
    setattr(trainer_class, _PATCHED, True)


def patch_accelerator(module: ModuleType) -> None:
    """Wrap `module.Accelerator.save_state` so the saved folder is marked; once."""
    accelerator_class: Any = getattr(module, "Accelerator", None)
    if accelerator_class is None or getattr(accelerator_class, _PATCHED, False):
        return
    original = accelerator_class.save_state

    @functools.wraps(original)
    def save_state(self: Any, output_dir: Any = None, *args: Any, **kwargs: Any) -> Any:
        location = original(self, output_dir, *args, **kwargs)
        saved = location if isinstance(location, (str, os.PathLike)) else output_dir
        if saved is not None and under_checkpoint_dir(saved):
            if getattr(self, "num_processes", 1) > 1:
                self.wait_for_everyone()  # every process's files written before the marker
            if getattr(self, "is_main_process", True):
                mark_if_under(saved)
        return location

    accelerator_class.save_state = save_state
    setattr(accelerator_class, _PATCHED, True)


_STEP_KEY = re.compile(r"(?<![A-Za-z0-9_])step=(\d+)")
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")


def file_step_of(name: str) -> int | None:
    """The step the agent reads from a single-file checkpoint's name (tether_agent's
    `checkpoints.local_step`, which a unit test holds this to): the number after `step=`, else
    the last number of the name without a plain `.suffix`; None for `last.ckpt`."""
    stem, dot, suffix = name.rpartition(".")
    if not (dot and stem and re.fullmatch(r"[A-Za-z][A-Za-z0-9]{0,15}", suffix)):
        stem = name
    match = _STEP_KEY.search(stem) or _LAST_NUMBER.search(stem)
    return int(match.group(1)) if match else None


def lightning_checkpoint_file(path: Any) -> Path | None:
    """`path` (a Lightning save target) as a file the agent uploads: in the checkpoint dir,
    with a step in its name. None otherwise (elsewhere, a URL, `last.ckpt`)."""
    if not isinstance(path, (str, os.PathLike)) or "://" in str(path):
        return None
    file = Path(path)
    if not under_checkpoint_dir(file) or file_step_of(file.name) is None:
        return None
    return file


def _drop_sibling_marker(file: Path) -> None:
    import tether_hooks

    tether_hooks.sibling_marker(file).unlink(missing_ok=True)


def _writes_asynchronously(trainer: Any) -> bool:
    checkpoint_io = getattr(getattr(trainer, "strategy", None), "checkpoint_io", None)
    return any(c.__name__ == "AsyncCheckpointIO" for c in type(checkpoint_io).__mro__)


def _restored_lightning_checkpoint(ckpt_path: Any) -> str | None:
    """The restored file to resume `fit` from instead of `ckpt_path`: for None, and for "last"
    when the checkpoint dir holds no `last*.ckpt` (Lightning would find nothing)."""
    resume = os.environ.get("TETHER_RESUME_FROM")
    if not resume or not Path(resume).is_file():
        return None
    if ckpt_path is None:
        return resume
    root = os.environ.get("TETHER_CHECKPOINT_DIR")
    if ckpt_path == "last" and root and not any(Path(root).glob("last*.ckpt")):
        return resume
    return None


def patch_lightning_trainer(module: ModuleType) -> None:
    """Wrap `module.Trainer`'s save_checkpoint (mark the file) and fit (resume); once."""
    trainer_class: Any = getattr(module, "Trainer", None)
    if trainer_class is None or getattr(trainer_class, _PATCHED, False):
        return
    original_save = trainer_class.save_checkpoint
    original_fit = trainer_class.fit

    @functools.wraps(original_save)
    def save_checkpoint(self: Any, filepath: Any, *args: Any, **kwargs: Any) -> Any:
        file = lightning_checkpoint_file(filepath)
        if file is not None and self.is_global_zero:
            _drop_sibling_marker(file)  # an overwrite: the old marker must not vouch for it
        result = original_save(self, filepath, *args, **kwargs)  # ends with a barrier
        if file is not None and self.is_global_zero and file.is_file():
            if _writes_asynchronously(self):
                print(f"[tether] not marking {file.name}: an asynchronous CheckpointIO may "
                      "still be writing it", file=sys.stderr, flush=True)  # fmt: skip
            else:
                import tether_hooks

                tether_hooks.checkpoint_saved(file, int(self.global_step))
        return result

    @functools.wraps(original_fit)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        position = 4  # model, train_dataloaders, val_dataloaders, datamodule, ckpt_path
        given = args[position] if len(args) > position else kwargs.get("ckpt_path")
        restored = _restored_lightning_checkpoint(given)
        if restored is not None:
            print(f"[tether] resuming Lightning's fit from {restored}",
                  file=sys.stderr, flush=True)  # fmt: skip
            if len(args) > position:
                args = (*args[:position], restored, *args[position + 1 :])
            else:
                kwargs["ckpt_path"] = restored
        return original_fit(self, *args, **kwargs)

    trainer_class.save_checkpoint = save_checkpoint
    trainer_class.fit = fit
    setattr(trainer_class, _PATCHED, True)


def patch_model_checkpoint(module: ModuleType) -> None:
    """Wrap `module.ModelCheckpoint`'s _remove_checkpoint (the marker goes first) and
    on_train_batch_end (report the step); once."""
    callback_class: Any = getattr(module, "ModelCheckpoint", None)
    if callback_class is None or getattr(callback_class, _PATCHED, False):
        return
    original_remove = callback_class._remove_checkpoint
    original_batch_end = callback_class.on_train_batch_end

    @functools.wraps(original_remove)
    def _remove_checkpoint(self: Any, trainer: Any, filepath: Any, *args: Any) -> Any:
        file = lightning_checkpoint_file(filepath)
        if file is not None and trainer.is_global_zero:
            _drop_sibling_marker(file)
        return original_remove(self, trainer, filepath, *args)

    @functools.wraps(original_batch_end)
    def on_train_batch_end(self: Any, trainer: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_batch_end(self, trainer, *args, **kwargs)
        if trainer.is_global_zero and saves_into_checkpoint_dir(getattr(self, "dirpath", None)):
            import tether_hooks

            tether_hooks.report_step(int(trainer.global_step))
        return result

    callback_class._remove_checkpoint = _remove_checkpoint
    callback_class.on_train_batch_end = on_train_batch_end
    setattr(callback_class, _PATCHED, True)


PATCHES = {
    "transformers.trainer": patch_trainer,
    "accelerate.accelerator": patch_accelerator,
    "lightning.pytorch.trainer.trainer": patch_lightning_trainer,
    "pytorch_lightning.trainer.trainer": patch_lightning_trainer,
    "lightning.pytorch.callbacks.model_checkpoint": patch_model_checkpoint,
    "pytorch_lightning.callbacks.model_checkpoint": patch_model_checkpoint,
}


class _PatchingLoader(importlib.abc.Loader):
    """The module's own loader, then the patch once the module has run."""

    def __init__(self, loader: Any, fullname: str) -> None:
        self._loader = loader
        self._fullname = fullname

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        result: ModuleType | None = self._loader.create_module(spec)
        return result

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        PATCHES[self._fullname](module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, … for tools
        return getattr(self._loader, name)


class FrameworkFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for the modules in PATCHES it asks the other finders and wraps the
    loader they return. Any other import costs one dict lookup."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, fullname)
                return spec
        return None


def install() -> bool:
    """Add the finder to sys.meta_path (first, once), unless turned off; patch a framework
    module already imported. True when the hooks are on."""
    if not enabled():
        return False
    if not any(isinstance(f, FrameworkFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, FrameworkFinder())
    for name, patch in PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    return True
