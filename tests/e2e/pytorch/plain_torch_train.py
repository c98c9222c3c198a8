"""A plain PyTorch loop checkpointing the way PyTorch's tutorial on saving a general checkpoint
does, for `tether rehearse`: `torch.save` of a dict with the model's and the optimizer's
state_dicts and the step every SAVE_EVERY steps, to `<checkpoint dir>/step_<N>.pt`, and
`torch.load` of the file it is given to resume (`load_state_dict` on both). The paths come on
the command line (`--checkpoint-dir "$TETHER_CHECKPOINT_DIR" --resume "$TETHER_RESUME_FROM"`).

The one line of tether: `tether_hooks.checkpoint_saved(path, step)` after each save (the file
fsynced, then its sibling marker), as agent/README.md's "A plain loop" says; its
`tether_hooks.report_step(step)` adds finer progress than the checkpoints (the steps a kill
loses are then known to the step).

Each step's batch comes from a generator seeded by the step, and the model has no randomness of
its own, so a resumed run ends as an uninterrupted one. `STEP_SECONDS` (env) pauses after each
step, so a rehearsal can kill the host mid-run.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import tether_hooks
import torch

SEED = 1234


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(SEED + step)
    x = torch.randn(16, 8, generator=generator)
    return x, x.sum(dim=1, keepdim=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--resume", default="")
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--save-every", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = 0
    if args.resume:
        checkpoint = torch.load(args.resume, weights_only=True)
        model.load_state_dict(checkpoint["model_state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
        step = checkpoint["global_step"]
        print(f"resumed from {Path(args.resume).name} at step {step}", flush=True)
    pause = float(os.environ.get("STEP_SECONDS") or 0)
    while step < args.max_steps:
        x, y = batch(step)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        step += 1
        tether_hooks.report_step(step)
        if step % args.save_every == 0:
            path = Path(args.checkpoint_dir) / f"step_{step}.pt"
            checkpoint = {
                "global_step": step,
                "model_state_dict": model.state_dict(),
                "optimizer_state_dict": optimizer.state_dict(),
                "loss": loss.item(),
            }
            torch.save(checkpoint, path)
            tether_hooks.checkpoint_saved(path, step)
        if pause:
            time.sleep(pause)
    print(f"done at step {step}", flush=True)


if __name__ == "__main__":
    main()
