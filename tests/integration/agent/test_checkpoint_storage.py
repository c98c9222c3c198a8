"""Uploads, restores and retention against a real S3 server (`rclone serve s3`)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

from tether_agent.checkpoints import RemoteCheckpointId
from tether_agent.protocol import CheckpointRef
from tether_agent.restore import RestoreResult, restore_latest
from tether_agent.storage import Storage
from tether_agent.storage_credentials import Credentials
from tether_agent.uploader import CheckpointUploader

from tests.integration.agent.conftest import ACCESS_KEY, SECRET_KEY, make_storage
from tether_local.r2.s3server import start_s3_server

MARKER = ".tether-complete"


def write_checkpoint(root: Path, step: int, files: dict[str, bytes], marked: bool = True) -> Path:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    if marked:
        (path / MARKER).write_text("done")
    return path


def uploader_for(storage: Storage, root: Path, generation: int = 1, keep: int = 3):
    return CheckpointUploader(storage, root, MARKER, generation, keep, poll_interval_s=0.05)


def upload(storage: Storage, root: Path, generation: int = 1) -> list[CheckpointRef]:
    """Upload every marked checkpoint under `root`; what the agent reports, oldest first (the
    control plane records them, newest first)."""
    uploaded: list[CheckpointRef] = uploader_for(storage, root, generation).upload_pending()
    return uploaded


def restore(storage: Storage, recorded: list[CheckpointRef], into: Path, generation: int = 2):
    """A later generation restoring what was recorded (newest first)."""
    return restore_latest(storage, recorded, generation, into)


def restored_step(result: RestoreResult) -> int | None:
    return result.restored.ref.step if result.restored else None


def test_nothing_is_uploaded_before_the_marker(storage: Storage, tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    path = write_checkpoint(root, 5, {"model.bin": b"x" * 1000}, marked=False)
    uploader = uploader_for(storage, root)
    uploader.start()
    try:
        assert uploader.upload_pending() == []
        time.sleep(0.3)  # let the watcher run a few scans
        assert storage.list_keys(storage.prefix) == []
        (path / MARKER).write_text("done")
        deadline = time.monotonic() + 20
        while uploader.last is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        uploader.stop_watching()
    assert uploader.last is not None and uploader.last.step == 5
    keys = storage.list_keys(storage.prefix)
    assert "jobs/j1/g1/checkpoints/000000000005/manifest.json" in keys
    assert "jobs/j1/g1/checkpoints/000000000005/model.bin" in keys
    manifest = storage.get_bytes(uploader.last.manifest_key)
    assert manifest is not None
    assert uploader.last.manifest_sha256 == hashlib.sha256(manifest).hexdigest()


def test_round_trip_multipart_and_nested_files(storage: Storage, tmp_path: Path) -> None:
    big = os.urandom(12 * 1024 * 1024 + 123)  # three 5 MiB parts, the last one short
    write_checkpoint(tmp_path / "a", 7, {"big.bin": big, "sub/small.json": b"{}", "empty": b""})
    (ref,) = upload(storage, tmp_path / "a")
    assert ref == _last(storage, 7)  # what the agent reports is what the bucket holds
    manifest = storage.read_manifest(RemoteCheckpointId(7, 1))
    assert manifest is not None
    by_path = {f.path: f for f in manifest.files}
    assert by_path["big.bin"].sha256 == hashlib.sha256(big).hexdigest()
    assert by_path["big.bin"].size == len(big)

    result = restore(storage, [ref], tmp_path / "b")
    assert result.report.outcome == "restored" and not result.report.skipped
    restored = result.restored
    assert restored is not None and restored.ref == ref
    assert restored.local_dir == tmp_path / "b" / "checkpoint-7"
    assert (restored.local_dir / "big.bin").read_bytes() == big
    assert (restored.local_dir / "sub" / "small.json").read_bytes() == b"{}"
    assert (restored.local_dir / MARKER).is_file()
    assert not list((tmp_path / "b").glob(".tether-restore-*"))


def _last(storage: Storage, step: int, generation: int = 1) -> CheckpointRef:
    key = RemoteCheckpointId(step, generation).manifest_key(storage.prefix)
    data = storage.get_bytes(key)
    assert data is not None
    return CheckpointRef(
        step=step,
        generation=generation,
        manifest_key=key,
        manifest_sha256=hashlib.sha256(data).hexdigest(),
    )


def test_corrupt_remote_file_falls_back_one_checkpoint(storage: Storage, tmp_path: Path) -> None:
    root = tmp_path / "up"
    write_checkpoint(root, 10, {"model.bin": b"a" * 5000})
    write_checkpoint(root, 20, {"model.bin": b"b" * 5000})
    refs = upload(storage, root)
    # Same size, different bytes: only the sha256 can tell.
    storage.put_bytes("jobs/j1/g1/checkpoints/000000000020/model.bin", b"c" * 5000)

    result = restore(storage, refs[::-1], tmp_path / "down")
    assert restored_step(result) == 10
    (skip,) = result.report.skipped
    assert skip.manifest_key == refs[1].manifest_key and "sha256 mismatch" in skip.reason
    assert not (tmp_path / "down" / "checkpoint-20").exists()


def test_missing_remote_file_falls_back(storage: Storage, tmp_path: Path) -> None:
    root = tmp_path / "up"
    write_checkpoint(root, 1, {"model.bin": b"a"})
    write_checkpoint(root, 2, {"model.bin": b"b", "extra.bin": b"e"})
    refs = upload(storage, root)
    storage._delete(["jobs/j1/g1/checkpoints/000000000002/extra.bin"])
    result = restore(storage, refs[::-1], tmp_path / "down")
    assert restored_step(result) == 1
    assert "extra.bin: not in the bucket" in result.report.skipped[0].reason


def test_only_recorded_checkpoints_are_restored_in_the_recorded_order(
    storage: Storage, tmp_path: Path
) -> None:
    """g1 wrote 30; g2 restored it and wrote 20 from a line of its own; a g1 zombie then wrote a
    higher step 90 nobody recorded. g3 restores g2's 20: the newest recorded, whatever the
    steps, and never the zombie's."""
    write_checkpoint(tmp_path / "g1", 30, {"w": b"gen1"})
    write_checkpoint(tmp_path / "g2", 20, {"w": b"gen2"})
    write_checkpoint(tmp_path / "zombie", 90, {"w": b"zombie"})
    (g1,) = upload(storage, tmp_path / "g1", generation=1)
    (g2,) = upload(storage, tmp_path / "g2", generation=2)
    upload(storage, tmp_path / "zombie", generation=1)
    result = restore(storage, [g2, g1], tmp_path / "r", generation=3)
    assert result.restored is not None and result.restored.ref == g2
    assert (result.restored.local_dir / "w").read_bytes() == b"gen2"
    # its own generation's or a newer one's checkpoints are not candidates at all
    mine = restore(storage, [g2, g1], tmp_path / "r2", generation=2)
    assert mine.restored is not None and mine.restored.ref == g1
    assert "not an earlier generation" in mine.report.skipped[0].reason


