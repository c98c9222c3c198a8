"""A training loop written the way accelerate documents checkpointing, with nothing of tether in
it but the one line that resumes: `accelerator.save_state` every SAVE_EVERY steps into
`$TETHER_CHECKPOINT_DIR/step_<N>`, and `accelerator.load_state(os.environ["TETHER_RESUME_FROM"])`
when the agent restored a checkpoint. tether's auto hooks mark each saved folder complete
(agent/README.md, "accelerate").

The step comes back from the saved state itself (an object registered for checkpointing), not
from the folder's name. Each step's batch is drawn from a generator seeded by the step, so a
resumed run sees the batches an uninterrupted one does. `STEP_SECONDS` (env) pauses after each
step, so a rehearsal can kill the host mid-run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

MAX_STEPS = 60
SAVE_EVERY = 10
SEED = 4321


class Progress:
    """The training step, saved and loaded with the checkpoint."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = state["step"]


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(SEED + step)
    x = torch.randn(16, 8, generator=generator)
    return x, x.sum(dim=1, keepdim=True)


def main() -> None:
    torch.set_num_threads(1)
    set_seed(SEED)  # random, numpy and torch: their states are saved with each checkpoint
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    if os.environ.get("TETHER_RESUME_FROM"):
        accelerator.load_state(os.environ["TETHER_RESUME_FROM"])
    checkpoints = os.environ.get("TETHER_CHECKPOINT_DIR", "checkpoints")
    pause = float(os.environ.get("STEP_SECONDS") or 0)
    while progress.step < MAX_STEPS:
        x, y = batch(progress.step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        progress.step += 1
        time.sleep(pause)
        if progress.step % SAVE_EVERY == 0:
            accelerator.save_state(str(Path(checkpoints) / f"step_{progress.step}"))
    accelerator.print(f"accelerate_train.py: finished at step {progress.step}")


if __name__ == "__main__":
    main()
