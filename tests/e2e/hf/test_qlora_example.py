"""The headline test of examples/qlora-7b: the example users copy, run on the local stack with
real torch, transformers and peft (its tiny mode: a tiny Llama from a config on the CPU, no
downloads), through the `tether` CLI as docs/first-fine-tune.md walks through it.

`tether secrets set HF_TOKEN` → `tether submit job.yaml` (the spec's folder shipped as the
job's code) → the host destroyed twice, each time past a checkpoint and before the next one →
FINISHED → `tether download JOB --outputs`: the adapter is byte for byte the one an
uninterrupted run of the same train.py saves, and the token reached the training process but
not DynamoDB, Vast's instances (env, onstart) or anything stored in the bucket.

The test's only changes to the example's spec: `QLORA_TINY=1` in `env`, the tiny run's
arguments appended to `run`, and a 1 s heartbeat (so the test sees the step between
checkpoints); train.py and requirements.txt are the example's own bytes.
"""

from __future__ import annotations

import functools
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import stored_heartbeat, wait_for
from tests.paths import EXAMPLES, ROOT
from tether_cli import api_client
from tether_cli.main import main
from tether_local.hosts import images
from tether_local.hosts.local_hosts import SYSTEM_PATH
from tether_local.stack import R2_BUCKET, LocalStack

pytestmark = pytest.mark.slow

