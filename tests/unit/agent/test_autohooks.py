"""tether's auto hooks (agent/tether_agent/_hooks/sitecustomize.py and tether_autohooks.py):
installed at the training process's start from the hooks dir on PYTHONPATH, idle until
transformers' Trainer or accelerate's Accelerator is imported, then each checkpoint saved under
the checkpoint dir is marked; off with TETHER_AUTO_HOOKS=0. The start-up behaviour runs in a
child Python with the hooks dir on PYTHONPATH, as the agent starts training."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from tether_agent.training_env import HOOKS_DIR

MARKER = ".done"


def _version(name: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(p) for p in importlib.metadata.version(name).split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


TRANSFORMERS = _version("transformers")
ACCELERATE = _version("accelerate")
needs_transformers = pytest.mark.skipif(
    TRANSFORMERS is None or not (4, 36) <= TRANSFORMERS < (6, 0),
    reason="the Trainer hook supports transformers >= 4.36, < 6",
)
needs_accelerate = pytest.mark.skipif(
    ACCELERATE is None or not (0, 20) <= ACCELERATE < (2, 0),
    reason="the save_state hook supports accelerate >= 0.20, < 2",
)


@pytest.fixture
def autohooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """tether_autohooks imported as the training process imports it (the hooks dir on sys.path)."""
    monkeypatch.syspath_prepend(str(HOOKS_DIR))
    monkeypatch.setenv("TETHER_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("TETHER_MARKER", MARKER)
    monkeypatch.delenv("TETHER_PROGRESS_FILE", raising=False)
    monkeypatch.delenv("TETHER_AUTO_HOOKS", raising=False)
    (tmp_path / "ckpt").mkdir()
    import tether_autohooks

    yield tether_autohooks


def _child(tmp_path: Path, code: str, **env: str) -> dict[str, object]:
    """Run `code` in a fresh Python started as the agent starts training; its last stdout line,
    JSON."""
    base = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(HOOKS_DIR),
        "TETHER_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "TETHER_MARKER": MARKER,
        "HF_HUB_OFFLINE": "1",
    }
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    full = {k: v for k, v in {**base, **env}.items() if v is not None}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


STARTUP = """
    import json, sys
    print(json.dumps({
        "finder": [type(f).__name__ for f in sys.meta_path].count("FrameworkFinder"),
        "imported": sorted(m for m in ("transformers", "accelerate", "torch", "tether_hooks")
                           if m in sys.modules),
    }))
"""


def test_the_hooks_wait_for_a_framework_import_and_import_none_themselves(
    tmp_path: Path,
) -> None:
    assert _child(tmp_path, STARTUP) == {"finder": 1, "imported": []}


@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_tether_auto_hooks_0_turns_them_off(tmp_path: Path, value: str) -> None:
    assert _child(tmp_path, STARTUP, TETHER_AUTO_HOOKS=value) == {"finder": 0, "imported": []}


def test_outside_tether_nothing_is_installed(tmp_path: Path) -> None:
    assert _child(tmp_path, STARTUP, TETHER_CHECKPOINT_DIR="") == {"finder": 0, "imported": []}


def test_a_sitecustomize_of_the_image_still_runs(tmp_path: Path) -> None:
    """Ours comes first on sys.path and hides the image's (or the venv's): it runs it after."""
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import builtins\nbuiltins.IMAGE_SITECUSTOMIZE = 1\n")
    code = """
        import builtins, json, sys
        print(json.dumps({
            "own": getattr(builtins, "IMAGE_SITECUSTOMIZE", 0),
            "finder": [type(f).__name__ for f in sys.meta_path].count("FrameworkFinder"),
        }))
    """
    pythonpath = f"{HOOKS_DIR}{os.pathsep}{own}"
    assert _child(tmp_path, code, PYTHONPATH=pythonpath) == {"own": 1, "finder": 1}


ACCELERATE_SAVES = """
    import json, os, sys
    import torch
    from accelerate import Accelerator
    import tether_autohooks

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    ckpt = os.environ["TETHER_CHECKPOINT_DIR"]
    accelerator.save_state(os.path.join(ckpt, "step_3"))
    accelerator.save_state("elsewhere/step_4")  # not under the checkpoint dir
    wrapped = Accelerator.save_state
    tether_autohooks.install()  # again, and the module patched again: no second wrapper
    tether_autohooks.patch_accelerator(sys.modules["accelerate.accelerator"])
    print(json.dumps({
        "marked": sorted(p.parent.name for p in __import__("pathlib").Path(".").rglob(".done")),
        "step": json.load(open(os.path.join(ckpt, "step_3", ".done")))["step"],
        "once": Accelerator.save_state is wrapped
        and not hasattr(wrapped.__wrapped__, "__wrapped__"),
        "finders": [type(f).__name__ for f in sys.meta_path].count("FrameworkFinder"),
    }))
