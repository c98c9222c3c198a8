"""Checkpoints come back as they were saved, against a real S3 server: a directory under its own
name (`step_20`, as accelerate's example saves and parses it back), a single file
(`epoch=0-step=50.ckpt`, Lightning's) with its sibling marker; a manifest without a name (written
before names were recorded) as `checkpoint-<step>`; a crafted name is a skipped candidate."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from tether_agent._hooks import tether_hooks
from tether_agent.checkpoints import Manifest
from tether_agent.progress import marked_checkpoints, unmarked_checkpoints
from tether_agent.protocol import CheckpointRef
from tether_agent.restore import restore_latest
from tether_agent.storage import Storage
from tether_agent.uploader import CheckpointUploader

from tests.integration.agent.conftest import (
    ControlPlane,
    agent_env,
    finish,
    recorded,
    start_agent,
)
from tests.integration.agent.test_crafted_manifests import put_crafted
from tether_local.r2.s3server import S3Server

MARKER = ".tether-complete"
SIBLING = "epoch=0-step=50.ckpt.tether-complete"


def upload_all(storage: Storage, root: Path, keep_last: int = 10) -> list[CheckpointRef]:
    refs: list[CheckpointRef] = CheckpointUploader(
        storage, root, MARKER, 1, keep_last
    ).upload_pending()
    return refs


def save_dir(root: Path, name: str, data: bytes) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "model.bin").write_bytes(data)
    (path / MARKER).write_text("done")
    return path


def save_file(root: Path, name: str, data: bytes, marker: str = MARKER) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / name
    path.write_bytes(data)
    (root / f"{name}.{marker.lstrip('.')}").write_text("done")
    return path


def read_manifest(storage: Storage, ref: CheckpointRef) -> Manifest:
    data = storage.get_bytes(ref.manifest_key)
    assert data is not None
    return Manifest.model_validate_json(data)


def test_a_directory_comes_back_under_its_saved_name(storage: Storage, tmp_path: Path) -> None:
    save_dir(tmp_path / "host1", "step_20", b"weights at 20")
    (ref,) = upload_all(storage, tmp_path / "host1")
    assert read_manifest(storage, ref).name == "step_20"

    result = restore_latest(storage, [ref], 2, tmp_path / "host2")
    assert result.restored is not None
    assert result.restored.local_dir == tmp_path / "host2" / "step_20"
    assert (tmp_path / "host2" / "step_20" / "model.bin").read_bytes() == b"weights at 20"
    assert not (tmp_path / "host2" / "checkpoint-20").exists()


def test_a_manifest_without_a_name_restores_as_checkpoint_step(
    storage: Storage, tmp_path: Path
) -> None:
    """A job running across the deploy: its manifests were written by the agent before names."""
    data = b"old weights"
    body = {
        "step": 30,
        "generation": 1,
        "created_at": "2026-01-01T00:00:00Z",
        "files": [
            {"path": "model.bin", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        ],
    }
    ref = put_crafted(storage, 30, json.dumps(body).encode(), {"model.bin": data})
    result = restore_latest(storage, [ref], 2, tmp_path / "host2")
    assert result.restored is not None
    assert result.restored.local_dir.name == "checkpoint-30"
    assert (result.restored.local_dir / "model.bin").read_bytes() == data


@pytest.mark.parametrize(
    ("name", "kind", "reason"),
    [
        ("../x40", "directory", "is not one path component"),
        ("a/b40", "directory", "is not one path component"),
        ("..", "directory", "is not one path component"),
        (".hidden-40", "directory", "is hidden"),
        ("step_40\x1b[2J", "directory", "holds control characters"),
        ("step\n40", "directory", "holds control characters"),
        ("step_41", "directory", "does not carry step 40"),
        ("model.bin", "directory", "does not carry step 40"),
        ("step_40.pt", "file", "must list exactly its one file"),
    ],
)
def test_a_crafted_name_is_a_skipped_candidate(
    storage: Storage, tmp_path: Path, name: str, kind: str, reason: str
) -> None:
    good_root = tmp_path / "host1"
    save_dir(good_root, "step_10", b"good")
    (good,) = upload_all(storage, good_root)
    data = b"crafted"
    body = {
        "step": 40,
        "generation": 1,
        "created_at": "2026-01-01T00:00:00Z",
        "files": [
            {"path": "model.bin", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        ],
        "name": name,
        "kind": kind,
    }
    crafted = put_crafted(storage, 40, json.dumps(body).encode(), {"model.bin": data})
    into = tmp_path / "host2"
    result = restore_latest(storage, [crafted, good], 2, into)
    (skip,) = result.report.skipped
    assert skip.manifest_key == crafted.manifest_key and reason in skip.reason
    assert result.restored is not None and result.restored.local_dir == into / "step_10"
    assert sorted(p.name for p in into.iterdir()) == ["step_10"]  # nothing else written
    assert not (tmp_path / "x40").exists()


def test_a_single_file_checkpoint_is_uploaded_and_restored_byte_identical(
    storage: Storage, tmp_path: Path
) -> None:
    data = bytes(range(256)) * 4000
    host1 = tmp_path / "host1"
    save_file(host1, "epoch=0-step=50.ckpt", data)
    (host1 / "last.ckpt").write_bytes(data)  # no step in its name: no checkpoint
    (host1 / "last.ckpt.tether-complete").write_text("done")
    assert [s for s, _ in marked_checkpoints(host1, MARKER)] == [50]
    assert unmarked_checkpoints(host1, MARKER, limit=4, settled_s=0) == []

    (ref,) = upload_all(storage, host1)
    manifest = read_manifest(storage, ref)
    assert (manifest.name, manifest.kind) == ("epoch=0-step=50.ckpt", "file")
    assert [(f.path, f.size) for f in manifest.files] == [("epoch=0-step=50.ckpt", len(data))]
    assert manifest.files[0].sha256 == hashlib.sha256(data).hexdigest()

    host2 = tmp_path / "host2"
    result = restore_latest(storage, [ref], 2, host2)
    assert result.restored is not None
    assert result.restored.local_dir == host2 / "epoch=0-step=50.ckpt"
    assert (host2 / "epoch=0-step=50.ckpt").read_bytes() == data
    assert sorted(p.name for p in host2.iterdir()) == ["epoch=0-step=50.ckpt", SIBLING]
    # restored and marked: the next generation's uploader sees it as the checkpoint it is
    assert marked_checkpoints(host2, MARKER) == [(50, host2 / "epoch=0-step=50.ckpt")]


def test_a_file_checkpoint_without_its_sibling_marker_is_not_uploaded(
    storage: Storage, tmp_path: Path
) -> None:
    root = tmp_path / "host1"
    root.mkdir()
    (root / "step_50.pt").write_bytes(b"w")
    assert upload_all(storage, root) == []
    assert unmarked_checkpoints(root, MARKER, limit=4, settled_s=0) == ["step_50.pt"]
    (root / "step_50.pt.tether-complete").write_text("done")
    assert [r.step for r in upload_all(storage, root)] == [50]
    assert unmarked_checkpoints(root, MARKER, limit=4, settled_s=0) == []


def test_keep_last_prunes_file_checkpoints(storage: Storage, tmp_path: Path) -> None:
    root = tmp_path / "host1"
    uploader = CheckpointUploader(storage, root, MARKER, 1, 2, prune_local=True)
    for step in (10, 20, 30, 40):
        save_file(root, f"ckpt-{step}.pt", bytes([step]) * 100)
        uploader.upload_pending()
    remote = {k.split("/")[4] for k in storage.list_keys("jobs/j1/g1/checkpoints/") if "/" in k}
    assert remote == {f"{30:012d}", f"{40:012d}"}
    assert sorted(p.name for p in root.iterdir()) == ["ckpt-40.pt", "ckpt-40.pt.tether-complete"]


def test_the_hooks_mark_a_file_with_its_sibling_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_MARKER", "COMPLETE")
    (tmp_path / "epoch=0-step=50.ckpt").write_bytes(b"w")
    tether_hooks.checkpoint_saved(tmp_path / "epoch=0-step=50.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "epoch=0-step=50.ckpt",
        "epoch=0-step=50.ckpt.COMPLETE",
    ]
    assert marked_checkpoints(tmp_path, "COMPLETE") == [(50, tmp_path / "epoch=0-step=50.ckpt")]


RESUMER = """
import os, sys
from pathlib import Path
root = Path(os.environ["TETHER_CHECKPOINT_DIR"])
resume = os.environ.get("TETHER_RESUME_FROM")
if resume:
    step = int(Path(resume).name.removeprefix("step_"))  # accelerate's example parses it so
    print(f"resumed from {Path(resume).name} at {step}", flush=True)
else:
    step = 0
step += 20
out = root / f"step_{step}"
out.mkdir(parents=True)
(out / "model.bin").write_bytes(str(step).encode())
(out / os.environ["TETHER_MARKER"]).write_text("done")
"""


def test_tether_resume_from_names_the_checkpoint_as_saved(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    command = [sys.executable, "-c", RESUMER]
    env1 = agent_env(tmp_path / "host1", s3_server, bucket, control_plane)
    assert finish(start_agent(env1, command))[0] == 0
    env2 = agent_env(
        tmp_path / "host2", s3_server, bucket, control_plane, TETHER_GENERATION="2",
        TETHER_RESTORE_CHECKPOINTS=recorded(control_plane.last()),
    )  # fmt: skip
    code, out = finish(start_agent(env2, command))
    assert code == 0, out
    assert "resumed from step_20 at 20" in out
    last = control_plane.last()
    assert last is not None and last["last_checkpoint"]["step"] == 40
