"""Hooks into the training frameworks, so an unchanged script has its checkpoints marked.

Installed at the training process's start by this directory's `sitecustomize.py` (on a tether
host only: `TETHER_CHECKPOINT_DIR` set, and not turned off with `TETHER_AUTO_HOOKS=0` in the
job's `env`). `install()` adds one finder to `sys.meta_path`; it acts only when
`transformers.trainer` or `accelerate.accelerator` is imported (it never imports them), and
patches the class the module defines once that module has run:

- transformers' `Trainer`: each Trainer gets a `TetherCallback` (unless it has one), which marks
  each `checkpoint-<step>` the Trainer saves under the checkpoint dir, on the main process only;
  SIGTERM keeps its default (the script did not ask for a save on it). `trainer.train()` called
  without `resume_from_checkpoint` resumes from `$TETHER_RESUME_FROM` when the agent restored a
  Trainer checkpoint there.
- accelerate's `Accelerator.save_state(output_dir)`: once it returns (on every process: all of
  them call it), the saved folder is marked on the main process, when it lies under the
  checkpoint dir. Resuming stays the script's one line:
  `accelerator.load_state(os.environ["TETHER_RESUME_FROM"])` when set.

Supported: transformers 4.36 up to (not including) 6, accelerate 0.20 up to 2 (tested with
transformers 5.24 and accelerate 1.16). Standard library only.
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


PATCHES = {"transformers.trainer": patch_trainer, "accelerate.accelerator": patch_accelerator}


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
