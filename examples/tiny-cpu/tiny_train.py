"""A tiny deterministic training script: the demo's job (examples/tiny-cpu/job.yaml).

    python tiny_train.py --steps N --checkpoint-every K

Linear regression by SGD with momentum on plain Python floats, batches drawn from
`random.Random(seed)`: the standard library only, so it runs on a stock `python:3.12-slim`.

Each checkpoint is a directory `checkpoint-<step>` holding the FULL state, written so that the
same state always gives the same bytes (sorted keys, no timestamps, floats as `repr`, which
reads back exactly):

- `weights.json`: `{"w": [...]}`, the model;
- `optimizer.json`: `{"learning_rate": …, "m": [...], "momentum": …}`, the momentum buffer;
- `state.json`: `{"rng": [version, [625 ints], gauss_next], "step": N}`, the generator's
  `Random.getstate()` as JSON, restored with `setstate`.

The marker is written after the save is complete (`tether_hooks.checkpoint_saved`). It resumes
from `$TETHER_RESUME_FROM` (the checkpoint the agent restored), else from the newest marked
checkpoint in the checkpoint dir. At the end the sha256 of the final `weights.json` goes to
`<checkpoint dir>/final_sha256.txt`, so an interrupted and resumed run can be compared with an
uninterrupted one bit for bit. On SIGTERM it saves the step it is at and exits 143.

`tether_hooks` comes on PYTHONPATH from the tether agent; to run it outside tether,
`pip install agent/tether_agent/_hooks` (the `tether-hooks` distribution) or put that directory
on PYTHONPATH yourself.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import tether_hooks

DIM = 16
BATCH = 16
LEARNING_RATE = 0.01
MOMENTUM = 0.9
NOISE = 0.01
TASK_SEED = 0  # the task itself (the true weights) is fixed; --seed draws the batches
MIB = 1024 * 1024
WEIGHTS = "weights.json"
OPTIMIZER = "optimizer.json"
STATE = "state.json"


@dataclass
class TrainState:
    step: int
    w: list[float]
    m: list[float]
    rng: random.Random


def _json_bytes(value: object) -> bytes:
    """Canonical JSON: the same value always gives the same bytes; floats round-trip."""
    return (json.dumps(value, sort_keys=True, allow_nan=False) + "\n").encode()


def weights_bytes(w: list[float]) -> bytes:
    """`weights.json` as written: `final_sha256.txt` is the sha256 of these bytes."""
    return _json_bytes({"w": w})


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss_next = rng.getstate()
    return [version, list(internal), gauss_next]


def _set_rng_state(rng: random.Random, saved: Any) -> None:
    version, internal, gauss_next = saved
    if not (isinstance(version, int) and isinstance(internal, list)):
        raise ValueError(f"not a Random.getstate(): {str(saved)[:80]}")
    rng.setstate((version, tuple(int(i) for i in internal), gauss_next))


def _write_ballast(path: Path, step: int, mib: int) -> None:
    """Extra bytes that make a checkpoint big (uploads and restores take time) without being
    part of the state: a pattern derived from the step, so every run writes the same bytes."""
    block = hashlib.sha256(f"ballast-{step}".encode()).digest() * (MIB // 32)
    with path.open("wb") as out:
        for _ in range(mib):
            out.write(block)


def _save(root: Path, state: TrainState, ballast_mb: int = 0) -> Path:
    path = root / f"checkpoint-{state.step}"
    tmp = root / f".tmp-checkpoint-{state.step}"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / WEIGHTS).write_bytes(weights_bytes(state.w))
    optimizer = {"learning_rate": LEARNING_RATE, "m": state.m, "momentum": MOMENTUM}
    (tmp / OPTIMIZER).write_bytes(_json_bytes(optimizer))
    (tmp / STATE).write_bytes(_json_bytes({"rng": _rng_state(state.rng), "step": state.step}))
    if ballast_mb:
        _write_ballast(tmp / "ballast.bin", state.step, ballast_mb)
    if path.exists():
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    tmp.rename(path)
    tether_hooks.checkpoint_saved(path, state.step)
    return path


def _load(path: Path) -> TrainState:
    weights = json.loads((path / WEIGHTS).read_text())
    optimizer = json.loads((path / OPTIMIZER).read_text())
    meta = json.loads((path / STATE).read_text())
    w, m = [float(v) for v in weights["w"]], [float(v) for v in optimizer["m"]]
    if len(w) != DIM or len(m) != DIM:
        raise ValueError(f"{path}: {len(w)} weights and {len(m)} momenta, expected {DIM}")
    rng = random.Random()
    _set_rng_state(rng, meta["rng"])
    return TrainState(step=int(meta["step"]), w=w, m=m, rng=rng)


def _dot(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))  # correctly rounded: portable


def train_step(state: TrainState, true_w: list[float]) -> float:
    """One SGD-with-momentum step on a fresh batch; the batch's loss before the update."""
    rng = state.rng
    xs = [[rng.gauss(0.0, 1.0) for _ in range(DIM)] for _ in range(BATCH)]
    errors = [_dot(x, state.w) - (_dot(x, true_w) + NOISE * rng.gauss(0.0, 1.0)) for x in xs]
    grad = [2.0 * math.fsum(e * x[j] for e, x in zip(errors, xs, strict=True)) / BATCH
            for j in range(DIM)]  # fmt: skip
    state.m = [MOMENTUM * m + g for m, g in zip(state.m, grad, strict=True)]
    state.w = [w - LEARNING_RATE * m for w, m in zip(state.w, state.m, strict=True)]
    state.step += 1
    return math.fsum(e * e for e in errors) / BATCH


def _resume_dir(root: Path) -> str | None:
    return os.environ.get("TETHER_RESUME_FROM") or tether_hooks.latest_checkpoint(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
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

    task = random.Random(TASK_SEED)
    true_w = [task.gauss(0.0, 1.0) for _ in range(DIM)]
    state = TrainState(step=0, w=[0.0] * DIM, m=[0.0] * DIM, rng=random.Random(args.seed))
    latest = _resume_dir(root)
    if latest:
        state = _load(Path(latest))
        print(f"resumed from {latest} at step {state.step}", flush=True)

    stopping = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    while state.step < args.steps and not stopping:
        loss = train_step(state, true_w)
        tether_hooks.report_step(state.step)
        if state.step % args.checkpoint_every == 0 or state.step == args.steps:
            _save(root, state, args.ballast_mb)
            print(f"step {state.step} loss {loss:.6f} checkpoint saved", flush=True)
        if args.crash_at_step is not None and state.step >= args.crash_at_step:
            print(f"crashing on purpose after step {state.step}", flush=True)
            return 1
        if args.step_seconds:
            time.sleep(args.step_seconds)
    if stopping:
        _save(root, state, args.ballast_mb)  # the final checkpoint the agent uploads on the way out
        print(f"SIGTERM: saved step {state.step}", flush=True)
        return 143
    digest = hashlib.sha256(weights_bytes(state.w)).hexdigest()
    (root / "final_sha256.txt").write_text(digest + "\n")
    print(f"done at step {state.step}: weights sha256 {digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
