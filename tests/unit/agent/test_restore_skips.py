"""Each way a recorded candidate can be bad, and the exact reason the restore reports for it
(tether_agent/restore.py, rules in tether_agent/checkpoints.py). The bad candidate comes first,
a good one second: the good one must be what lands on disk, and nothing of the bad one.

The reasons are pinned word for word because they are what a user reads on the job's timeline
(`restore_skipped`); the limits are pinned at their edges (exactly at a limit passes).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tether_agent.checkpoints import (
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_FILES,
    MAX_PART,
    MAX_PARTS,
    MIB,
    MIN_PART,
    Manifest,
    ManifestFile,
    RemoteCheckpointId,
    manifest_problem,
    parse_remote_dir,
    part_size_for,
)
from tether_agent.protocol import CheckpointRef
from tether_agent.restore import RestoreResult, restore_latest
from tether_agent.storage import IntegrityError, StorageError

from tests.unit.agent.test_restore import PREFIX, FakeBucket

GOOD_STEP = 100
BAD_STEP = 200


def record(bucket: FakeBucket, step: int, generation: int, manifest: bytes) -> CheckpointRef:
    """`manifest` stored as the checkpoint's manifest and recorded with its own sha256 (what a
    current generation's heartbeat would have made the control plane record)."""
    key = RemoteCheckpointId(step, generation).manifest_key(PREFIX)
    bucket.objects[key] = manifest
    return CheckpointRef(
        step=step,
        generation=generation,
        manifest_key=key,
        manifest_sha256=hashlib.sha256(manifest).hexdigest(),
    )


def manifest_bytes(step: int, generation: int, files: list[dict[str, Any]], pad: int = 0) -> bytes:
    body = {"step": step, "generation": generation, "created_at": "2026-01-01T00:00:00Z"}
    return (json.dumps(body | {"files": files}) + " " * pad).encode()