"""


@needs_accelerate
def test_accelerate_save_state_is_marked_under_the_checkpoint_dir_only(tmp_path: Path) -> None:
    got = _child(tmp_path, ACCELERATE_SAVES)
    assert got == {"marked": ["step_3"], "step": 3, "once": True, "finders": 1}


@needs_accelerate
def test_accelerate_save_state_is_not_marked_with_the_hooks_off(tmp_path: Path) -> None:
    code = ACCELERATE_SAVES.replace('"step": json.load', '"step": 0 and json.load')
    got = _child(tmp_path, code, TETHER_AUTO_HOOKS="0")
    assert got["marked"] == []


TRAINERS = """
    import json
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    import tether_hooks

    def trainer(output_dir, **kwargs):
        model = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=4, n_embd=8, n_layer=1,
                                           n_head=1))
        args = TrainingArguments(output_dir=output_dir, use_cpu=True, report_to="none")
        return Trainer(model=model, args=args, **kwargs)

    def ours(t):
        return [type(c).__name__ for c in t.callback_handler.callbacks
                if "Tether" in type(c).__name__]

    print(json.dumps({
        "plain": ours(trainer("ckpt")),
        "own": ours(trainer("ckpt", callbacks=[tether_hooks.TetherCallback()])),
        "patched": Trainer.__init__.__wrapped__.__qualname__,
    }))
"""


@needs_transformers
def test_every_trainer_gets_one_tether_callback(tmp_path: Path) -> None:
    got = _child(tmp_path, TRAINERS)
    assert got == {
        "plain": ["AutoTetherCallback"],
        "own": ["TetherCallback"],  # the script's own: not a second one
        "patched": "Trainer.__init__",
    }


def test_only_folders_under_the_checkpoint_dir_are_marked(
    autohooks: object, tmp_path: Path
) -> None:
    mark = autohooks.mark_if_under  # type: ignore[attr-defined]
    inside, outside = tmp_path / "ckpt" / "step_7", tmp_path / "other" / "step_7"
    for folder in (inside, outside):
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"w")
    assert mark(outside) is False and not (outside / MARKER).exists()
    assert mark(tmp_path / "ckpt") is False and not (tmp_path / "ckpt" / MARKER).exists()
    assert mark(inside / "missing") is False
    assert mark(inside) is True
    assert json.loads((inside / MARKER).read_text())["step"] == 7
    assert [p.name for p in inside.iterdir() if p.name.startswith(".")] == [MARKER]  # no tmp


def test_the_trainer_resumes_from_a_restored_trainer_checkpoint_only(
    autohooks: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    restored = autohooks._restored_trainer_checkpoint  # type: ignore[attr-defined]
    assert restored() is None  # nothing restored
    folder = tmp_path / "ckpt" / "checkpoint-20"
    folder.mkdir()
    monkeypatch.setenv("TETHER_RESUME_FROM", str(folder))
    assert restored() is None  # not a Trainer's checkpoint (accelerate's, a plain loop's)
    (folder / "trainer_state.json").write_text("{}")
    assert restored() == str(folder)


RESUMES = """
    import json, os, shutil
    import torch
    from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback,
                              TrainingArguments)

    class Steps(TrainerCallback):
        def __init__(self):
            self.first = None
        def on_step_end(self, args, state, control, **kwargs):
            self.first = self.first or state.global_step

    def run(max_steps, resume=None):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=4, n_embd=8, n_layer=1,
                                           n_head=1))
        ids = torch.tensor([1, 2, 3, 4])
        args = TrainingArguments(output_dir=os.environ["TETHER_CHECKPOINT_DIR"], use_cpu=True,
                                 max_steps=max_steps, save_steps=2, report_to="none",
                                 per_device_train_batch_size=1, disable_tqdm=True)
        steps = Steps()
        trainer = Trainer(model=model, args=args, callbacks=[steps],
                          train_dataset=[{"input_ids": ids, "labels": ids}] * 8)
        trainer.train() if resume is None else trainer.train(resume_from_checkpoint=resume)
        return steps.first

    ckpt = os.environ["TETHER_CHECKPOINT_DIR"]
    first_run = run(2)  # saves checkpoint-2, then as if the host were replaced:
    shutil.move(os.path.join(ckpt, "checkpoint-2"), os.path.join(os.environ["HOME"], "restored"))
    os.environ["TETHER_RESUME_FROM"] = os.path.join(os.environ["HOME"], "restored")
    print(json.dumps({
        "first_run": first_run,
        "resumed": run(4),  # no resume argument: the restored checkpoint's step 2, then 3
        "scripts_own_choice": run(4, resume=False),  # the script said no: from the start
    }))
