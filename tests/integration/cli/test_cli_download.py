"""`tether download` through the real logs function (`GET /jobs/{id}/files`) on moto: the
outputs or a recorded checkpoint, every sha256 checked, and bad input refused with nothing
written."""

from __future__ import annotations

import argparse
import hashlib
import json

import pytest

from functions.domain.heartbeat_contract import CheckpointRef, GpuProbe, OutputsRef
from functions.domain.job import Generation, Heartbeat
from tests.integration.cli.test_cli_jobs import Backend, backend, run, submit
from tether_cli import jobs as cli_jobs
from tether_cli.output import CliError

__all__ = ["backend"]  # the fixture, used by name

WEIGHTS = bytes(range(256)) * 40
RESULT = b"accuracy 0.93\n"


def _manifest(files: dict[str, bytes], **extra: object) -> bytes:
    listed = [
        {"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
        for p, d in sorted(files.items())
    ]
    return json.dumps({**extra, "files": listed}).encode()


def with_outputs(backend: Backend, job_id: str, files: dict[str, bytes]) -> None:
    """Generation 1 uploaded `files` as the outputs, and its heartbeat recorded them."""
    base = f"jobs/{job_id}/g1/outputs/"
    for path, data in files.items():
        backend.bucket.objects[base + "files/" + path] = data
    raw = _manifest(files, step=9, generation=1, created_at="2026-01-01T00:00:00Z")
    backend.bucket.objects[base + "manifest.json"] = raw
    backend.bucket.on_put(job_id, 1)
    ref = OutputsRef(
        generation=1,
        manifest_key=base + "manifest.json",
        manifest_sha256=hashlib.sha256(raw).hexdigest(),
        files=len(files),
        bytes=sum(len(d) for d in files.values()),
    )
    beat = Heartbeat(
        at=1.0, agent_time=1.0, phase="finished", gpu=GpuProbe(available=False), outputs=ref
    )
    backend.store.put_generation(
        Generation(job_id=job_id, generation=1, token_hash="h", heartbeat=beat)
    )


def with_checkpoint(
    backend: Backend, job_id: str, step: int, files: dict[str, bytes], **saved_as: str
) -> None:
    base = f"jobs/{job_id}/g1/checkpoints/{step:012d}/"
    for path, data in files.items():
        backend.bucket.objects[base + path] = data
    raw = _manifest(files, step=step, generation=1, created_at="2026-01-01T00:00:00Z", **saved_as)
    backend.bucket.objects[base + "manifest.json"] = raw
    backend.bucket.on_put(job_id, 1)
    backend.store.put_generation(Generation(job_id=job_id, generation=1, token_hash="h"))
    ref = CheckpointRef(
        step=step,
        generation=1,
        manifest_key=base + "manifest.json",
        manifest_sha256=hashlib.sha256(raw).hexdigest(),
    )
    assert backend.store.record_checkpoints(
        job_id, 1, token_hash="h", checkpoints=[ref], previous_version=0
    )


def test_download_outputs_writes_every_file_verified(backend, capsys, tmp_path) -> None:
    job_id = submit(capsys)
    with_outputs(backend, job_id, {"adapter/weights.bin": WEIGHTS, "result.txt": RESULT})
    to = tmp_path / "out"
    code, out, err = run(capsys, "download", job_id, "--outputs", "--to", str(to))
    assert code == 0, err
    assert (to / "adapter" / "weights.bin").read_bytes() == WEIGHTS
    assert (to / "result.txt").read_bytes() == RESULT
    assert sorted(p.name for p in to.rglob("*")) == ["adapter", "result.txt", "weights.bin"]
    assert f"downloaded 2 files ({len(WEIGHTS) + len(RESULT)} bytes) to {to}" in out


def test_status_shows_the_recorded_outputs_and_how_to_fetch_them(backend, capsys) -> None:
    job_id = submit(capsys)
    code, out, _ = run(capsys, "status", job_id)
    assert code == 0 and "outputs   not kept (the spec names no outputs dir)" in out
    with_outputs(backend, job_id, {"adapter/weights.bin": WEIGHTS, "result.txt": RESULT})
    code, out, _ = run(capsys, "status", job_id, "--json")
    assert code == 0
    size = len(WEIGHTS) + len(RESULT)
    assert json.loads(out)["outputs"] == {"generation": 1, "files": 2, "bytes": size}
    code, out, _ = run(capsys, "status", job_id)
    assert code == 0
    assert f"outputs   2 files, 10.0 KiB (generation 1): tether download {job_id} --outputs" in out


def test_download_json_lists_the_files_written(backend, capsys, tmp_path) -> None:
    job_id = submit(capsys)
    with_outputs(backend, job_id, {"result.txt": RESULT})
    code, out, err = run(capsys, "download", job_id, "--outputs", "--to", str(tmp_path), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["what"] == "outputs" and doc["generation"] == 1
    assert doc["files"] == [
        {"path": "result.txt", "size": 14, "sha256": hashlib.sha256(RESULT).hexdigest()}
    ]


def test_download_a_recorded_checkpoint(backend, capsys, tmp_path) -> None:
    job_id = submit(capsys)
    with_checkpoint(backend, job_id, 500, {"model.safetensors": WEIGHTS, ".tether-complete": b""})
    code, _, err = run(capsys, "download", job_id, "--checkpoint", "500", "--to", str(tmp_path))
    assert code == 0, err
    assert (tmp_path / "model.safetensors").read_bytes() == WEIGHTS
    assert (tmp_path / ".tether-complete").read_bytes() == b""


def test_download_a_single_file_checkpoint_under_its_saved_name(backend, capsys, tmp_path) -> None:
    """Lightning's `epoch=0-step=50.ckpt`: the manifest lists the one file under its name."""
    job_id = submit(capsys)
    name = "epoch=0-step=50.ckpt"
    with_checkpoint(backend, job_id, 50, {name: WEIGHTS}, name=name, kind="file")
    argv = ["download", job_id, "--checkpoint", "50", "--to", str(tmp_path)]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    assert (tmp_path / name).read_bytes() == WEIGHTS
    assert f"the checkpoint is the single file {name}" in " ".join(out.split())
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["name"], doc["kind"]) == (name, "file")


def test_download_names_a_checkpoint_folder_as_saved_and_old_manifests_without(
    backend, capsys, tmp_path
) -> None:
    job_id = submit(capsys)
    with_checkpoint(backend, job_id, 20, {"model.bin": WEIGHTS}, name="step_20")
    code, out, err = run(capsys, "download", job_id, "--checkpoint", "20", "--to", str(tmp_path))
    assert code == 0, err
    assert "saved as the folder step_20" in " ".join(out.split())
    assert (tmp_path / "model.bin").read_bytes() == WEIGHTS
    old = submit(capsys)
    with_checkpoint(backend, old, 30, {"model.bin": WEIGHTS})  # written before names
    to = tmp_path / "old"
    code, out, err = run(capsys, "download", old, "--checkpoint", "30", "--to", str(to), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["name"], doc["kind"]) == (None, "directory")


def test_a_corrupted_file_is_not_kept_and_exits_1(backend, capsys, tmp_path) -> None:
    job_id = submit(capsys)
    with_outputs(backend, job_id, {"result.txt": RESULT})
    backend.bucket.objects[f"jobs/{job_id}/g1/outputs/files/result.txt"] = b"accuracy 0.99\n"
    code, _, err = run(capsys, "download", job_id, "--outputs", "--to", str(tmp_path / "o"))
    assert code == 1
    assert "result.txt: got 14 bytes with sha256" in err and "nothing kept" in err
    assert list((tmp_path / "o").rglob("*")) == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["download", "nope-00000000", "--outputs"], "no job 'nope-00000000'"),
        (["download", "{job}", "--outputs"], "has no uploaded outputs yet"),
        (["download", "{job}", "--checkpoint", "7"], "has no recorded checkpoint at step 7"),
    ],
)
def test_bad_input_is_named_exits_2_and_writes_nothing(
    backend, capsys, tmp_path, monkeypatch, argv: list[str], says: str
) -> None:
    job_id = submit(capsys)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *[a.format(job=job_id) for a in argv])
    assert code == 2, err
    assert says in err and out == ""
    assert list(tmp_path.iterdir()) == []  # not even the default target dir


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["download", "j"], "one of the arguments --outputs --checkpoint is required"),
        (["download", "j", "--outputs", "--checkpoint", "1"], "not allowed with argument"),
        (["download", "j", "--checkpoint", "x"], "must be a step number"),
    ],
)
def test_usage_mistakes_exit_2(capsys, argv: list[str], says: str) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2 and says in err


@pytest.mark.parametrize(
    ("params", "status", "says"),
    [
        ({}, 400, "query: give exactly one of outputs=true or checkpoint=STEP"),
        ({"outputs": "true", "checkpoint": 3}, 400, "give exactly one of outputs=true"),
        ({"outputs": "true", "x": 1}, 400, "x"),
        ({"checkpoint": -1}, 400, "checkpoint"),
    ],
)
def test_the_route_names_a_bad_query(
    backend, capsys, params: dict[str, str | int], status: int, says: str
) -> None:
    job_id = submit(capsys)
    with (
        cli_jobs.connect(argparse.Namespace(local=False)) as api,
        pytest.raises(CliError) as refused,
    ):
        api.request("GET", f"jobs/{job_id}/files", params=params)
    assert refused.value.exit_code == 2
    assert says in " ".join([refused.value.message, *refused.value.details])