def entry(path: str, data: bytes) -> dict[str, Any]:
    return {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def bad_dir(name: str = "") -> str:
    return str(RemoteCheckpointId(BAD_STEP, 2).dir_key(PREFIX)) + name


# Each case: makes the newest candidate bad (in the bucket it is given) and returns it.
def file_missing(bucket: FakeBucket) -> CheckpointRef:
    ref = bucket.checkpoint(BAD_STEP, 2, {"w": b"abc"})
    del bucket.objects[bad_dir("w")]
    return ref


def file_of_another_size(bucket: FakeBucket) -> CheckpointRef:
    ref = bucket.checkpoint(BAD_STEP, 2, {"w": b"abc"})
    bucket.objects[bad_dir("w")] = b"abcde"
    return ref


def file_altered_same_size(bucket: FakeBucket) -> CheckpointRef:
    ref = bucket.checkpoint(BAD_STEP, 2, {"w": b"abc", "x": b"fine"})
    bucket.objects[bad_dir("w")] = b"xyz"
    return ref


def malformed_manifest(bucket: FakeBucket) -> CheckpointRef:
    return record(bucket, BAD_STEP, 2, b'{"step": 200')


def manifest_of_another_step(bucket: FakeBucket) -> CheckpointRef:
    bucket.objects[bad_dir("w")] = b"abc"
    return record(bucket, BAD_STEP, 2, manifest_bytes(900, 2, [entry("w", b"abc")]))


def manifest_with_unsafe_path(bucket: FakeBucket) -> CheckpointRef:
    return record(bucket, BAD_STEP, 2, manifest_bytes(BAD_STEP, 2, [entry("../../w", b"abc")]))


def manifest_listing_a_file_twice(bucket: FakeBucket) -> CheckpointRef:
    bucket.objects[bad_dir("w")] = b"abc"
    files = [entry("w", b"abc"), entry("./w", b"abc")]
    return record(bucket, BAD_STEP, 2, manifest_bytes(BAD_STEP, 2, files))


def manifest_too_large(bucket: FakeBucket) -> CheckpointRef:
    bucket.objects[bad_dir("w")] = b"abc"
    small = manifest_bytes(BAD_STEP, 2, [entry("w", b"abc")])
    pad = MAX_MANIFEST_BYTES + 1 - len(small)
    return record(bucket, BAD_STEP, 2, manifest_bytes(BAD_STEP, 2, [entry("w", b"abc")], pad))


def key_outside_the_layout(bucket: FakeBucket) -> CheckpointRef:
    ref = bucket.checkpoint(BAD_STEP, 2, {"w": b"abc"})
    return ref.model_copy(
        update={"manifest_key": "jobs/j2/g2/checkpoints/000000000200/manifest.json"}
    )


def key_of_another_step(bucket: FakeBucket) -> CheckpointRef:
    ref = bucket.checkpoint(BAD_STEP, 2, {"w": b"abc"})
    return ref.model_copy(update={"step": 300})


def file_unreadable(bucket: FakeBucket) -> CheckpointRef:
    ref = bucket.checkpoint(BAD_STEP, 2, {"w": b"abc"})
    bucket.fail[bad_dir("w")] = StorageError("503 after 5 tries")
    return ref


def file_cut_short_in_transfer(bucket: FakeBucket) -> CheckpointRef:
    ref = bucket.checkpoint(BAD_STEP, 2, {"w": b"abc"})
    bucket.fail[bad_dir("w")] = IntegrityError("w: 2 of 3 bytes arrived")
    return ref


def manifest_unreadable(bucket: FakeBucket) -> CheckpointRef:
    ref = bucket.checkpoint(BAD_STEP, 2, {"w": b"abc"})
    bucket.fail[ref.manifest_key] = StorageError("connection reset")
    return ref


CASES: dict[str, tuple[Callable[[FakeBucket], CheckpointRef], str]] = {
    "file missing": (file_missing, "w: not in the bucket"),
    "file of another size": (file_of_another_size, "w: 5 bytes in the bucket, manifest says 3"),
    "file altered, same size": (file_altered_same_size, "w: sha256 mismatch"),
    "malformed manifest": (malformed_manifest, "malformed manifest (1 errors)"),
    "manifest of another step": (
        manifest_of_another_step,
        "manifest names another step or generation",
    ),
    "unsafe path": (manifest_with_unsafe_path, "unsafe path in manifest: ../../w"),
    "a file twice": (manifest_listing_a_file_twice, "manifest lists a file twice"),
    "manifest too large": (
        manifest_too_large,
        f"manifest of {MAX_MANIFEST_BYTES + 1} bytes (at most {MAX_MANIFEST_BYTES})",
    ),
    "key outside the layout": (
        key_outside_the_layout,
        "manifest key is not in the job's checkpoint layout",
    ),
    "key of another step": (key_of_another_step, "manifest key names another step or generation"),
    "file unreadable": (file_unreadable, "storage unreadable: 503 after 5 tries"),
    "file cut short in transfer": (file_cut_short_in_transfer, "w: 2 of 3 bytes arrived"),
    "manifest unreadable": (manifest_unreadable, "storage unreadable: connection reset"),
}


def restore_into(bucket: FakeBucket, refs: list[CheckpointRef], where: Path) -> RestoreResult:
    return restore_latest(bucket, refs, 3, where)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_candidate_is_skipped_with_its_reason_and_the_next_restored(
    tmp_path: Path, case: str
) -> None:
    make_bad, reason = CASES[case]
    bucket = FakeBucket()
    good = bucket.checkpoint(GOOD_STEP, 1, {"w": b"good"})
    bad = make_bad(bucket)
    where = tmp_path / "nested" / "checkpoints"  # created, parents too
    result = restore_into(bucket, [bad, good], where)
    assert [(s.manifest_key, s.reason) for s in result.report.skipped] == [
        (bad.manifest_key, reason)
    ]
    assert result.report.outcome == "restored"
    assert result.restored is not None and result.restored.ref == good
    assert result.restored.local_dir == where / "checkpoint-100"
    assert sorted(p.name for p in where.iterdir()) == ["checkpoint-100"]  # no staging, no bad
    assert (where / "checkpoint-100" / "w").read_bytes() == b"good"


def test_a_manifest_exactly_at_the_size_limit_is_read(tmp_path: Path) -> None:
    bucket = FakeBucket()
    bucket.objects[bad_dir("w")] = b"abc"
    small = manifest_bytes(BAD_STEP, 2, [entry("w", b"abc")])
    pad = MAX_MANIFEST_BYTES - len(small)
    ref = record(bucket, BAD_STEP, 2, manifest_bytes(BAD_STEP, 2, [entry("w", b"abc")], pad))
    result = restore_into(bucket, [ref], tmp_path)
    assert result.restored is not None and result.report.skipped == []


@pytest.mark.parametrize(("free_beyond_need", "restored"), [(-1, False), (0, True)])
def test_a_checkpoint_restores_only_when_the_disk_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free_beyond_need: int, restored: bool
) -> None:
    bucket = FakeBucket()
    ref = bucket.checkpoint(GOOD_STEP, 1, {"w": b"12345", "x": b"678"})
    usage = shutil.disk_usage(tmp_path)
    free = 8 + free_beyond_need
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=free))
    result = restore_into(bucket, [ref], tmp_path)
    assert (result.restored is not None) is restored
    if not restored:
        assert [s.reason for s in result.report.skipped] == ["needs 8 bytes, the disk has 7 free"]
        assert result.report.outcome == "fresh"