"""


@needs_transformers
def test_train_without_resume_arguments_resumes_from_the_restored_checkpoint(
    tmp_path: Path,
) -> None:
    assert _child(tmp_path, RESUMES) == {"first_run": 1, "resumed": 3, "scripts_own_choice": 1}


LIGHTNING = _version("lightning")
needs_lightning = pytest.mark.skipif(
    LIGHTNING is None or not (2, 0) <= LIGHTNING < (3, 0),
    reason="the Lightning hooks support lightning >= 2.0, < 3",
)


@pytest.mark.parametrize(
    "name",
    [
        "epoch=0-step=20.ckpt",
        "epoch=3-step=20-val_loss=0.12.ckpt",
        "epoch=0-step=20-v1.ckpt",
        "step=20.ckpt",
        "epoch=4.ckpt",
        "last.ckpt",
        "last-v1.ckpt",
        "model.h5",
        "ckpt.500",
        "epoch=0-global_step=20-7.ckpt",
    ],
)
def test_the_hooks_read_a_files_step_as_the_agent_does(autohooks: object, name: str) -> None:
    """The hooks mark only files the agent uploads: they must read the same step from a name."""
    from tether_agent.checkpoints import local_step

    assert autohooks.file_step_of(name) == local_step(name)  # type: ignore[attr-defined]


def test_fit_resumes_from_a_restored_file_for_none_and_for_a_last_that_finds_nothing(
    autohooks: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    restored = autohooks._restored_lightning_checkpoint  # type: ignore[attr-defined]
    ckpt = tmp_path / "ckpt"
    assert restored(None) is None and restored("last") is None  # nothing restored
    folder = ckpt / "checkpoint-20"
    folder.mkdir()
    monkeypatch.setenv("TETHER_RESUME_FROM", str(folder))
    assert restored(None) is None  # a folder: another framework's checkpoint
    file = ckpt / "epoch=1-step=20.ckpt"
    file.write_bytes(b"ckpt")
    monkeypatch.setenv("TETHER_RESUME_FROM", str(file))
    assert restored(None) == str(file)
    assert restored("last") == str(file)  # Lightning would find no last checkpoint
    assert restored("best") is None and restored(str(tmp_path / "mine.ckpt")) is None
    (ckpt / "last.ckpt").write_bytes(b"newer")
    assert restored("last") is None  # Lightning's own last checkpoint is there: its choice
    assert restored(None) == str(file)


LIGHTNING_SAVES = """
    import json, os, sys
    from pathlib import Path
    import torch
    from PACKAGE import LightningModule, Trainer
    from PACKAGE.callbacks import ModelCheckpoint
    from PACKAGE.plugins import TorchCheckpointIO
    from torch.utils.data import DataLoader, TensorDataset

    ckpt = Path(os.environ["TETHER_CHECKPOINT_DIR"])
    stale_marker_during_write = []

    class WatchedIO(TorchCheckpointIO):
        def save_checkpoint(self, checkpoint, path, storage_options=None):
            marker = Path(f"{path}.done")
            stale_marker_during_write.append(marker.exists())
            super().save_checkpoint(checkpoint, path, storage_options)

    class Tiny(LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(2, 1)
        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).sum()
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def trainer(callbacks, steps):
        return Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False,
                       enable_progress_bar=False, enable_model_summary=False,
                       callbacks=callbacks, plugins=[WatchedIO()])

    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=1)
    keep_two = ModelCheckpoint(dirpath=ckpt, every_n_train_steps=2, save_top_k=2,
                               monitor="step", mode="max", save_last=True)
    run = trainer([keep_two], 6)
    run.fit(Tiny(), data)
    run.save_checkpoint(ckpt / "epoch=0-step=6.ckpt")  # again, over a marked file
    run.save_checkpoint(Path(os.environ["HOME"]) / "step=6.ckpt")  # not in the checkpoint dir
    print(json.dumps({
        "files": sorted(p.name for p in ckpt.iterdir() if not p.name.startswith(".")),
        "marker_step": json.loads((ckpt / "epoch=0-step=6.ckpt.done").read_text())["step"],
        "progress": json.loads(Path(os.environ["TETHER_PROGRESS_FILE"]).read_text())["step"],
        "stale_marker_during_write": stale_marker_during_write,
        "elsewhere_marked": (Path(os.environ["HOME"]) / "step=6.ckpt.done").exists(),
    }))
