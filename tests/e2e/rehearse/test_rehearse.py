"""`tether rehearse` end to end through the CLI, each run on its own local stack: a script that
does not restore its RNG is caught (exit 1), the tiny-cpu example passes (exit 0), bad input
exits 2 naming the field, and nothing is left running afterwards."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.paths import ROOT
from tether_cli.main import main

pytestmark = pytest.mark.slow

BROKEN = Path(__file__).with_name("forgets_rng.py")
EXAMPLE = ROOT / "examples" / "tiny-cpu"


@pytest.fixture
def running_before() -> set[int]:
    """This process's children before the test (other modules' servers on this worker)."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _left_running(command_part: str, before: set[int]) -> list[str]:
    """Children of this process started since `before` (the stack's workers, hosts' agents) and
    any process on the machine whose command line holds `command_part` (a training process
    orphaned by its agent), except jsii's Node kernel, which lives as long as this process once a
    template is synthesized."""
    found = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and not _is_jsii(p)
    ]
    for process in psutil.process_iter(["cmdline"]):
        if command_part in " ".join(process.info["cmdline"] or ()):
            found.append(process)
    return [f"{p.pid}: {' '.join(_cmdline(p))}" for p in found]


def _is_jsii(process: psutil.Process) -> bool:
    """jsii's kernel: Node running the runtime it extracted (`…/lib/program.js`)."""
    line = _cmdline(process)
    return any("jsii" in part for part in line) or bool(line and line[-1].endswith("program.js"))


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return [str(part) for part in process.cmdline()]
    except psutil.Error:
        return []


def _spec(tmp_path: Path, **changes: Any) -> Path:
    """The example's spec written to tmp_path/job.yaml with `changes`: its `code.dir` (".")
    is then tmp_path, unless `changes` say otherwise."""
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec.update(changes)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _broken_spec(tmp_path: Path) -> Path:
    return _spec(
        tmp_path,
        name="forgets-rng",
        image="python:3.12-slim",
        run=f"python {BROKEN} --steps 60 --checkpoint-every 10",
        env={"STEP_SECONDS": "0"},
    )


def test_a_script_that_does_not_restore_its_rng_is_not_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], running_before: set[int]
) -> None:
    # The spec's own STEP_SECONDS=0 would finish before any report; --env slows the rehearsal.
    argv = ["rehearse", str(_broken_spec(tmp_path)), "--kill-at-step", "25"]
    code = main([*argv, "--env", "STEP_SECONDS=0.05", "--json"])
    out = capsys.readouterr().out
    assert code == 1, out
    report = json.loads(out)
    assert report["identical"] is False
    assert report["final_state"] == "FINISHED"
    assert report["reference_step"] == 60
    assert report["compared_step"] == 60
    assert [d.split(":")[0] for d in report["differences"]] == ["state.json"]
    [kill] = report["kills"]
    assert kill["asked_step"] == 25
    assert kill["killed_at_step"] >= 25
    assert kill["resumed_step"] is not None and kill["resumed_step"] % 10 == 0
    assert kill["incident"]["lost_steps"] == kill["killed_at_step"] - kill["resumed_step"]
    assert kill["incident"]["lost_steps_lower_bound"] is True
    assert _left_running(str(BROKEN), running_before) == []


