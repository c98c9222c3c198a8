"""Data-parallel training written the way torch.distributed documents it, for `tether rehearse`:
launched by `torchrun --standalone --nproc_per_node=2 torchrun_ddp_train.py`, a process a rank,
`dist.init_process_group("gloo")` on CPU, `DistributedDataParallel` over a tiny model, a
`DistributedSampler` with `set_epoch` each epoch, fixed seeds. Rank 0 saves every SAVE_EVERY
steps with `torch.save` (model and optimizer state_dicts, the step) to
`<checkpoint dir>/step_<N>.pt`, as the DDP tutorial's checkpointing section does; then the
barrier, so no rank runs ahead of a save. Every rank resumes from the file it is given.

The one line of tether: `tether_hooks.checkpoint_saved(path, step)` after rank 0's save, which
fsyncs the file and writes its sibling marker; the agent uploads nothing before the marker. The
paths come on the command line (`--checkpoint-dir "$TETHER_CHECKPOINT_DIR" --resume
"$TETHER_RESUME_FROM"`), as a script's own flags.

A resumed run draws the batches an uninterrupted one would: the sampler's order depends on its
seed and the epoch only, and the batches of the interrupted epoch already trained are skipped.
`STEP_SECONDS` (env) pauses after each step, so a rehearsal can kill the host mid-run.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from pathlib import Path

import tether_hooks
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

SEED = 2024
BATCH = 8  # per rank


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--resume", default="")
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--save-every", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(SEED)
    generator = torch.Generator().manual_seed(SEED)
    inputs = torch.randn(256, 8, generator=generator)
    dataset = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
        dataset, shuffle=True, seed=SEED
    )
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    ddp_model = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(ddp_model.parameters(), lr=1e-2)
    step = 0
    if args.resume:
        state = torch.load(args.resume, map_location="cpu", weights_only=True)
        ddp_model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["global_step"]
        print(f"rank {rank} resumed from {Path(args.resume).name} at step {step}", flush=True)
    checkpoints = Path(args.checkpoint_dir)
    pause = float(os.environ.get("STEP_SECONDS") or 0)
    while step < args.max_steps:
        epoch, done_in_epoch = divmod(step, len(loader))
        sampler.set_epoch(epoch)
        for x, y in itertools.islice(loader, done_in_epoch, None):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp_model(x), y)
            loss.backward()  # the gradients are averaged over the ranks here
            optimizer.step()
            step += 1
            if step % args.save_every == 0:
                if rank == 0:
                    path = checkpoints / f"step_{step}.pt"
                    state = {
                        "model": ddp_model.module.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "global_step": step,
                    }
                    torch.save(state, path)
                    tether_hooks.checkpoint_saved(path, step)
                dist.barrier()
            if pause:
                time.sleep(pause)
            if step >= args.max_steps:
                break
    if rank == 0:
        print(f"done at step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
