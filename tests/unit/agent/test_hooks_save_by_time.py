"""`TetherCallback(save_by_time=True)` saves on tether's interval (`TETHER_CHECKPOINT_INTERVAL_S`)
by time, through the Trainer stand-in (`hf_standin.py`) and a fake clock: no sleeps."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tether_agent._hooks import tether_hooks

from tests.unit.agent.hf_standin import Trainer, TrainingArguments


class FakeClock:
    """Seconds that pass only when a step says so."""

    def __init__(self, seconds_per_step: float) -> None:
        self.now = 0.0
        self.seconds_per_step = seconds_per_step

    def __call__(self) -> float:
        return self.now

    def step(self, n: int) -> None:
        self.now += self.seconds_per_step


@pytest.fixture(autouse=True)
def tether_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TETHER_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("TETHER_MARKER", ".done")
    monkeypatch.setenv("TETHER_PROGRESS_FILE", str(tmp_path / "progress.json"))
    monkeypatch.setenv("TETHER_CHECKPOINT_INTERVAL_S", "300")
    before = signal.getsignal(signal.SIGTERM)
    tether_hooks._stop_requested.clear()
    yield
    signal.signal(signal.SIGTERM, before)


def _train(tmp_path: Path, callback: object, clock: FakeClock, save_steps: int) -> list[int]:
    """Run 12 steps; the steps whose checkpoints were saved and marked, in order."""
    args = TrainingArguments(str(tmp_path / "ckpt"), max_steps=12, save_steps=save_steps)
    Trainer(args, [callback], on_step=clock.step).train()
    return sorted(int(p.parent.name.split("-")[1]) for p in (tmp_path / "ckpt").glob("*/.done"))


def test_saves_every_interval_of_training_time(tmp_path: Path) -> None:
    # 60 s a step, 300 s interval, no save_steps: steps 5 and 10, then the final save at 12.
    clock = FakeClock(60)
    callback = tether_hooks.TetherCallback(save_by_time=True, clock=clock)
    assert _train(tmp_path, callback, clock, save_steps=0) == [5, 10, 12]


def test_the_interval_counts_from_the_last_save_whatever_caused_it(tmp_path: Path) -> None:
    # 100 s a step, save_steps 4: by time at 3 (300 s), by steps at 4 (clock reset at 400 s),
    # by time at 7 (700 s), steps at 8, time at 11, steps and the end at 12.
    clock = FakeClock(100)
    callback = tether_hooks.TetherCallback(save_by_time=True, clock=clock)
    assert _train(tmp_path, callback, clock, save_steps=4) == [3, 4, 7, 8, 11, 12]


def test_interval_s_overrides_tethers_interval(tmp_path: Path) -> None:
    clock = FakeClock(60)
    callback = tether_hooks.TetherCallback(save_by_time=True, interval_s=240, clock=clock)
    assert _train(tmp_path, callback, clock, save_steps=0) == [4, 8, 12]


def test_without_asking_nothing_changes(tmp_path: Path) -> None:
    clock = FakeClock(60)
    callback = tether_hooks.TetherCallback(clock=clock)
    assert _train(tmp_path, callback, clock, save_steps=5) == [5, 10, 12]


@pytest.mark.parametrize("value", [None, "", "soon", "0", "-5", "nan"])
def test_outside_tether_save_by_time_does_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("TETHER_CHECKPOINT_INTERVAL_S")
    else:
        monkeypatch.setenv("TETHER_CHECKPOINT_INTERVAL_S", value)
    assert tether_hooks.checkpoint_interval_s() is None
    clock = FakeClock(60)
    callback = tether_hooks.TetherCallback(save_by_time=True, clock=clock)
    assert _train(tmp_path, callback, clock, save_steps=5) == [5, 10, 12]


def test_the_interval_is_readable_by_a_plain_loop() -> None:
    assert tether_hooks.checkpoint_interval_s() == 300.0


class _FakeTensor:
    def __init__(self, values: list[int]) -> None:
        self.values = values

    def item(self) -> int:
        return self.values[0]


class _FakeTorch:
    @staticmethod
    def tensor(values: list[int], device: object = None) -> _FakeTensor:
        return _FakeTensor(values)


class _FakeDist:
    """Two ranks; rank 0 (elsewhere) says `rank_zero`, and the broadcast brings its word."""

    def __init__(self, rank_zero: bool) -> None:
        self.rank_zero = rank_zero
        self.broadcasts = 0

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_world_size(self) -> int:
        return 2

    def broadcast(self, tensor: _FakeTensor, src: int) -> None:
        assert src == 0
        self.broadcasts += 1
        tensor.values[0] = int(self.rank_zero)


@pytest.mark.parametrize(("mine", "rank_zero"), [(True, False), (False, True), (True, True)])
def test_in_a_distributed_run_rank_zeros_clock_decides(
    monkeypatch: pytest.MonkeyPatch, mine: bool, rank_zero: bool
) -> None:
    dist = _FakeDist(rank_zero)
    monkeypatch.setitem(sys.modules, "torch", _FakeTorch())
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    assert tether_hooks._agree_on_rank_zero(mine, TrainingArguments("x", 1)) is rank_zero
    assert dist.broadcasts == 1
