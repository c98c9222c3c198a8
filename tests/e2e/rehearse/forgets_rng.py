"""A deliberately broken training script for `tether rehearse`'s test: it checkpoints its
weights and step but NOT its random generator, so a resumed run draws other batches than an
uninterrupted one and ends with other weights. Standard library only (it runs in the stand-in of
`python:3.12-slim`); `tether_hooks` comes on PYTHONPATH from the agent.

    python forgets_rng.py --steps N --checkpoint-every K      (STEP_SECONDS: sleep per step)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import tether_hooks

DIM = 8


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, required=True)
    args = parser.parse_args()
    root = Path(os.environ["TETHER_CHECKPOINT_DIR"])
    root.mkdir(parents=True, exist_ok=True)
    pause = float(os.environ.get("STEP_SECONDS", "0"))
    rng = random.Random(1234)
    true_w = [float(i) for i in range(DIM)]
    w, step = [0.0] * DIM, 0
    latest = tether_hooks.latest_checkpoint(root)
    if latest:
        saved = json.loads((Path(latest) / "state.json").read_text())
        w, step = saved["w"], saved["step"]  # the bug: rng starts again from its seed
    while step < args.steps:
        x = [rng.gauss(0, 1) for _ in range(DIM)]
        error = sum(a * b for a, b in zip(x, w, strict=True)) - sum(
            a * b for a, b in zip(x, true_w, strict=True)
        )
        w = [wi - 0.01 * error * xi for wi, xi in zip(w, x, strict=True)]
        step += 1
        tether_hooks.report_step(step)
        if step % args.checkpoint_every == 0 or step == args.steps:
            path = root / f"checkpoint-{step}"
            path.mkdir(parents=True, exist_ok=True)
            (path / "state.json").write_text(json.dumps({"step": step, "w": w}))
            tether_hooks.checkpoint_saved(path, step)
        time.sleep(pause)
    return 0


if __name__ == "__main__":
    sys.exit(main())
