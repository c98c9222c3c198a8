"""Scripts written in their frameworks' own documented style, with no tether import, rehearsed
through `tether rehearse` with two lost hosts: the auto hooks (agent/tether_agent/_hooks/
tether_autohooks.py) mark their checkpoints and (Trainer, Lightning) resume from the restored
one, so the final checkpoint is the uninterrupted run's. Without the hooks the rehearsal refuses
each ("marked no checkpoint")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.e2e.rehearse.test_rehearse import _left_running
from tests.paths import ROOT
from tether_cli.main import main

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
IMAGE = "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime"  # its stand-in has torch and HF's stack


@pytest.fixture
def running_before() -> set[int]:
    """This process's children before the test (other modules' servers on this worker)."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _spec(tmp_path: Path, name: str, script: str) -> Path:
    spec = yaml.safe_load((ROOT / "examples" / "tiny-cpu" / "job.yaml").read_text())
    spec.update(
        name=name,
        image=IMAGE,
        code={"dir": str(HERE)},
        run=f"python {script}",
        env={"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"},
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _rehearse_twice_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], script: str
) -> dict[str, Any]:
    spec = _spec(tmp_path, script.removesuffix(".py").replace("_", "-"), script)
    argv = ["rehearse", str(spec), "--kills", "2", "--seed", "3", "--env", "STEP_SECONDS=0.15"]
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    report: dict[str, Any] = json.loads(out) if out else {}
    print(json.dumps(report, indent=1))  # the steps lost and the time to resume, per kill
    assert code == 0, err[-3000:]
    assert report["identical"] and report["differences"] == [], report
    assert report["reference_step"] == report["compared_step"] == 60
    assert len(report["kills"]) == 2
    assert all(kill["resumed_step"] is not None for kill in report["kills"]), report["kills"]
    return report


def test_an_unchanged_trainer_script_survives_two_lost_hosts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    running_before: set[int],
) -> None:
    report = _rehearse_twice_killed(tmp_path, capsys, "hf_trainer_train.py")
    assert report["not_compared"] == [
        "training_args.bin: Hugging Face's pickled TrainingArguments, with the run's own output_dir"
    ]
    # Resumed, not restarted: each replacement began at a checkpoint past step 0.
    assert all(kill["resumed_step"] > 0 for kill in report["kills"]), report["kills"]
    assert _left_running("hf_trainer_train.py", running_before) == []


def test_an_unchanged_lightning_script_survives_two_lost_hosts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    running_before: set[int],
) -> None:
    report = _rehearse_twice_killed(tmp_path, capsys, "lightning_train.py")
    assert report["not_compared"] == []
    # Resumed, not restarted: `fit(ckpt_path="last")` found no last.ckpt on the new host.
    assert all(kill["resumed_step"] > 0 for kill in report["kills"]), report["kills"]
    assert _left_running("lightning_train.py", running_before) == []


def test_an_accelerate_script_with_its_one_load_state_line_survives_two_lost_hosts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    running_before: set[int],
) -> None:
    report = _rehearse_twice_killed(tmp_path, capsys, "accelerate_train.py")
    assert report["not_compared"] == []
    assert _left_running("accelerate_train.py", running_before) == []