VALUE = "hf_QloraExampleFakeToken0123456789"
TINY = ["--max-steps", "40", "--save-steps", "10", "--step-seconds", "0.25"]
TERMINAL = {"FINISHED", "FAILED", "CANCELLED", "OVER_BUDGET"}
HOOKS = ROOT / "agent" / "tether_agent" / "_hooks"
# TrainingArguments pickled by save_model: it holds the run's own paths (output_dir), which
# differ between any two runs; everything else must be identical.
RUN_SPECIFIC = {"training_args.bin"}


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def tiny_example(folder: Path) -> dict[str, Any]:
    """A copy of the example in `folder`, its spec switched to the tiny mode."""
    shutil.copytree(EXAMPLES / "qlora-7b", folder, ignore=shutil.ignore_patterns("__pycache__"))
    spec: dict[str, Any] = yaml.safe_load((folder / "job.yaml").read_text())
    spec["env"] = {**spec.get("env", {}), "QLORA_TINY": "1"}
    spec["run"] = f"{spec['run']} {' '.join(TINY)}"
    spec["policy"] = {**spec.get("policy", {}), "heartbeat_interval_s": 1}
    (folder / "job.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec


def uninterrupted(image: images.StandIn, run_dir: Path) -> subprocess.Popen[bytes]:
    """train.py from the example's folder, as the hosts run it: the image's python, the hooks
    on PYTHONPATH, the same variables, never stopped."""
    (run_dir / "home").mkdir(parents=True)
    env = {
        "PATH": f"{image.bin}:{SYSTEM_PATH}",
        "HOME": str(run_dir / "home"),
        "PYTHONPATH": str(HOOKS),
        "QLORA_TINY": "1",
        "HF_TOKEN": VALUE,
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TETHER_CHECKPOINT_DIR": str(run_dir / "checkpoints"),
        "TETHER_OUTPUTS_DIR": str(run_dir / "outputs"),
        "TETHER_MARKER": ".tether-complete",
    }
    with (run_dir / "train.log").open("wb") as log:
        return subprocess.Popen(
            [str(image.python), str(EXAMPLES / "qlora-7b" / "train.py"), *TINY],
            cwd=run_dir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def test_the_qlora_example_survives_two_lost_hosts_and_downloads_the_uninterrupted_adapter(
    stack: LocalStack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert stack.hosts is not None
    hosts = stack.hosts
    monkeypatch.setenv(api_client.LOCAL_STATE_ENV, str(tmp_path / "local-stack.json"))
    api_client.write_local_state(stack.api_url)
    spec = tiny_example(tmp_path / "qlora-7b")
    image = images.stand_in(spec["image"])  # built once (cached), as a host's start would
    reference = uninterrupted(image, tmp_path / "reference")
    instances: dict[int, dict[str, Any]] = {}  # as Vast shows them while they live

    def tick() -> None:
        stack.tick()
        instances.update({i["id"]: i for i in stack.vast.instances()})

    try:
        monkeypatch.setattr(sys, "stdin", io.StringIO(VALUE + "\n"))
        code, _, err = cli(capsys, "secrets", "set", "HF_TOKEN")
        assert code == 0, err
        code, out, err = cli(
            capsys, "submit", str(tmp_path / "qlora-7b" / "job.yaml"), "--local", "--json"
        )
        assert code == 0, err
        job_id = json.loads(out)["job_id"]

        def uploaded_past(generation: int, step: int) -> Any:
            """The generation's heartbeat once it recorded a checkpoint past `step` and
            trained on beyond it: the host is between two checkpoints."""
            tick()
            beat = stored_heartbeat(stack, job_id, generation)
            done = beat is not None and beat.last_checkpoint is not None
            if done and beat.last_checkpoint.step > step and beat.step > beat.last_checkpoint.step:
                return beat
            return None

        past = 0  # generation 1 starts fresh; generation 2 from generation 1's checkpoint
        for generation in (1, 2):
            beat = wait_for(
                f"generation {generation} past a checkpoint after step {past}",
                functools.partial(uploaded_past, generation, past),
                timeout_s=150,
            )
            (host,) = [h for h in hosts.for_job(job_id) if h.generation == generation]
            hosts.destroy(host.instance_id)  # its disk, checkpoints and outputs are gone
            past = beat.last_checkpoint.step

        def ended() -> dict[str, Any] | None:
            tick()
            code, out, err = cli(capsys, "status", job_id, "--local", "--json")
            assert code == 0, err
            view: dict[str, Any] = json.loads(out)
            return view if view["state"] in TERMINAL else None

        view = wait_for("the job to end", ended, timeout_s=180)
        logs = "\n".join(h.log_text()[-3000:] for h in hosts.for_job(job_id))
        assert view["state"] == "FINISHED", (view, logs)
        assert reference.wait(timeout=120) == 0, (tmp_path / "reference/train.log").read_text()
    finally:
        if reference.poll() is None:
            reference.kill()
            reference.wait()

    # Three hosts; each replacement resumed from the last checkpoint its predecessor recorded.
    generations = [h.generation for h in hosts.for_job(job_id)]
    assert len(generations) == 3 and set(generations) == {1, 2, 3}
    resumed_at = [0]
    for generation in (2, 3):
        lost = stored_heartbeat(stack, job_id, generation - 1)
        beat = stored_heartbeat(stack, job_id, generation)
        assert beat.restore is not None and beat.restore.outcome == "restored"
        assert beat.resumed is not None and beat.resumed.step == lost.last_checkpoint.step
        resumed_at.append(beat.resumed.step)
    assert resumed_at == sorted(set(resumed_at)), resumed_at  # each host got further
    assert stored_heartbeat(stack, job_id, 3).step == 40

    # The result, downloaded: outside the checkpoint folders, identical to the reference's.
    to = tmp_path / "downloaded"
    code, out, err = cli(capsys, "download", job_id, "--outputs", "--to", str(to), "--local")
    assert code == 0, err
    got = {str(p.relative_to(to)) for p in to.rglob("*") if p.is_file()}
    assert got == {"README.md", "adapter_config.json", "adapter_model.safetensors", *RUN_SPECIFIC}
    expected = tmp_path / "reference" / "outputs"
    assert got == {str(p.relative_to(expected)) for p in expected.rglob("*") if p.is_file()}
    for name in sorted(got - RUN_SPECIFIC):
        assert (to / name).read_bytes() == (expected / name).read_bytes(), name

    # The job's code came from the spec's folder, packed by submit, through the bucket: every
    # host (each with a fresh disk) fetched and verified it.
    keys = [
        str(p.relative_to(stack.root / "s3" / R2_BUCKET))
        for p in (stack.root / "s3" / R2_BUCKET / "jobs" / job_id).rglob("*")
        if p.is_file()
    ]
    (archive,) = [k for k in keys if k.startswith(f"jobs/{job_id}/code/")]
    for host in hosts.for_job(job_id):
        assert f"fetching the job's code: archive {archive}" in host.log_text()
    # The token: in the training process, nowhere else.
    shipped = "".join(
        (stack.root / "s3" / R2_BUCKET / k).read_text() for k in sorted(keys) if "/logs/" in k
    )
    assert "HF_TOKEN set" in shipped and "HF_TOKEN not set" not in shipped
    assert f"code: archive {archive}, sha256 verified" in shipped
    for key in keys:  # logs, checkpoints, outputs, code
        assert VALUE.encode() not in (stack.root / "s3" / R2_BUCKET / key).read_bytes(), key
    items = stack.aws.client("dynamodb").scan(TableName=stack.table_name())["Items"]
    assert items and VALUE not in json.dumps(items)
    assert len(instances) == 3 and all(i["onstart"] for i in instances.values())
    assert VALUE not in json.dumps(instances)
    assert VALUE not in json.dumps(hosts.received_envs())
