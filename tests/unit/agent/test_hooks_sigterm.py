"""`TetherCallback` on SIGTERM, through a stand-in of transformers' Trainer callback protocol
(`hf_standin.py`; transformers is not in the dev venv): the Trainer saves a final marked
checkpoint at the step it was in, then stops."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from tether_agent._hooks import tether_hooks

from tests.unit.agent.hf_standin import Trainer, TrainingArguments


@pytest.fixture(autouse=True)
def tether_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TETHER_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("TETHER_MARKER", ".done")
    monkeypatch.setenv("TETHER_PROGRESS_FILE", str(tmp_path / "progress.json"))
    before = signal.getsignal(signal.SIGTERM)
    tether_hooks._stop_requested.clear()
    yield
    tether_hooks._stop_requested.clear()
    signal.signal(signal.SIGTERM, before)


def _sigterm_at(*steps: int) -> object:
    def on_step(n: int) -> None:
        for _ in range(steps.count(n)):
            os.kill(os.getpid(), signal.SIGTERM)  # delivered before the step returns

    return on_step


def _marked(root: Path) -> list[str]:
    return sorted(p.parent.name for p in root.glob("*/.done"))


def test_sigterm_saves_a_marked_checkpoint_at_the_current_step_and_stops(tmp_path: Path) -> None:
    args = TrainingArguments(str(tmp_path / "ckpt"), max_steps=100, save_steps=5)
    trainer = Trainer(args, [tether_hooks.TetherCallback()], on_step=_sigterm_at(7))  # type: ignore[arg-type]
    state = trainer.train()
    assert state.global_step == 7
    assert _marked(tmp_path / "ckpt") == ["checkpoint-5", "checkpoint-7"]
    saved = json.loads((tmp_path / "ckpt" / "checkpoint-7" / "trainer_state.json").read_text())
    assert saved["global_step"] == 7
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert progress == {"step": 7, "total_steps": 100}  # max_steps too: `tether status` N of M
    assert tether_hooks.stop_requested() is True
    assert tether_hooks.latest_checkpoint() == str(tmp_path / "ckpt" / "checkpoint-7")


def test_the_final_checkpoint_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    args = TrainingArguments(str(tmp_path / "ckpt"), max_steps=12, save_steps=5)
    Trainer(args, [tether_hooks.TetherCallback()], on_step=_sigterm_at(8)).train()  # type: ignore[arg-type]
    tether_hooks._stop_requested.clear()
    resumed = Trainer(args, [tether_hooks.TetherCallback()])
    assert resumed.train(tether_hooks.latest_checkpoint()).global_step == 12
    assert resumed.weight == 78  # 1 + 2 + … + 12, as without the interruption


def test_without_sigterm_only_the_trainers_own_saves_happen(tmp_path: Path) -> None:
    args = TrainingArguments(str(tmp_path / "ckpt"), max_steps=12, save_steps=5)
    state = Trainer(args, [tether_hooks.TetherCallback()]).train()
    assert state.global_step == 12
    assert _marked(tmp_path / "ckpt") == ["checkpoint-10", "checkpoint-12", "checkpoint-5"]
    assert tether_hooks.stop_requested() is False


def test_the_previous_handler_is_back_after_training_and_gets_a_second_sigterm(
    tmp_path: Path,
) -> None:
    received: list[int] = []

    def previous(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    signal.signal(signal.SIGTERM, previous)
    args = TrainingArguments(str(tmp_path / "ckpt"), max_steps=100, save_steps=50)
    state = Trainer(args, [tether_hooks.TetherCallback()], on_step=_sigterm_at(3, 3)).train()  # type: ignore[arg-type]
    assert received == [signal.SIGTERM]  # the second one: the user insists
    assert state.global_step == 3  # the first one still saved and stopped
    assert _marked(tmp_path / "ckpt") == ["checkpoint-3"]
    assert signal.getsignal(signal.SIGTERM) is previous
