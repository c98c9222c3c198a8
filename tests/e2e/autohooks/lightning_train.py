"""A regression model trained the way PyTorch Lightning documents it, with nothing of tether in
it: a `LightningModule`, a `ModelCheckpoint` saving every SAVE_EVERY steps into
`$TETHER_CHECKPOINT_DIR` (default names `epoch=<e>-step=<s>.ckpt`, plus `last.ckpt`), and
`trainer.fit(model, ckpt_path="last")`. tether's auto hooks mark each step-named file and make
the fit resume from the checkpoint the agent restored (agent/README.md, "PyTorch Lightning").

Tiny and deterministic on the CPU: a two-layer MLP on synthetic data drawn from a fixed seed,
no shuffling, no logger. Adam with an `lr` hyperparameter, as most scripts have it: a resumed
run's `.ckpt` then holds the same values in other bytes (pickle's sharing of the strings `step`
and `lr`), which the rehearsal compares by value (tether_local/demo/torch_archive.py).
`STEP_SECONDS` (env) pauses after each step, so a rehearsal can kill the host mid-run.
"""

from __future__ import annotations

import os
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

MAX_EPOCHS = 6  # of 10 steps: a checkpoint at the end of each, at steps 10, 20, ..., 60
SEED = 2024


class Regressor(L.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams["lr"])
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)  # epochs
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


class StepPause(L.Callback):
    """Sleeps after each training step (the rehearsal's pace)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        if self.seconds:
            time.sleep(self.seconds)


def synthetic_data(count: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(SEED)
    x = torch.randn(count, 8, generator=generator)
    y = x.sum(dim=1, keepdim=True).sin()
    return TensorDataset(x, y)


def main() -> None:
    torch.set_num_threads(1)  # the same sums in the same order in every run
    L.seed_everything(SEED, workers=True)
    loader = DataLoader(synthetic_data(40), batch_size=4, num_workers=0)  # 10 steps an epoch
    checkpoints = ModelCheckpoint(
        dirpath=os.environ.get("TETHER_CHECKPOINT_DIR", "checkpoints"),
        save_top_k=-1,
        save_last=True,
    )
    trainer = L.Trainer(
        max_epochs=MAX_EPOCHS,
        accelerator="cpu",
        devices=1,
        deterministic=True,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoints, StepPause(float(os.environ.get("STEP_SECONDS") or 0))],
    )
    trainer.fit(Regressor(), loader, ckpt_path="last")
    print(f"lightning_train.py: finished at step {trainer.global_step}")


if __name__ == "__main__":
    main()