def test_a_restore_replaces_what_an_earlier_attempt_left(tmp_path: Path) -> None:
    """A crashed earlier restore may have left a staging folder and a final one: neither's
    files may survive into what training starts from."""
    bucket = FakeBucket()
    ref = bucket.checkpoint(GOOD_STEP, 1, {"w": b"good"})
    staging = tmp_path / ".tether-restore-g1-000000000100"
    staging.mkdir()
    (staging / "stale").write_bytes(b"from a crashed attempt")
    final = tmp_path / "checkpoint-100"
    final.mkdir()
    (final / "older").write_bytes(b"from before")
    result = restore_into(bucket, [ref], tmp_path)
    assert result.restored is not None
    assert sorted(p.name for p in final.iterdir()) == ["w"]
    assert not staging.exists()


def test_no_candidate_is_a_fresh_start_that_reads_nothing(tmp_path: Path) -> None:
    bucket = FakeBucket()
    empty = restore_into(bucket, [], tmp_path / "checkpoints")
    assert empty.report.model_dump() == {"outcome": "fresh", "candidates": 0, "skipped": []}
    assert empty.restored is None and bucket.read == []


# -- the rules under the restore, at their edges ----------------------------------------------


def test_a_manifest_of_exactly_the_most_files_is_allowed() -> None:
    files = [ManifestFile(path=f"f{i}", size=0, sha256="0" * 64) for i in range(MAX_MANIFEST_FILES)]
    manifest = Manifest(step=1, generation=1, created_at="2026-01-01T00:00:00Z", files=files)
    cid = RemoteCheckpointId(1, 1)
    assert manifest_problem(manifest, cid) is None
    one_more = manifest.model_copy(
        update={"files": [*files, ManifestFile(path="extra", size=0, sha256="0" * 64)]}
    )
    assert manifest_problem(one_more, cid) == (
        f"manifest lists {MAX_MANIFEST_FILES + 1} files (at most {MAX_MANIFEST_FILES})"
    )


def test_an_unsafe_path_is_quoted_to_a_hundred_characters() -> None:
    long_path = "../" + "x" * 200
    manifest = Manifest(
        step=1,
        generation=1,
        created_at="2026-01-01T00:00:00Z",
        files=[ManifestFile(path=long_path, size=0, sha256="0" * 64)],
    )
    assert manifest_problem(manifest, RemoteCheckpointId(1, 1)) == (
        "unsafe path in manifest: " + long_path[:100]
    )


@pytest.mark.parametrize(
    ("name", "step"),
    [("000000000500", 500), ("000000000500/", 500), ("000000000500//", 500), ("x/", None)],
)
def test_a_step_directory_with_or_without_its_slash(name: str, step: int | None) -> None:
    assert parse_remote_dir(name) == step


@pytest.mark.parametrize(
    ("size", "preferred", "part"),
    [
        (0, 16 * MIB, 16 * MIB),  # an empty file still gets the preferred part
        (100 * MIB, 16 * MIB, 16 * MIB),  # small enough: the preferred size
        (100 * MIB, 1 * MIB, MIN_PART),  # never under R2's 5 MiB
        (100 * MIB, 11 * MIB // 2, 6 * MIB),  # rounded up to a whole MiB
        (10_000 * 20 * MIB, 16 * MIB, 20 * MIB),  # 10,000 parts at most: larger parts
        (10_000 * 20 * MIB + 1, 16 * MIB, 21 * MIB),
        (MAX_PART * MAX_PARTS, 16 * MIB, MAX_PART),  # the largest object there is
    ],
)
def test_part_sizes(size: int, preferred: int, part: int) -> None:
    assert part_size_for(size, preferred) == part


def test_a_file_past_the_largest_object_is_refused_with_its_size() -> None:
    too_big = MAX_PART * MAX_PARTS + 1
    with pytest.raises(ValueError, match=f"file of {too_big} bytes exceeds the S3 object limit"):
        part_size_for(too_big)