"""


@needs_lightning
@pytest.mark.parametrize("package", ["lightning.pytorch", "pytorch_lightning"])
def test_lightning_checkpoints_are_marked_and_no_marker_outlives_its_file(
    tmp_path: Path, package: str
) -> None:
    progress = str(tmp_path / "progress.json")
    code = LIGHTNING_SAVES.replace("PACKAGE", package)
    got = _child(tmp_path, code, TETHER_PROGRESS_FILE=progress)
    assert got == {
        # top-2 by step: steps 2 and 4 were deleted, and their markers went first
        "files": [
            "epoch=0-step=4.ckpt",
            "epoch=0-step=4.ckpt.done",
            "epoch=0-step=6.ckpt",
            "epoch=0-step=6.ckpt.done",
            "last.ckpt",  # no step in its name: never uploaded, never marked
        ],
        "marker_step": 6,
        "progress": 6,
        # steps 2, 4, 6 and last.ckpt after each, then the two saves of the script's own
        "stale_marker_during_write": [False] * 8,
        "elsewhere_marked": False,
    }


@needs_lightning
def test_lightning_checkpoints_are_not_marked_with_the_hooks_off(tmp_path: Path) -> None:
    code = LIGHTNING_SAVES.replace("PACKAGE", "lightning.pytorch").replace(
        '"marker_step": json.loads', '"marker_step": 0 and json.loads'
    )
    progress = str(tmp_path / "progress.json")
    code = code.replace('"progress": json.loads', '"progress": 0 and json.loads')
    got = _child(tmp_path, code, TETHER_AUTO_HOOKS="0", TETHER_PROGRESS_FILE=progress)
    assert got["files"] == ["epoch=0-step=4.ckpt", "epoch=0-step=6.ckpt", "last.ckpt"]


LIGHTNING_RESUMES = """
    import json, os, shutil
    from pathlib import Path
    import torch
    from lightning.pytorch import Callback, LightningModule, Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    ckpt = Path(os.environ["TETHER_CHECKPOINT_DIR"])

    class Tiny(LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(2, 1)
        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).sum()
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class FirstStep(Callback):
        first = None
        def on_train_batch_end(self, trainer, *args):
            self.first = self.first or trainer.global_step

    def run(steps, *fit_args, **fit_kwargs):
        first = FirstStep()
        trainer = Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False,
                          enable_progress_bar=False, enable_model_summary=False,
                          callbacks=[ModelCheckpoint(dirpath=ckpt, every_n_train_steps=2,
                                                     save_top_k=-1), first])
        data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=1)
        trainer.fit(Tiny(), data, *fit_args, **fit_kwargs)
        return first.first

    first_run = run(2)  # saves epoch=0-step=2.ckpt, then as if the host were replaced:
    restored = Path(os.environ["HOME"]) / "restored" / "epoch=0-step=2.ckpt"
    restored.parent.mkdir()
    shutil.move(ckpt / "epoch=0-step=2.ckpt", restored)
    os.environ["TETHER_RESUME_FROM"] = str(restored)
    shutil.rmtree(ckpt); ckpt.mkdir()
    print(json.dumps({
        "first_run": first_run,
        "none": run(4),
        "last": run(4, ckpt_path="last"),
        "last_positional": run(4, None, None, "last"),
        "scripts_own_path": run(6, ckpt_path=str(ckpt / "epoch=0-step=4.ckpt")),
    }))
"""


@needs_lightning
def test_fit_resumes_from_the_restored_checkpoint_unless_given_another(tmp_path: Path) -> None:
    assert _child(tmp_path, LIGHTNING_RESUMES) == {
        "first_run": 1,
        "none": 3,  # resumed at the restored step 2: its first step is 3
        "last": 3,
        "last_positional": 3,
        "scripts_own_path": 5,  # the script's own file (saved at step 4 by the runs before)
    }
