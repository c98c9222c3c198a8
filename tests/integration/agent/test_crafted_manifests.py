"""Crafted manifests where a later generation would look (docs/architecture.md#invariant-2), against
a real S3 server: every kind is skipped with its reason, the next recorded checkpoint is restored,
and with none left the start is fresh and says so. The agent as a process reports it all in its
heartbeats, and never dies of it.

A crafted manifest reaches the content checks only when the control plane recorded its sha256
(a compromised current host reported it); one changed after it was recorded fails the sha256
comparison first. Both are here."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from tether_agent.checkpoints import RemoteCheckpointId
from tether_agent.protocol import CheckpointRef
from tether_agent.restore import restore_latest
from tether_agent.storage import Storage
from tether_agent.uploader import CheckpointUploader

from tests.integration.agent.conftest import (
    ControlPlane,
    agent_env,
    fake_train,
    finish,
    make_storage,
    start_agent,
)
from tether_local.r2.s3server import S3Server

MARKER = ".tether-complete"
GOOD_STEP = 10
CRAFTED_STEP = 20


def good_checkpoint(storage: Storage, tmp_path: Path, step: int = GOOD_STEP) -> CheckpointRef:
    """A checkpoint generation 1 uploaded and the control plane recorded."""
    path = tmp_path / "host1" / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.bin").write_bytes(b"good weights")
    (path / "progress.json").write_text(json.dumps({"step": step}))
    (path / MARKER).write_text("done")
    uploader = CheckpointUploader(storage, path.parent, MARKER, 1, 10)
    (ref,) = uploader.upload_pending()
    return ref


def put_crafted(
    storage: Storage, step: int, manifest: bytes, files: dict[str, bytes]
) -> CheckpointRef:
    """A manifest (and files) written with generation 1's key at `step`, recorded as the host
    reported it: with the sha256 of the bytes written."""
    cid = RemoteCheckpointId(step, 1)
    for name, data in files.items():
        storage.put_bytes(cid.dir_key(storage.prefix) + name, data)
    storage.put_bytes(cid.manifest_key(storage.prefix), manifest)
    return CheckpointRef(
        step=step,
        generation=1,
        manifest_key=cid.manifest_key(storage.prefix),
        manifest_sha256=hashlib.sha256(manifest).hexdigest(),
    )


def manifest(step: int, *files: dict[str, object]) -> bytes:
    body = {"step": step, "generation": 1, "created_at": "2026-01-01T00:00:00Z", "files": files}
    return json.dumps(body).encode()


def entry(path: str, data: bytes, **override: object) -> dict[str, object]:
    found = {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return {**found, **override}


W = b"crafted weights"


def bad_json(storage: Storage, step: int) -> CheckpointRef:
    return put_crafted(storage, step, b'{"step": 20, "generation": 1, "files": [', {"w": W})


def dotdot_path(storage: Storage, step: int) -> CheckpointRef:
    crafted = manifest(step, entry("w", W), entry("../../../escape", W))
    return put_crafted(storage, step, crafted, {"w": W})


def absolute_path(storage: Storage, step: int) -> CheckpointRef:
    return put_crafted(storage, step, manifest(step, entry("/tmp/tether-escape", W)), {"w": W})


def tampered_after_recording(storage: Storage, step: int) -> CheckpointRef:
    ref = put_crafted(storage, step, manifest(step, entry("w", W)), {"w": W})
    storage.put_bytes(ref.manifest_key, manifest(step, entry("w", W), entry("x", b"")))
    return ref


def wrong_file_sha256(storage: Storage, step: int) -> CheckpointRef:
    return put_crafted(storage, step, manifest(step, entry("w", W, sha256="0" * 64)), {"w": W})


def huge_size(storage: Storage, step: int) -> CheckpointRef:
    return put_crafted(storage, step, manifest(step, entry("w", W, size=10**15)), {"w": W})


def huge_manifest(storage: Storage, step: int) -> CheckpointRef:
    padded = manifest(step, entry("w", W)) + b" " * (17 * 1024 * 1024)
    return put_crafted(storage, step, padded, {"w": W})


def another_step(storage: Storage, step: int) -> CheckpointRef:
    return put_crafted(storage, step, manifest(step + 1, entry("w", W)), {"w": W})


def missing_manifest(storage: Storage, step: int) -> CheckpointRef:
    ref = put_crafted(storage, step, manifest(step, entry("w", W)), {"w": W})
    storage._delete([ref.manifest_key])
    return ref


CRAFTED: dict[str, tuple[Callable[[Storage, int], CheckpointRef], str]] = {
    "bad-json": (bad_json, "malformed manifest"),
    "dotdot-path": (dotdot_path, "unsafe path in manifest: ../../../escape"),
    "absolute-path": (absolute_path, "unsafe path in manifest: /tmp/tether-escape"),
    "tampered": (tampered_after_recording, "manifest sha256 differs from the recorded one"),
    "wrong-file-sha256": (wrong_file_sha256, "w: sha256 mismatch"),
    "huge-size": (huge_size, "manifest says 1000000000000000"),
    "huge-manifest": (huge_manifest, "at most 16777216"),
    "another-step": (another_step, "manifest names another step or generation"),
    "missing": (missing_manifest, "no manifest in the bucket"),
}


@pytest.mark.parametrize("kind", list(CRAFTED))
def test_a_crafted_manifest_is_skipped_and_the_next_recorded_one_restored(
    storage: Storage, tmp_path: Path, kind: str
) -> None:
    craft, reason = CRAFTED[kind]
    good = good_checkpoint(storage, tmp_path)
    crafted = craft(storage, CRAFTED_STEP)
    into = tmp_path / "host2"
    result = restore_latest(storage, [crafted, good], 2, into)
    assert result.restored is not None and result.restored.ref == good
    assert result.report.outcome == "restored" and result.report.candidates == 2
    (skip,) = result.report.skipped
    assert skip.manifest_key == crafted.manifest_key and reason in skip.reason
    assert sorted(p.name for p in into.iterdir()) == [f"checkpoint-{GOOD_STEP}"]
    assert (into / f"checkpoint-{GOOD_STEP}" / "model.bin").read_bytes() == b"good weights"
    assert not (tmp_path / "escape").exists() and not Path("/tmp/tether-escape").exists()


@pytest.mark.parametrize("kind", ["bad-json", "dotdot-path", "huge-size"])
def test_with_no_usable_candidate_the_start_is_fresh_and_says_why(
    storage: Storage, tmp_path: Path, kind: str
) -> None:
    craft, reason = CRAFTED[kind]
    crafted = craft(storage, CRAFTED_STEP)
    result = restore_latest(storage, [crafted], 2, tmp_path / "host2")
    assert result.restored is None
    assert result.report.outcome == "fresh" and result.report.candidates == 1
    assert reason in result.report.skipped[0].reason


def test_the_agent_reports_every_skip_in_its_heartbeats_and_trains_from_the_good_one(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    storage = make_storage(s3_server.endpoint_url, bucket)
    try:
        good = good_checkpoint(storage, tmp_path)
        # recorded after the good one: newest first, each at a step of its own
        crafted = [bad_json(storage, 20), dotdot_path(storage, 30), huge_size(storage, 40)]
    finally:
        storage.close()
    candidates = [*crafted[::-1], good]
    env = agent_env(
        tmp_path / "host2", s3_server, bucket, control_plane, TETHER_GENERATION="2",
        TETHER_RESTORE_CHECKPOINTS=json.dumps([c.model_dump(mode="json") for c in candidates]),
    )  # fmt: skip
    code, out = finish(start_agent(env, fake_train("--steps", "1")))
    assert code == 0, out
    last = control_plane.last()
    assert last is not None and last["phase"] == "finished"
    assert last["restored_checkpoint"]["manifest_key"] == good.manifest_key
    report = last["restore"]
    assert report["outcome"] == "restored" and report["candidates"] == 4
    assert [s["manifest_key"] for s in report["skipped"]] == [c.manifest_key for c in crafted[::-1]]
    reasons = [s["reason"] for s in report["skipped"]]
    assert "manifest says 1000000000000000" in reasons[0]
    assert "unsafe path in manifest: ../../../escape" in reasons[1]
    assert "malformed manifest" in reasons[2]
    assert last["last_checkpoint"]["step"] == GOOD_STEP + 1  # resumed from the good one
    assert out.count(" skipped: ") == 3


def test_the_agent_reports_a_fresh_start_when_nothing_recorded_is_usable(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    storage = make_storage(s3_server.endpoint_url, bucket)
    try:
        crafted = bad_json(storage, CRAFTED_STEP)
    finally:
        storage.close()
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane, TETHER_GENERATION="2",
        TETHER_RESTORE_CHECKPOINTS=json.dumps([crafted.model_dump(mode="json")]),
    )  # fmt: skip
    code, out = finish(start_agent(env, fake_train("--steps", "1")))
    assert code == 0, out
    last = control_plane.last()
    assert last is not None and last["restored_checkpoint"] is None
    assert last["restore"]["outcome"] == "fresh"
    assert "malformed manifest" in last["restore"]["skipped"][0]["reason"]
    assert last["last_checkpoint"]["step"] == 1  # from scratch
    assert "starting from scratch" in out


def test_an_unreadable_candidate_list_is_a_reported_fresh_start(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane, TETHER_GENERATION="2",
        TETHER_RESTORE_CHECKPOINTS='[{"step": "not a number"}]',
    )  # fmt: skip
    code, out = finish(start_agent(env, fake_train("--steps", "1")))
    assert code == 0, out
    last = control_plane.last()
    assert last is not None and last["restore"]["outcome"] == "fresh"
    (skip,) = last["restore"]["skipped"]
    assert skip["manifest_key"] == "TETHER_RESTORE_CHECKPOINTS"
    assert "unreadable" in skip["reason"]
