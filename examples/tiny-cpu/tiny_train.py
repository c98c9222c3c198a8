"""A tiny deterministic training script: the demo's job (examples/tiny-cpu.yaml).

    python -m tiny_train --steps N --checkpoint-every K

Linear regression by SGD with momentum in numpy. Each checkpoint holds the FULL state (weights,
momentum, step, the RNG's bit-generator state), resumes from the newest marked checkpoint in
`$TETHER_CHECKPOINT_DIR`, and the marker is written after the save is complete. At the end the
sha256 of the final weights goes to `<checkpoint dir>/final_sha256.txt`, so an interrupted and
resumed run can be compared with an uninterrupted one bit for bit.

Needs numpy (this project's only dependency) and `tether_hooks`, which the tether agent puts on
the training command's PYTHONPATH; to run it outside tether, put the agent's `tether_agent/_hooks`
directory on PYTHONPATH yourself.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import tether_hooks

DIM = 32
BATCH = 64
MIB = 1024 * 1024


def _write_ballast(path: Path, step: int, mib: int) -> None:
    """Extra bytes that make a checkpoint big (uploads and restores take time) without being
    part of the state: a pattern derived from the step, so every run writes the same bytes."""
    block = hashlib.sha256(f"ballast-{step}".encode()).digest() * (MIB // 32)
    with path.open("wb") as out:
        for _ in range(mib):
            out.write(block)


def _save(root: Path, step: int, state: dict[str, Any], ballast_mb: int = 0) -> Path:
    path = root / f"checkpoint-{step}"
    tmp = root / f".tmp-checkpoint-{step}"
    tmp.mkdir(parents=True, exist_ok=True)
    np.savez(tmp / "model.npz", w=state["w"], m=state["m"])
    (tmp / "state.json").write_text(json.dumps({"step": step, "rng": state["rng"]}))
    if ballast_mb:
        _write_ballast(tmp / "ballast.bin", step, ballast_mb)
    if path.exists():
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    tmp.rename(path)
    tether_hooks.checkpoint_saved(path, step)
    return path


def _load(path: Path) -> tuple[int, dict[str, Any]]:
    with np.load(path / "model.npz") as data:
        w, m = data["w"].copy(), data["m"].copy()
    meta = json.loads((path / "state.json").read_text())
    return int(meta["step"]), {"w": w, "m": m, "rng": meta["rng"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, required=True)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("TETHER_CHECKPOINT_DIR"))
    parser.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step (demo)")
    parser.add_argument("--crash-at-step", type=int, default=None, help="exit 1 after this step")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--ballast-mb", type=int, default=0, help="MiB of filler in each checkpoint (demo)"
    )
    args = parser.parse_args(argv)
    if not args.checkpoint_dir:
        parser.error("--checkpoint-dir or TETHER_CHECKPOINT_DIR is required")
    root = Path(args.checkpoint_dir)
    root.mkdir(parents=True, exist_ok=True)

    rng = np.random.default_rng(args.seed)
    true_w = np.random.default_rng(0).normal(size=DIM)  # the task itself is fixed
    state: dict[str, Any] = {"w": np.zeros(DIM), "m": np.zeros(DIM), "rng": None}
    step = 0
    latest = tether_hooks.latest_checkpoint(root)
    if latest:
        step, state = _load(Path(latest))
        rng.bit_generator.state = state["rng"]
        print(f"resumed from {latest} at step {step}", flush=True)

    stopping = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    while step < args.steps and not stopping:
        x = rng.normal(size=(BATCH, DIM))
        y = x @ true_w + 0.01 * rng.normal(size=BATCH)
        grad = 2 * x.T @ (x @ state["w"] - y) / BATCH
        state["m"] = 0.9 * state["m"] + grad
        state["w"] = state["w"] - 0.01 * state["m"]
        step += 1
        tether_hooks.report_step(step)
        if step % args.checkpoint_every == 0 or step == args.steps:
            state["rng"] = rng.bit_generator.state
            _save(root, step, state, args.ballast_mb)
            loss = float(np.mean((x @ state["w"] - y) ** 2))
            print(f"step {step} loss {loss:.6f} checkpoint saved", flush=True)
        if args.crash_at_step is not None and step >= args.crash_at_step:
            print(f"crashing on purpose after step {step}", flush=True)
            return 1
        if args.step_seconds:
            time.sleep(args.step_seconds)
    if stopping:
        state["rng"] = rng.bit_generator.state
        # the final checkpoint the agent uploads on the way out
        _save(root, step, state, args.ballast_mb)
        print(f"SIGTERM: saved step {step}", flush=True)
        return 143
    digest = hashlib.sha256(state["w"].tobytes()).hexdigest()
    (root / "final_sha256.txt").write_text(digest + "\n")
    print(f"done at step {step}: weights sha256 {digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
