"""The restore's rules against an in-memory bucket (tether_agent/restore.py): candidates are
tried in the recorded order, a manifest is trusted only when its bytes hash to the recorded
sha256, any exception on a candidate skips it with a reason, and only storage that cannot be
read at all ends in `unreadable`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from tether_agent.checkpoints import RemoteCheckpointId
from tether_agent.protocol import CheckpointRef
from tether_agent.restore import parse_candidates, restore_latest
from tether_agent.storage import StorageError, TransferCancelled

PREFIX = "jobs/j1/"


class FakeBucket:
    """What the restore needs of `Storage`, over a dict; `fail` maps a key to what reading it
    raises."""

    prefix = PREFIX

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.fail: dict[str, BaseException] = {}
        self.read: list[str] = []

    def _check(self, key: str) -> None:
        self.read.append(key)
        if key in self.fail:
            raise self.fail[key]

    def list_sizes(self, prefix: str) -> dict[str, int]:
        self._check(prefix)
        return {k: len(v) for k, v in self.objects.items() if k.startswith(prefix)}

    def get_bytes(self, key: str) -> bytes | None:
        self._check(key)
        return self.objects.get(key)

    def download_file(self, key: str, dest: Path, size: int) -> str:
        self._check(key)
        data = self.objects[key]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        return hashlib.sha256(data).hexdigest()

    def checkpoint(self, step: int, generation: int, files: dict[str, bytes]) -> CheckpointRef:
        """An uploaded checkpoint, as the control plane records it."""
        cid = RemoteCheckpointId(step, generation)
        for name, data in files.items():
            self.objects[cid.dir_key(PREFIX) + name] = data
        manifest = json.dumps(
            {
                "step": step,
                "generation": generation,
                "created_at": "2026-01-01T00:00:00Z",
                "files": [
                    {"path": n, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                    for n, d in files.items()
                ],
            }
        ).encode()
        key = cid.manifest_key(PREFIX)
        self.objects[key] = manifest
        return CheckpointRef(
            step=step,
            generation=generation,
            manifest_key=key,
            manifest_sha256=hashlib.sha256(manifest).hexdigest(),
        )


def restore(bucket: FakeBucket, candidates: list[CheckpointRef], tmp_path: Path) -> Any:
    return restore_latest(bucket, candidates, 3, tmp_path)  # type: ignore[arg-type]


def test_the_first_usable_candidate_in_the_recorded_order_wins(tmp_path: Path) -> None:
    bucket = FakeBucket()
    newest = bucket.checkpoint(300, 2, {"w": b"g2"})
    higher_step = bucket.checkpoint(900, 1, {"w": b"g1"})  # recorded earlier: it comes second
    result = restore(bucket, [newest, higher_step], tmp_path)
    assert result.restored is not None and result.restored.ref == newest
    assert (tmp_path / "checkpoint-300" / "w").read_bytes() == b"g2"
    assert result.report.model_dump() == {"outcome": "restored", "candidates": 2, "skipped": []}
    assert not [k for k in bucket.read if "000000000900" in k]  # never even looked at


def test_a_manifest_is_trusted_only_if_it_hashes_to_the_recorded_sha256(tmp_path: Path) -> None:
    bucket = FakeBucket()
    older = bucket.checkpoint(100, 1, {"w": b"old"})
    newer = bucket.checkpoint(200, 2, {"w": b"new"})
    # rewritten after it was recorded: valid, consistent, and not what was recorded
    bucket.checkpoint(200, 2, {"w": b"forged"})
    result = restore(bucket, [newer, older], tmp_path)
    assert result.restored is not None and result.restored.ref == older
    (skip,) = result.report.skipped
    assert (skip.manifest_key, skip.reason) == (
        newer.manifest_key,
        "manifest sha256 differs from the recorded one",
    )
    assert not (tmp_path / "checkpoint-200").exists()


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (RuntimeError("nobody saw this coming"), "RuntimeError: nobody saw this coming"),
        (KeyError("x"), "KeyError: 'x'"),
        (OSError(28, "No space left on device"), "No space left on device"),
    ],
)
def test_any_exception_on_a_candidate_skips_it(
    tmp_path: Path, error: BaseException, reason: str
) -> None:
    bucket = FakeBucket()
    good = bucket.checkpoint(100, 1, {"w": b"good"})
    bad = bucket.checkpoint(200, 2, {"w": b"bad"})
    bucket.fail[RemoteCheckpointId(200, 2).dir_key(PREFIX) + "w"] = error
    result = restore(bucket, [bad, good], tmp_path)
    assert result.restored is not None and result.restored.ref == good
    assert reason in result.report.skipped[0].reason
    assert not list(tmp_path.glob(".tether-restore-*"))  # no staging left behind


def test_storage_that_cannot_be_read_is_unreadable_not_a_fresh_start(tmp_path: Path) -> None:
    bucket = FakeBucket()
    one = bucket.checkpoint(100, 1, {"w": b"a"})
    two = bucket.checkpoint(200, 2, {"w": b"b"})
    for ref in (one, two):
        bucket.fail[ref.manifest_key.rsplit("/", 1)[0] + "/"] = StorageError("503 after retries")
    result = restore(bucket, [two, one], tmp_path)
    assert result.restored is None and result.report.outcome == "unreadable"
    assert [s.reason for s in result.report.skipped] == [
        "storage unreadable: 503 after retries"
    ] * 2


def test_a_readable_good_candidate_still_wins_after_an_unreadable_one(tmp_path: Path) -> None:
    bucket = FakeBucket()
    good = bucket.checkpoint(100, 1, {"w": b"a"})
    flaky = bucket.checkpoint(200, 2, {"w": b"b"})
    bucket.fail[flaky.manifest_key] = StorageError("reset")
    result = restore(bucket, [flaky, good], tmp_path)
    assert result.restored is not None and result.report.outcome == "restored"


def test_nothing_usable_is_a_fresh_start_with_every_reason(tmp_path: Path) -> None:
    bucket = FakeBucket()
    gone = bucket.checkpoint(100, 1, {"w": b"a"})
    del bucket.objects[gone.manifest_key]
    unsigned = gone.model_copy(update={"manifest_sha256": None})
    mine = bucket.checkpoint(100, 3, {"w": b"c"})  # its own generation's: not a candidate
    result = restore(bucket, [gone, unsigned, mine], tmp_path)
    assert result.restored is None and result.report.outcome == "fresh"
    assert [s.reason for s in result.report.skipped] == [
        "no manifest in the bucket",
        "no recorded manifest sha256",
        "written by g3, not an earlier generation",
    ]


def test_a_superseded_agent_stops_restoring_at_once(tmp_path: Path) -> None:
    bucket = FakeBucket()
    ref = bucket.checkpoint(100, 1, {"w": b"a"})
    bucket.fail[ref.manifest_key] = TransferCancelled("superseded")
    with pytest.raises(TransferCancelled):
        restore(bucket, [ref], tmp_path)


def test_long_reasons_are_cut_to_the_wire_bound(tmp_path: Path) -> None:
    bucket = FakeBucket()
    ref = bucket.checkpoint(100, 1, {"w": b"a"})
    bucket.fail[ref.manifest_key] = RuntimeError("x" * 5000)
    (skip,) = restore(bucket, [ref], tmp_path).report.skipped
    assert len(skip.reason) == 300


def test_the_candidate_list_from_the_environment() -> None:
    ref = {"step": 1, "generation": 1, "manifest_key": "k", "manifest_sha256": "a" * 64}
    assert parse_candidates(None) == ([], None)
    found, problem = parse_candidates(json.dumps([ref] * 20))
    assert len(found) == 16 and problem is None  # the wire's bound
    assert parse_candidates("[{") == ([], "the recorded checkpoint list is unreadable (1 errors)")
