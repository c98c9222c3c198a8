"""`tether rehearse`'s kill steps: those asked for must fit the run, random ones are distinct,
before the end, and the same for the same seed; `--env` and `--kill-at-step` parsing; which
files are compared; where the rehearsal's secrets come from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from functions.domain.jobspec import parse_job
from tests.paths import EXAMPLES
from tether_cli.output import CliError
from tether_cli.rehearse import parse_env, parse_steps
from tether_local.demo import rehearse
from tether_local.demo.rehearse import RehearseInputError, kill_steps

_TINY = yaml.safe_load((EXAMPLES / "tiny-cpu" / "job.yaml").read_text())


def test_steps_asked_for_are_kept() -> None:
    assert kill_steps(at=[40, 120], count=None, seed=0, last_step=400) == [40, 120]


@pytest.mark.parametrize(
    ("at", "message"),
    [
        ([0], "--kill-at-step: 0 is not a step (steps start at 1)"),
        (
            [400],
            "--kill-at-step: step 400 is past the end of the run (the uninterrupted run "
            "ends at step 400)",
        ),
        ([120, 40], "--kill-at-step: the steps must increase, each once"),
        ([40, 40], "--kill-at-step: the steps must increase, each once"),
    ],
)
def test_steps_that_do_not_fit_the_run_are_refused(at: list[int], message: str) -> None:
    with pytest.raises(RehearseInputError) as refused:
        kill_steps(at=at, count=None, seed=0, last_step=400)
    assert str(refused.value) == message


def test_random_steps_are_distinct_increasing_before_the_end_and_follow_the_seed() -> None:
    steps = kill_steps(at=None, count=5, seed=7, last_step=30)
    assert len(set(steps)) == 5
    assert steps == sorted(steps)
    assert all(1 <= s <= 29 for s in steps)
    assert kill_steps(at=None, count=5, seed=7, last_step=30) == steps
    assert kill_steps(at=None, count=1, seed=0, last_step=400) != []


@pytest.mark.parametrize(
    ("count", "last_step", "message"),
    [
        (0, 400, "--kills: 0 is not between 1 and 20"),
        (21, 400, "--kills: 21 is not between 1 and 20"),
        (
            5,
            5,
            "--kills: 5 kills do not fit before the end of the run (the uninterrupted run "
            "ends at step 5)",
        ),
    ],
)
def test_random_kills_that_do_not_fit_are_refused(count: int, last_step: int, message: str) -> None:
    with pytest.raises(RehearseInputError) as refused:
        kill_steps(at=None, count=count, seed=0, last_step=last_step)
    assert str(refused.value) == message


def test_kills_that_would_land_after_the_training_ended_are_refused() -> None:
    """At 10 ms a step, the 1.5 s a kill needs to land is 150 steps: a kill at step 280 of 400
    would land after the end and test nothing."""
    assert rehearse.last_landable_step(400, 0.01) == 250
    assert kill_steps(at=[250], count=None, seed=0, last_step=400, seconds_per_step=0.01) == [250]
    with pytest.raises(RehearseInputError) as refused:
        kill_steps(at=[60, 280], count=None, seed=0, last_step=400, seconds_per_step=0.01)
    message = str(refused.value)
    assert message.startswith(
        "--kill-at-step: a kill at step 280 would land after the training ended and test nothing"
    )
    assert "the last step a kill can be asked for is 250" in message
    steps = kill_steps(at=None, count=20, seed=3, last_step=400, seconds_per_step=0.01)
    assert max(steps) <= 250


def test_a_run_too_fast_for_any_kill_says_to_slow_it() -> None:
    # 400 steps in 0.2 s: no step leaves 1.5 s to land on.
    with pytest.raises(RehearseInputError, match="make the run longer or slower"):
        kill_steps(at=None, count=1, seed=0, last_step=400, seconds_per_step=0.0005)
    with pytest.raises(RehearseInputError, match="would land after the training ended"):
        kill_steps(at=[1], count=None, seed=0, last_step=400, seconds_per_step=0.0005)


def test_an_unknown_pace_leaves_every_step_before_the_last() -> None:
    assert rehearse.last_landable_step(400, None) == 399


def test_the_pace_comes_from_when_the_markers_were_written(tmp_path: Path) -> None:
    markers = []
    for step, at in ((20, 100.0), (40, 100.5), (400, 109.5)):
        marker = tmp_path / f"m{step}"
        marker.touch()
        os.utime(marker, (at, at))
        markers.append((step, marker))
    assert rehearse._seconds_per_step(markers) == pytest.approx(9.5 / 380)
    assert rehearse._seconds_per_step(markers[:1]) is None


def test_cli_parsing() -> None:
    assert parse_steps("40, 120") == [40, 120]
    assert parse_env(["MODEL=tiny-llama", "EMPTY=", "A=b=c"]) == {
        "MODEL": "tiny-llama",
        "EMPTY": "",
        "A": "b=c",
    }
    with pytest.raises(CliError, match="--env: '=x' is not NAME=VALUE"):
        parse_env(["=x"])
    with pytest.raises(CliError, match="--kill-at-step: '' is not a step number"):
        parse_steps("40,")


def test_only_files_that_record_the_runs_paths_are_left_out_of_the_comparison() -> None:
    assert rehearse.not_compared("training_args.bin") is not None
    assert rehearse.not_compared("sub/training_args.bin") is not None
    for compared in ("adapter_model.safetensors", "optimizer.pt", "rng_state.pth", "state.json"):
        assert rehearse.not_compared(compared) is None


def test_the_rehearsals_secrets_come_from_this_environment_or_are_placeholders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = parse_job({**_TINY, "secrets": ["HF_TOKEN", "WANDB_API_KEY"]})
    monkeypatch.setenv("HF_TOKEN", "hf_local_value_1234")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert rehearse.rehearsal_secrets(spec) == {
        "HF_TOKEN": "hf_local_value_1234",
        "WANDB_API_KEY": "rehearsal-placeholder-WANDB_API_KEY",
    }