def test_no_checkpoint_recorded_means_fresh_start(storage: Storage, tmp_path: Path) -> None:
    result = restore(storage, [], tmp_path)
    assert result.restored is None
    assert result.report.model_dump() == {"outcome": "fresh", "candidates": 0, "skipped": []}


def test_retention_keeps_the_last_n(storage: Storage, tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    uploader = uploader_for(storage, root, keep=2)
    for step in (1, 2, 3, 4):
        write_checkpoint(root, step, {"model.bin": bytes([step]) * 100})
        uploader.upload_pending()
    assert sorted(storage.list_checkpoints(1)) == [
        RemoteCheckpointId(3, 1),
        RemoteCheckpointId(4, 1),
    ]
    assert all(storage.read_manifest(RemoteCheckpointId(s, 1)) for s in (3, 4))


def test_retention_never_reaches_an_older_generations_checkpoints(
    storage: Storage, tmp_path: Path
) -> None:
    for step in (1, 2, 3):
        write_checkpoint(tmp_path / "g1", step, {"m": bytes([step])})
    upload(storage, tmp_path / "g1", generation=1)
    uploader = uploader_for(storage, tmp_path / "g2", generation=2, keep=1)
    for step in (4, 5, 6):
        write_checkpoint(tmp_path / "g2", step, {"m": bytes([step])})
        uploader.upload_pending()
    assert sorted(c.step for c in storage.list_checkpoints(1)) == [1, 2, 3]
    assert [c.step for c in storage.list_checkpoints(2)] == [6]


def test_a_generation_started_again_on_its_disk_uploads_only_newer_checkpoints(
    storage: Storage, tmp_path: Path
) -> None:
    """An interruptible host back from an outbid: the same generation's agent starts again on
    the disk it had. Its checkpoints already in the bucket keep their recorded manifests, the
    ones retention deleted stay deleted, and only a newer one goes up."""
    root = tmp_path / "ckpt"
    first = uploader_for(storage, root, keep=2)
    for step in (1, 2, 3):
        write_checkpoint(root, step, {"model.bin": bytes([step]) * 100})
        first.upload_pending()
    recorded = storage.get_bytes(f"{storage.prefix}g1/checkpoints/000000000003/manifest.json")

    again = uploader_for(storage, root, keep=2)
    assert again.adopt_remote() == [2, 3]
    assert again.upload_pending() == []
    write_checkpoint(root, 4, {"model.bin": b"4" * 100})
    assert [r.step for r in again.upload_pending()] == [4]

    assert storage.get_bytes(f"{storage.prefix}g1/checkpoints/000000000003/manifest.json") == (
        recorded
    )
    assert sorted(c.step for c in storage.list_checkpoints(1)) == [3, 4]


def test_prune_local_keeps_only_the_newest_uploaded(storage: Storage, tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    uploader = CheckpointUploader(storage, root, MARKER, 1, 3, prune_local=True)
    for step in (1, 2, 3):
        write_checkpoint(root, step, {"m": b"x"})
        uploader.upload_pending()
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint-3"]


def test_credentials_rotated_mid_upload_complete_the_upload(tmp_path: Path) -> None:
    """The old key stops working mid-upload (server restarted knowing only the new key, which
    also loses the multipart upload); the new key arrives later, as from a heartbeat."""
    data_root = tmp_path / "s3"
    old_server = start_s3_server(data_root, {ACCESS_KEY: SECRET_KEY})
    port = old_server.port
    old_server.create_bucket("rot")
    storage = make_storage(
        old_server.endpoint_url, "rot", credential_wait_s=30, max_attempts=30, concurrency=2
    )
    storage.limiter = type(storage.limiter)(20e6)  # slow enough to restart the server mid-way
    big = os.urandom(40 * 1024 * 1024)
    write_checkpoint(tmp_path / "ckpt", 9, {"big.bin": big})
    uploader = uploader_for(storage, tmp_path / "ckpt")
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(uploader.upload_pending()))
    thread.start()
    new_server = None
    try:
        deadline = time.monotonic() + 20
        while storage.stats.bytes_uploaded < 10 * 1024 * 1024 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert thread.is_alive(), "upload finished before the rotation"
        old_server.stop()
        new_server = start_s3_server(data_root, {"ROTATEDKEY002": "rotated-secret-2"}, port=port)
        time.sleep(0.3)  # old key refused for a while: parts wait for new credentials
        storage.store.offer(
            Credentials("ROTATEDKEY002", "rotated-secret-2", "", time.time() + 900,
                        new_server.endpoint_url, "rot")
        )  # fmt: skip
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert result and result[0], "upload did not complete"
        uploaded = result[0]
        assert isinstance(uploaded, list)
        restored = restore(storage, uploaded, tmp_path / "back").restored
        assert restored is not None and (restored.local_dir / "big.bin").read_bytes() == big
    finally:
        thread.join(timeout=1)
        storage.close()
        if new_server:
            new_server.stop()
        old_server.stop()


def test_the_uploader_times_each_upload_for_the_heartbeat(storage: Storage, tmp_path: Path) -> None:
    """`last_upload_s` (what heartbeats report, and the next host's interval is computed from)
    is unset before any upload and the seconds of the last one after."""
    root = tmp_path / "ckpt"
    write_checkpoint(root, 5, {"model.bin": b"x" * 1000})
    uploader = uploader_for(storage, root)
    assert uploader.last_upload_s is None
    (ref,) = uploader.upload_pending()
    assert ref.step == 5
    assert uploader.last_upload_s is not None and uploader.last_upload_s >= 0
