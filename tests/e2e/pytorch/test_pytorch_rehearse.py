"""PyTorch scripts written in PyTorch's own documented style, rehearsed through `tether rehearse`
with two lost hosts, each ending identical to an uninterrupted run (agent/README.md, "torchrun
(several processes)" and "A plain loop"):

- `torchrun --standalone --nproc_per_node=2` over a DDP script on gloo (the image stand-in's
  own `torchrun`), rank 0 saving `step_<N>.pt` and marking it; every rank resumes from it;
- a plain loop saving model and optimizer state_dicts with `torch.save`, resuming with
  `torch.load`.

Each marks its saves with one line, `tether_hooks.checkpoint_saved(path, step)`, and takes its
paths as its own flags from the job's `run`. A lost host must leave none of its processes
behind: torchrun starts each worker in a session of its own, out of the training's process
group."""

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
IMAGE = "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime"  # its stand-in has torch and torchrun
PATHS = '--checkpoint-dir "$TETHER_CHECKPOINT_DIR" --resume "$TETHER_RESUME_FROM"'


@pytest.fixture
def running_before() -> set[int]:
    """This process's children before the test (other modules' servers on this worker)."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _spec(tmp_path: Path, name: str, run: str) -> Path:
    spec = yaml.safe_load((ROOT / "examples" / "tiny-cpu" / "job.yaml").read_text())
    spec.update(name=name, image=IMAGE, code={"dir": str(HERE)}, run=run)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _rehearse_twice_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, run: str
) -> dict[str, Any]:
    argv = ["rehearse", str(_spec(tmp_path, name, run)), "--kills", "2", "--seed", "5"]
    code = main([*argv, "--env", "STEP_SECONDS=0.15", "--json"])
    out, err = capsys.readouterr()
    report: dict[str, Any] = json.loads(out) if out else {}
    print(json.dumps(report, indent=1))  # the steps lost and the time to resume, per kill
    assert code == 0, err[-3000:]
    assert report["identical"] and report["differences"] == [], report
    assert report["final_state"] == "FINISHED"
    assert report["reference_step"] == report["compared_step"] == 60
    assert report["not_compared"] == []
    assert len(report["kills"]) == 2
    # Resumed, not restarted: each replacement began at a checkpoint past step 0.
    assert all((kill["resumed_step"] or 0) > 0 for kill in report["kills"]), report["kills"]
    return report


def test_a_torchrun_ddp_script_survives_two_lost_hosts_with_no_worker_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], running_before: set[int]
) -> None:
    run = f"torchrun --standalone --nproc_per_node=2 torchrun_ddp_train.py {PATHS}"
    _rehearse_twice_killed(tmp_path, capsys, "torchrun-ddp", run)
    assert _left_running("torchrun_ddp_train.py", running_before) == []


def test_a_plain_torch_save_loop_survives_two_lost_hosts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], running_before: set[int]
) -> None:
    _rehearse_twice_killed(tmp_path, capsys, "plain-torch", f"python plain_torch_train.py {PATHS}")
    assert _left_running("plain_torch_train.py", running_before) == []
