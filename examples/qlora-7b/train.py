"""QLoRA fine-tune of a 7B causal LM with the Hugging Face Trainer: the job of `job.yaml`.

    pip install -r requirements.txt && python train.py [--model NAME] [--max-steps N] ...

The real run (a GPU host): the base model by name from the Hugging Face Hub
(`mistralai/Mistral-7B-v0.3`, gated: accept its terms on the Hub, then `tether secrets set
HF_TOKEN`), loaded in 4-bit NF4 with bitsandbytes, LoRA adapters on every linear layer of the
attention and MLP blocks (peft), trained on an instruction data set downloaded by name
(`databricks/databricks-dolly-15k`, one JSON-lines file, CC BY-SA 3.0).

The tiny mode (`QLORA_TINY=1`): the same script and the same Trainer, LoRA, checkpoint, resume
and output code, on a tiny Llama built from a `LlamaConfig` (random init with a fixed seed), a
synthetic token data set (no tokenizer), on the CPU, quantization off, nothing downloaded
(`HF_HUB_OFFLINE=1`). tether's tests run it on the local stack (tests/e2e/hf/).

What tether needs from it (agent/README.md): checkpoints under `$TETHER_CHECKPOINT_DIR`, each
marked complete (`tether_hooks.TetherCallback`, which also turns SIGTERM into a final saved
checkpoint), a resume from the checkpoint the agent restored (`$TETHER_RESUME_FROM`), and the
result, the adapter, saved into `$TETHER_OUTPUTS_DIR`, outside the checkpoint folders. Outside
tether (no `TETHER_*` variables) it writes to ./checkpoints and ./outputs. `tether_hooks` comes
with the agent on a tether host; elsewhere `pip install <tether clone>/agent/tether_agent/_hooks`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

MODEL = "mistralai/Mistral-7B-v0.3"
DATASET = "databricks/databricks-dolly-15k"
DATASET_FILE = "databricks-dolly-15k.jsonl"
# Every linear layer of the attention and MLP blocks. A regex, not a list: peft keeps a list as
# a set and writes it in the process's hash order, so adapter_config.json would differ by run.
LORA_TARGETS = r".*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)$"
IGNORE = -100  # the label of padding: no loss


def tiny_mode() -> bool:
    return os.environ.get("QLORA_TINY", "") not in ("", "0")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    tiny = tiny_mode()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.environ.get("MODEL", MODEL))
    parser.add_argument("--dataset", default=DATASET)
    parser.add_argument("--dataset-file", default=DATASET_FILE)
    parser.add_argument("--max-steps", type=int, default=40 if tiny else 800)
    parser.add_argument("--save-steps", type=int, default=10 if tiny else 100)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--grad-accum", type=int, default=1 if tiny else 4)
    parser.add_argument("--seq-len", type=int, default=32 if tiny else 512)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--no-4bit", action="store_true", help="load the model unquantized")
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=float(os.environ.get("QLORA_STEP_SECONDS") or 0),
        help="pause after each step, for a rehearsal to kill a host mid-run "
        "(default: $QLORA_STEP_SECONDS, else 0)",
    )
    return parser.parse_args(argv)


# --- data ---------------------------------------------------------------------------------------


def synthetic_examples(count: int, seq_len: int, vocab: int, seed: int) -> list[dict[str, Any]]:
    """Token sequences with a learnable pattern (each token follows from the one before), of
    varying lengths so the collator pads; the same for every seed-equal run."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(count):
        length = int(torch.randint(seq_len // 2, seq_len + 1, (1,), generator=generator))
        start = int(torch.randint(1, vocab, (1,), generator=generator))
        ids = [1 + (start + 7 * i) % (vocab - 1) for i in range(length)]
        examples.append({"input_ids": ids, "labels": list(ids)})
    return examples


def dolly_examples(args: argparse.Namespace, tokenizer: Any, token: str | None) -> list[Any]:
    """The data set's JSON-lines file from the Hub, as prompt + response token ids (the loss
    on the whole sequence, truncated to --seq-len)."""
    from huggingface_hub import hf_hub_download

    path = hf_hub_download(args.dataset, args.dataset_file, repo_type="dataset", token=token)
    examples = []
    with Path(path).open(encoding="utf-8") as rows:
        for line in rows:
            row = json.loads(line)
            context = f"\n\n### Context:\n{row['context']}" if row.get("context") else ""
            text = (
                f"### Instruction:\n{row['instruction']}{context}\n\n"
                f"### Response:\n{row['response']}{tokenizer.eos_token}"
            )
            ids = tokenizer(text, truncation=True, max_length=args.seq_len)["input_ids"]
            examples.append({"input_ids": ids, "labels": list(ids)})
    return examples


class PadCollator:
    """Pads a batch to its longest sequence: pad id in the inputs, IGNORE in the labels."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, batch: list[dict[str, list[int]]]) -> dict[str, Any]:
        import torch

        longest = max(len(example["input_ids"]) for example in batch)

        def padded(key: str, fill: int) -> Any:
            rows = [e[key] + [fill] * (longest - len(e[key])) for e in batch]
            return torch.tensor(rows, dtype=torch.long)

        mask = [[1] * len(e["input_ids"]) + [0] * (longest - len(e["input_ids"])) for e in batch]
        return {
            "input_ids": padded("input_ids", self.pad_id),
            "labels": padded("labels", IGNORE),
            "attention_mask": torch.tensor(mask, dtype=torch.long),
        }


# --- model --------------------------------------------------------------------------------------


def tiny_model(seed: int) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def real_model(args: argparse.Namespace, token: str | None) -> tuple[Any, Any, bool]:
    """(model, tokenizer, quantized): 4-bit NF4 on a GPU unless --no-4bit."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    if not torch.cuda.is_available():
        sys.exit("train.py: no GPU here; the 7B run needs one (QLORA_TINY=1 runs the tiny mode)")
    quantize = not args.no_4bit
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    quantization = (
        BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=dtype,
            bnb_4bit_use_double_quant=True,
        )
        if quantize
        else None
    )
    tokenizer = AutoTokenizer.from_pretrained(args.model, token=token)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(
        args.model, token=token, dtype=dtype, quantization_config=quantization, device_map={"": 0}
    )
    return model, tokenizer, quantize


def with_lora(model: Any, args: argparse.Namespace, quantized: bool) -> Any:
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if quantized:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
    lora = LoraConfig(
        r=args.lora_r,
        lora_alpha=2 * args.lora_r,
        lora_dropout=0.05,
        target_modules=LORA_TARGETS,
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, lora)
    peft_model.print_trainable_parameters()
    return peft_model


# --- training -----------------------------------------------------------------------------------


def saved_step(checkpoint: str | None) -> int | None:
    """The step a Trainer checkpoint was saved at (its trainer_state.json), if it says."""
    if checkpoint is None:
        return None
    try:
        state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return None
    step = state.get("global_step")
    return step if isinstance(step, int) else None


def load_adapter_weights(model: Any, checkpoint: Path) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(str(checkpoint / "adapter_model.safetensors")))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tiny = tiny_mode()
    if tiny:
        os.environ["HF_HUB_OFFLINE"] = "1"  # before huggingface_hub reads it: nothing downloads
    import tether_hooks
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    token = os.environ.get("HF_TOKEN") or None  # a tether secret: never printed, never saved
    checkpoints = os.environ.get("TETHER_CHECKPOINT_DIR", "checkpoints")
    outputs = os.environ.get("TETHER_OUTPUTS_DIR", "outputs")
    if tiny:
        torch.set_num_threads(1)  # the same sums in the same order in every run
        model, tokenizer, quantized = tiny_model(args.seed), None, False
        data = synthetic_examples(96, args.seq_len, model.config.vocab_size, args.seed)
        pad_id = model.config.pad_token_id
    else:
        model, tokenizer, quantized = real_model(args, token)
        data = dolly_examples(args, tokenizer, token)
        pad_id = tokenizer.pad_token_id
    model = with_lora(model, args, quantized)

    pause = args.step_seconds

    class Pace(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if pause:
                time.sleep(pause)
            return control

    training = TrainingArguments(
        output_dir=checkpoints,  # checkpoint-<step> folders, each marked by TetherCallback
        max_steps=args.max_steps,
        save_strategy="steps",
        save_steps=args.save_steps,
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=args.lr,
        lr_scheduler_type="cosine",
        warmup_steps=min(20, args.max_steps // 10),
        logging_steps=10,
        optim="paged_adamw_8bit" if quantized else "adamw_torch",
        bf16=not tiny and torch.cuda.is_bf16_supported(),
        activation_checkpointing=quantized,
        use_cpu=tiny,
        seed=args.seed,
        data_seed=args.seed,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        disable_tqdm=True,  # one line per log instead of progress bars in the shipped log
        report_to="none",
    )
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=data,
        data_collator=PadCollator(pad_id),
        callbacks=[tether_hooks.TetherCallback(), Pace()],
    )
    # The checkpoint the agent restored on this host, else the newest marked one on its disk
    # (a restart after a crash on the same host), else a fresh start.
    resume = os.environ.get("TETHER_RESUME_FROM") or tether_hooks.latest_checkpoint(checkpoints)
    print(
        f"train.py: {'tiny' if tiny else args.model}, HF_TOKEN {'set' if token else 'not set'}, "
        f"resuming from {resume or 'nothing'}"
    )
    done = saved_step(resume)
    if resume is not None and done is not None and done >= args.max_steps:
        # The run had ended (the host went after the final checkpoint, before the result was
        # kept): the Trainer, resumed at max_steps, would train one step more. Take the final
        # checkpoint's adapter as it is, so the result is the uninterrupted run's.
        load_adapter_weights(model, Path(resume))
        trainer.state.global_step = done
    else:
        trainer.train(resume_from_checkpoint=resume)
    # The adapter (adapter_model.safetensors + adapter_config.json), outside the checkpoints:
    # the job's result, uploaded by the agent once this exits. After a SIGTERM it is the adapter
    # at the step training stopped at (the final checkpoint holds the same).
    trainer.save_model(outputs)
    if tokenizer is not None:
        tokenizer.save_pretrained(outputs)
    stopped = " (stopped early: SIGTERM)" if tether_hooks.stop_requested() else ""
    print(f"train.py: adapter at step {trainer.state.global_step} saved to {outputs}{stopped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
