"""A fake training script for the agent tests: writes checkpoints (marker last) on a schedule.

fake_train.py --steps 3 --every-s 0.1 --size-kb 64 [--big-step N --big-mb M]
              [--hold] [--save-on-term] [--exit-code C] [--outputs]

--outputs: before exiting (on its own or on SIGTERM), write a result into $TETHER_OUTPUTS_DIR:
`adapter/weights.bin` (the last step's bytes), `result.txt` and a file named `manifest.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

stopping = False


def on_term(signum, frame):
    global stopping
    stopping = True


def save(root: Path, step: int, size_kb: int, big_mb: int, marker: str) -> None:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True, exist_ok=True)
    (path / "weights.bin").write_bytes(bytes([step % 251]) * size_kb * 1024)
    (path / "state.json").write_text(json.dumps({"step": step}))
    if big_mb:
        (path / "big.bin").write_bytes(os.urandom(big_mb * 1024 * 1024))
    (path / marker).write_text("done")
    print(f"saved {step}", flush=True)


def write_outputs(step: int) -> None:
    out = Path(os.environ["TETHER_OUTPUTS_DIR"])
    (out / "adapter").mkdir(parents=True, exist_ok=True)
    (out / "adapter" / "weights.bin").write_bytes(bytes([step % 251]) * 70_000)
    (out / "result.txt").write_text(f"final step {step}\n")
    (out / "manifest.json").write_text('{"mine": true}')  # the user's own file of that name


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--every-s", type=float, default=0.05)
    parser.add_argument("--size-kb", type=int, default=64)
    parser.add_argument("--big-step", type=int, default=None)
    parser.add_argument("--big-mb", type=int, default=0)
    parser.add_argument("--hold", action="store_true", help="after the last step, wait for SIGTERM")
    parser.add_argument("--save-on-term", action="store_true")
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--outputs", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_term)
    root = Path(os.environ["TETHER_CHECKPOINT_DIR"])
    marker = os.environ["TETHER_MARKER"]
    progress = Path(os.environ["TETHER_PROGRESS_FILE"])
    start = int(os.environ.get("TETHER_RESTORED_STEP", "0"))
    step = start
    for step in range(start + 1, start + args.steps + 1):
        big = args.big_mb if step == args.big_step else 0
        save(root, step, args.size_kb, big, marker)
        progress.write_text(json.dumps({"step": step}))
        time.sleep(args.every_s)
        if stopping:
            break
    while args.hold and not stopping:
        time.sleep(0.02)
    if args.outputs:
        write_outputs(step)
    if stopping:
        if args.save_on_term:
            save(root, step + 100, args.size_kb, 0, marker)
        return 143
    return int(args.exit_code)


if __name__ == "__main__":
    sys.exit(main())