def test_the_tiny_cpu_example_resumes_identically(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], running_before: set[int]
) -> None:
    example = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    assert example["run"] == "python tiny_train.py --steps 400 --checkpoint-every 20"
    assert example["image"] == "python:3.12-slim" and example["code"] == {"dir": "."}
    # Its code: the example's folder, packed as `tether submit` packs it; the uninterrupted run
    # runs in that archive extracted, the rehearsal's hosts download it. Slow enough to kill;
    # the seed makes its command line this test's own.
    run = example["run"] + " --step-seconds 0.02 --seed 4242"
    spec = _spec(tmp_path, run=run, code={"dir": str(EXAMPLE)})
    code = main(["rehearse", str(spec), "--kills", "2", "--seed", "7"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "final checkpoint: identical to an uninterrupted run" in out
    assert (
        "the uninterrupted run ends at step 400, the rehearsal's final checkpoint is at "
        "step 400" in " ".join(out.split())
    )
    assert _left_running("--seed 4242", running_before) == []


def test_the_qlora_example_in_its_tiny_mode_resumes_identically(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], running_before: set[int]
) -> None:
    """The example users copy, rehearsed the way its README says: its small variant through
    `--env`, its secret a placeholder, its `pip install … && python train.py` run by bash as on
    a host. HF's training_args.bin (the run's own paths) is named, not compared."""
    qlora = ROOT / "examples" / "qlora-7b"
    example = yaml.safe_load((qlora / "job.yaml").read_text())
    assert example["secrets"] == ["HF_TOKEN"] and example["code"] == {"dir": "."}
    run = example["run"] + " --seed 4243"  # this test's own command line
    spec = _spec(tmp_path, **{**example, "run": run, "code": {"dir": str(qlora)}})
    tiny = [
        "--env",
        "QLORA_TINY=1",
        "--env",
        "QLORA_STEP_SECONDS=0.15",
    ]  # as docs/first-fine-tune.md says
    argv = ["rehearse", str(spec), "--kill-at-step", "15", *tiny, "--json"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    report = json.loads(out)
    assert report["identical"] and report["differences"] == [], report
    assert report["reference_step"] == report["compared_step"] == 40
    assert report["not_compared"] == [
        "training_args.bin: Hugging Face's pickled TrainingArguments, with the run's own output_dir"
    ]
    assert report["kills"][0]["resumed_step"] is not None, report["kills"]
    assert "secrets HF_TOKEN (a placeholder)" in err
    assert _left_running("--seed 4243", running_before) == []


@pytest.mark.parametrize(
    ("args", "changes", "message"),
    [
        (
            ["--kill-at-step", "500"],
            {},
            "--kill-at-step: step 500 is past the end of the run "
            "(the uninterrupted run ends at step 60)",
        ),
        (["--kill-at-step", "30,20"], {}, "--kill-at-step: the steps must increase"),
        # STEP_SECONDS=0: all 60 steps in well under the 1.5 s a kill needs to land.
        (["--kill-at-step", "30"], {}, "a kill at step 30 would land after the training ended"),
        (["--kills", "1"], {}, "make the run longer or slower for the rehearsal"),
        (["--kill-at-step", "ten"], {}, "--kill-at-step: 'ten' is not a step number"),
        (["--kills", "0"], {}, "--kills: 0 is not between 1 and 20"),
        (["--env", "STEP SECONDS"], {}, "--env: 'STEP SECONDS' is not NAME=VALUE"),
        ([], {"budget_usd": -1}, "budget_usd"),
        ([], {"image": "nobody/unknown:1"}, "image: image 'nobody/unknown:1' cannot be pulled"),
        ([], {"code": {"dir": "no-such-dir"}}, "no-such-dir is not a directory"),
    ],
)
def test_bad_input_exits_2_naming_the_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    running_before: set[int],
    args: list[str],
    changes: dict[str, Any],
    message: str,
) -> None:
    spec = _broken_spec(tmp_path)
    if changes:
        spec.write_text(yaml.safe_dump({**yaml.safe_load(spec.read_text()), **changes}))
    code = main(["rehearse", str(spec), *args])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert message in err
    assert _left_running(str(BROKEN), running_before) == []


def test_a_run_that_saves_without_marking_is_told_which_and_how_to_mark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], running_before: set[int]
) -> None:
    """A Trainer's `checkpoint-N` with no marker in it: never uploaded on a host, so the
    rehearsal names it and the fix instead of only "nothing to compare"."""
    save = (
        "import os, pathlib; d = pathlib.Path(os.environ['TETHER_CHECKPOINT_DIR']) / "
        "'checkpoint-8'; d.mkdir(); (d / 'trainer_state.json').write_text('{}')"
    )
    spec = _spec(tmp_path, name="saves-unmarked", run=f'python -c "{save}"', code={"dir": "."})
    code = main(["rehearse", str(spec), "--kills", "1"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1, err
    assert "the uninterrupted run marked no checkpoint" in err
    assert "it saved checkpoint-8 without marking them" in err
    assert "the agent uploads a checkpoint only once the marker file" in err
    assert "checkpoint_saved(path)" in err
    assert _left_running("saves-unmarked", running_before) == []


def test_a_script_that_crashes_after_every_restore_is_named_with_its_own_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], running_before: set[int]
) -> None:
    """Runs whole in one go, crashes on every host that restored: the job ends FAILED as the
    script's own error, and the rehearsal says so in the script's words, not the heartbeat's."""
    crash_if_restored = (
        "import os, sys; os.environ.get('TETHER_RESTORED_STEP') and "
        "sys.exit(print('boom: NameError nme', file=sys.stderr) or 1)"
    )
    spec = _spec(
        tmp_path,
        name="crashes-on-restore",
        image="python:3.12-slim",
        run=f'python -c "{crash_if_restored}" && python {BROKEN} --steps 120 --checkpoint-every 10',
        env={"STEP_SECONDS": "0"},
    )
    code = main(["rehearse", str(spec), "--kill-at-step", "25,60", "--env", "STEP_SECONDS=0.05"])
    err = capsys.readouterr().err
    assert code == 1, err
    said = err[err.index("tether: error: rehearse:") :]
    assert "the job ended FAILED before the kill at step 60 could land" in said
    assert "the script's own error" in said
    assert said.rstrip().endswith("boom: NameError nme"), said
    assert "heartbeat" not in said
    assert _left_running(str(BROKEN), running_before) == []


FRAMEWORK_NAMES = Path(__file__).with_name("framework_names.py")


@pytest.mark.parametrize(
    ("layout", "seed", "options"),
    [("file", 4245, ""), ("accelerate", 4246, ""), ("file", 4247, " --record-paths")],
    ids=["single-file-checkpoints", "accelerate-step-folders", "checkpoints-holding-paths"],
)
def test_checkpoints_saved_in_a_frameworks_style_resume_identically(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    running_before: set[int],
    layout: str,
    seed: int,
    options: str,
) -> None:
    """Single files `ckpt-<step>.pt` marked by `checkpoint_saved(path)` (a sibling marker), and
    accelerate-style `step_<n>` folders whose script parses its own folder name back: each
    restored under the name it was saved as, twice, and the end is identical. With
    `--record-paths` each checkpoint also holds the absolute paths it ran with (as a Lightning
    `.ckpt` does): identical only because the uninterrupted run and every host see the job's
    paths at the same place (`tether_local.hosts.disk_view`)."""
    run = (
        f"python {FRAMEWORK_NAMES} --layout {layout} --steps 100 --checkpoint-every 10 "
        f"--step-seconds 0.1 --seed {seed}{options}"
    )
    spec = _spec(tmp_path, name=f"names-{layout}", run=run)
    code = main(["rehearse", str(spec), "--kills", "2", "--seed", "7", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, out + err[-3000:]
    report = json.loads(out)
    assert report["identical"] and report["differences"] == [], report
    assert report["final_state"] == "FINISHED"
    assert report["reference_step"] == report["compared_step"] == 100
    assert len(report["kills"]) == 2
    assert all(k["resumed_step"] is not None for k in report["kills"]), report["kills"]
    assert _left_running(f"--seed {seed}", running_before) == []
