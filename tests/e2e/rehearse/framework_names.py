"""A training script for `tether rehearse`'s test that checkpoints in a framework's own style,
standard library only (it runs in the stand-in of `python:3.12-slim`; `tether_hooks` comes on
PYTHONPATH from the agent):

- `--layout file`: each checkpoint one file, `ckpt-<step>.pt` (as a plain `torch.save` or
  Lightning's `ModelCheckpoint` writes), marked with `tether_hooks.checkpoint_saved(path)`;
- `--layout accelerate`: each checkpoint a folder `step_<step>` (accelerate's checkpointing
  example), whose name the script parses back on resume: restored under another name, it crashes.

It resumes from `TETHER_RESUME_FROM`, weights, step and random generator, so a resumed run ends
as an uninterrupted one. `--record-paths` writes into each checkpoint the absolute paths it ran
with (where it saved, HOME, its working directory), as Lightning's `.ckpt` records its
ModelCheckpoint's `dirpath`: the same on every host only if every host sees the same paths.

    python framework_names.py --layout file|accelerate --steps N --checkpoint-every K
                              [--step-seconds S] [--seed X] [--record-paths]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import tether_hooks

DIM = 8


def load(resume: Path, layout: str) -> dict[str, Any]:
    if layout == "file":
        state: dict[str, Any] = json.loads(resume.read_text())
        return state
    step = int(resume.name.split("_")[-1])  # as accelerate's example does: the name is the step
    state = json.loads((resume / "state.json").read_text())
    if state["step"] != step:
        raise SystemExit(f"{resume.name} holds step {state['step']}")
    return state


def save(root: Path, layout: str, state: dict[str, Any], record_paths: bool) -> None:
    if record_paths:
        where = {"dirpath": str(root.resolve()), "home": os.environ["HOME"], "cwd": str(Path.cwd())}
        state = {**state, "paths": where}
    data = json.dumps(state, sort_keys=True)
    step = state["step"]
    if layout == "file":
        path = root / f"ckpt-{step}.pt"
        path.write_text(data)
    else:
        path = root / f"step_{step}"
        path.mkdir(parents=True, exist_ok=True)
        (path / "state.json").write_text(data)
    tether_hooks.checkpoint_saved(path, step)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layout", choices=("file", "accelerate"), required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, required=True)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--record-paths", action="store_true")
    args = parser.parse_args()
    root = Path(os.environ["TETHER_CHECKPOINT_DIR"])
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    true_w = [float(i) for i in range(DIM)]
    w, step = [0.0] * DIM, 0
    resume = os.environ.get("TETHER_RESUME_FROM")
    if resume:
        state = load(Path(resume), args.layout)
        w, step = state["w"], state["step"]
        version, internal, gauss = state["rng"]
        rng.setstate((version, tuple(internal), gauss))
        print(f"resumed from {Path(resume).name} at step {step}", flush=True)
    while step < args.steps:
        x = [rng.gauss(0, 1) for _ in range(DIM)]
        error = sum(a * (b - t) for a, b, t in zip(x, w, true_w, strict=True))
        w = [wi - 0.01 * error * xi for wi, xi in zip(w, x, strict=True)]
        step += 1
        tether_hooks.report_step(step)
        if step % args.checkpoint_every == 0 or step == args.steps:
            state = {"step": step, "w": w, "rng": rng.getstate()}
            save(root, args.layout, state, args.record_paths)
        time.sleep(args.step_seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
