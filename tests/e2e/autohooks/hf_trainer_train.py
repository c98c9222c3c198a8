"""A causal-LM fine-tune written the way Hugging Face documents the Trainer, with nothing of
tether in it: no tether import, checkpoints by `save_steps` into `output_dir`, and
`trainer.train()` without resume arguments. tether's auto hooks mark each checkpoint and resume
from the one the agent restored (agent/README.md, "Hugging Face Trainer and its example
scripts").

Tiny and offline: a GPT-2 built from a config (random init, fixed seed) on the CPU, a few
hundred synthetic tokens. `STEP_SECONDS` (env) pauses after each step, so a rehearsal can kill
the host mid-run; the output dir is `$TETHER_CHECKPOINT_DIR`, else ./checkpoints.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)

MAX_STEPS = 60
SAVE_STEPS = 10
SEQ_LEN = 16
SEED = 1234


class StepPause(TrainerCallback):
    """Sleeps after each optimizer step (the rehearsal's pace)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.seconds:
            time.sleep(self.seconds)
        return control


def synthetic_tokens(count: int, vocab: int) -> list[dict[str, torch.Tensor]]:
    """`count` sequences in which each token follows from the one before."""
    generator = torch.Generator().manual_seed(SEED)
    rows = []
    for _ in range(count):
        start = int(torch.randint(0, vocab, (1,), generator=generator))
        ids = torch.tensor([(start + 5 * i) % vocab for i in range(SEQ_LEN)])
        rows.append({"input_ids": ids, "labels": ids.clone()})
    return rows


def main() -> None:
    torch.set_num_threads(1)  # the same sums in the same order in every run
    torch.manual_seed(SEED)
    config = GPT2Config(vocab_size=64, n_positions=SEQ_LEN, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=os.environ.get("TETHER_CHECKPOINT_DIR", "checkpoints"),
        max_steps=MAX_STEPS,
        save_strategy="steps",
        save_steps=SAVE_STEPS,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=10,
        use_cpu=True,
        seed=SEED,
        data_seed=SEED,
        dataloader_num_workers=0,
        disable_tqdm=True,
        report_to="none",
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=synthetic_tokens(24, config.vocab_size),  # 384 tokens
        data_collator=default_data_collator,
        callbacks=[StepPause(float(os.environ.get("STEP_SECONDS") or 0))],
    )
    trainer.train()
    print(f"hf_trainer_train.py: finished at step {trainer.state.global_step}")


if __name__ == "__main__":
    main()
