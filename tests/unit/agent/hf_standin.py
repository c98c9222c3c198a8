"""A minimal stand-in for Hugging Face transformers' Trainer, as far as a callback sees it
(transformers is not in the dev venv: torch alone is gigabytes). It follows transformers 4.x:
`TrainerState` and `TrainerControl` with the real field names, `CallbackHandler.call_event`
calling `getattr(callback, event)(args, state, control, **kwargs)` on every callback and taking a
returned control, the flow callback's `save_steps`/`max_steps` rules, and the inner loop's order
(on_step_begin resets the step's flags; on_step_end; save to `output_dir/checkpoint-<step>` then
on_save when `should_save`; break on `should_training_stop`; on_train_end). What a checkpoint
holds is a small stand-in too: `trainer_state.json` (the real name, which the agent also reads
for progress) and `weights.json`.

Run as a script, it is a training command for the agent: `python hf_standin.py --max-steps N
--save-steps K [--step-s S] [--output-dir D]`, output_dir `$TETHER_CHECKPOINT_DIR` by default
(else ./checkpoints), resuming from `tether_hooks.latest_checkpoint(output_dir)`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TRAINER_STATE_NAME = "trainer_state.json"


@dataclass
class TrainingArguments:
    output_dir: str
    max_steps: int
    save_steps: int = 500


@dataclass
class TrainerState:
    epoch: float | None = None
    global_step: int = 0
    max_steps: int = 0
    save_steps: int = 500
    is_local_process_zero: bool = True
    is_world_process_zero: bool = True
    log_history: list[dict[str, float]] = field(default_factory=list)


@dataclass
class TrainerControl:
    should_training_stop: bool = False
    should_epoch_stop: bool = False
    should_save: bool = False
    should_evaluate: bool = False
    should_log: bool = False

    def _new_training(self) -> None:
        self.should_training_stop = False

    def _new_step(self) -> None:
        self.should_save = False
        self.should_evaluate = False
        self.should_log = False


class DefaultFlowCallback:
    """transformers' own first callback: save every `save_steps`, stop (and save) at the end."""

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> TrainerControl:  # fmt: skip
        if args.save_steps > 0 and state.global_step % args.save_steps == 0:
            control.should_save = True
        if state.global_step >= state.max_steps:
            control.should_training_stop = True
            control.should_save = True
        return control


class CallbackHandler:
    def __init__(self, callbacks: list[Any]) -> None:
        self.callbacks = [DefaultFlowCallback(), *callbacks]

    def call_event(self, event: str, args: TrainingArguments, state: TrainerState,
                   control: TrainerControl, **kwargs: Any) -> TrainerControl:  # fmt: skip
        for callback in self.callbacks:
            method = getattr(callback, event, None)
            if method is None and not isinstance(callback, DefaultFlowCallback):
                raise AttributeError(f"{type(callback).__name__} has no {event}")
            result = method(args, state, control, model=None, optimizer=None) if method else None
            if result is not None:
                control = result
        return control


class Trainer:
    """`train()` runs `max_steps` steps of `w ← w + step` (so a resumed run ends where an
    uninterrupted one does); `on_step` runs inside each step (a test sends signals from it)."""

    def __init__(self, args: TrainingArguments, callbacks: list[Any],
                 on_step: Callable[[int], None] | None = None) -> None:  # fmt: skip
        self.args = args
        self.state = TrainerState(max_steps=args.max_steps, save_steps=args.save_steps)
        self.control = TrainerControl()
        self.handler = CallbackHandler(callbacks)
        self.on_step = on_step
        self.weight = 0

    def train(self, resume_from_checkpoint: str | None = None) -> TrainerState:
        if resume_from_checkpoint:
            saved = json.loads((Path(resume_from_checkpoint) / TRAINER_STATE_NAME).read_text())
            self.state.global_step = saved["global_step"]
            weights = Path(resume_from_checkpoint) / "weights.json"
            self.weight = json.loads(weights.read_text())["w"]
        args, state = self.args, self.state
        self.handler.call_event("on_init_end", args, state, self.control)
        self.control._new_training()
        self.control = self.handler.call_event("on_train_begin", args, state, self.control)
        self.control = self.handler.call_event("on_epoch_begin", args, state, self.control)
        while state.global_step < state.max_steps:
            self.control._new_step()
            self.control = self.handler.call_event("on_step_begin", args, state, self.control)
            self.weight += state.global_step + 1  # the training step
            if self.on_step is not None:
                self.on_step(state.global_step + 1)
            state.global_step += 1
            state.epoch = state.global_step / state.max_steps
            self.control = self.handler.call_event("on_step_end", args, state, self.control)
            if self.control.should_save:
                self._save_checkpoint()
                self.control = self.handler.call_event("on_save", args, state, self.control)
            if self.control.should_training_stop:
                break
        self.control = self.handler.call_event("on_epoch_end", args, state, self.control)
        self.control = self.handler.call_event("on_train_end", args, state, self.control)
        return state

    def _save_checkpoint(self) -> None:
        target = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
        target.mkdir(parents=True, exist_ok=True)
        (target / "weights.json").write_text(json.dumps({"w": self.weight}))
        (target / TRAINER_STATE_NAME).write_text(json.dumps(asdict(self.state)))


def main() -> int:
    import tether_hooks  # the agent's PYTHONPATH, or the installed tether-hooks

    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--save-steps", type=int, required=True)
    parser.add_argument("--step-s", type=float, default=0.0)
    parser.add_argument("--output-dir", default=os.environ.get("TETHER_CHECKPOINT_DIR"))
    opts = parser.parse_args()
    output_dir = opts.output_dir or "checkpoints"
    args = TrainingArguments(output_dir, max_steps=opts.max_steps, save_steps=opts.save_steps)

    def step(n: int) -> None:
        time.sleep(opts.step_s)
        print(f"step {n}", flush=True)

    trainer = Trainer(args, [tether_hooks.TetherCallback()], on_step=step)
    resume = tether_hooks.latest_checkpoint(output_dir)
    print(f"resuming from {resume}", flush=True)
    state = trainer.train(resume_from_checkpoint=resume)
    if tether_hooks.stop_requested():
        print(f"stopped by SIGTERM at step {state.global_step}", flush=True)
    else:
        print(f"finished at step {state.global_step} weight {trainer.weight}", flush=True)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the callback put it back
    return 0


if __name__ == "__main__":
    sys.exit(main())
