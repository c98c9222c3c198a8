"""Run by Python at the start of the training process: the agent puts this directory first on
its PYTHONPATH. It installs tether's framework hooks (tether_autohooks: they act only once
transformers' Trainer, accelerate's Accelerator or Lightning's Trainer or ModelCheckpoint is
imported, and never import any of them), unless
the job turns them off (`TETHER_AUTO_HOOKS=0`) or this is not a tether training process (no
`TETHER_CHECKPOINT_DIR`). Then it runs the `sitecustomize` this one hides, if any (the image's
or the venv's own, found further along sys.path), as Python would have."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

_HERE = str(Path(os.path.realpath(__file__)).parent)


def _install() -> None:
    import tether_autohooks

    tether_autohooks.install()


def _chain() -> None:
    """Execute the next `sitecustomize` on sys.path (after this directory), if there is one."""
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == __file__:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("TETHER_CHECKPOINT_DIR"):
    _install()
_chain()
