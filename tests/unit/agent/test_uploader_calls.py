"""The uploader's fixed per-checkpoint calls (tether_agent/uploader.py), counted against an
in-memory bucket: the generation is listed once, not per checkpoint; retention deletes what it
knows without listing; the largest file goes first; and the newest complete checkpoint is never
a victim."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tether_agent.checkpoints import Manifest, RemoteCheckpointId
from tether_agent.storage import Storage
from tether_agent.uploader import CheckpointUploader

PREFIX = "jobs/j1/"
MARKER = ".tether-complete"
ROOT = f"{PREFIX}g1/checkpoints/"


@dataclass
class _Creds:
    version: int = 0


class _Store:
    def current(self) -> _Creds:
        return _Creds()


class FakeStorage:
    """What the uploader needs of `Storage`, over a dict; `calls` records each operation."""

    prefix = PREFIX

    def __init__(self) -> None:
        self.store = _Store()
        self.objects: dict[str, bytes] = {}
        self.calls: list[tuple[str, str]] = []

    def upload_file(self, path: Path, key: str) -> tuple[int, str]:
        self.calls.append(("upload", key))
        data = path.read_bytes()
        self.objects[key] = data
        return len(data), hashlib.sha256(data).hexdigest()

    def put_manifest(self, cid: RemoteCheckpointId, manifest: Manifest) -> tuple[str, str]:
        key = cid.manifest_key(PREFIX)
        self.calls.append(("manifest", key))
        data = manifest.model_dump_json().encode()
        self.objects[key] = data
        return key, hashlib.sha256(data).hexdigest()

    def list_keys(self, prefix: str) -> list[str]:
        self.calls.append(("list", prefix))
        return sorted(k for k in self.objects if k.startswith(prefix))

    def delete_checkpoint(self, cid: RemoteCheckpointId, keys: Any = None) -> None:
        manifest = cid.manifest_key(PREFIX)
        assert keys is not None, "retention listed a directory it knew"
        self.calls.append(("delete", manifest))
        self.objects.pop(manifest, None)
        self.calls.append(("delete", cid.dir_key(PREFIX)))
        for key in keys:
            self.objects.pop(key, None)

    def ops(self, name: str) -> list[str]:
        return [what for op, what in self.calls if op == name]


def checkpoint(root: Path, step: int, sizes: dict[str, int]) -> None:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    for name, size in sizes.items():
        (path / name).write_bytes(bytes([step % 256]) * size)
    (path / MARKER).write_text("done")


def uploader(fake: FakeStorage, root: Path, keep: int = 2) -> CheckpointUploader:
    return CheckpointUploader(cast(Storage, fake), root, MARKER, 1, keep, file_concurrency=1)


def steps_in_bucket(fake: FakeStorage) -> list[int]:
    return sorted({int(k.removeprefix(ROOT)[:12]) for k in fake.objects if k.startswith(ROOT)})


def test_the_generation_is_listed_once_not_per_checkpoint(tmp_path: Path) -> None:
    fake = FakeStorage()
    up = uploader(fake, tmp_path)
    assert up.adopt_remote() == []  # the agent's start: the one listing
    for step in (1, 2, 3, 4, 5):
        checkpoint(tmp_path, step, {"model.bin": 10})
        (ref,) = up.upload_pending()
        assert ref.step == step
    assert fake.ops("list") == [ROOT]
    assert len(fake.ops("manifest")) == 5
    # three victims, each: the manifest, then the rest of its keys; no listing of its directory
    assert fake.ops("delete") == [
        RemoteCheckpointId(s, 1).manifest_key(PREFIX) if i % 2 == 0 else f"{ROOT}{s:012d}/"
        for s in (1, 2, 3)
        for i in (0, 1)
    ]
    assert steps_in_bucket(fake) == [4, 5]
    assert not any(k.startswith(f"{ROOT}000000000003/") for k in fake.objects)


def test_without_adopt_the_first_retention_lists_once(tmp_path: Path) -> None:
    fake = FakeStorage()
    up = uploader(fake, tmp_path, keep=1)
    for step in (1, 2, 3):
        checkpoint(tmp_path, step, {"model.bin": 10})
        up.upload_pending()
    assert fake.ops("list") == [ROOT]
    assert steps_in_bucket(fake) == [3]


def test_leftovers_of_an_earlier_agent_are_deleted_whole(tmp_path: Path) -> None:
    """The same generation started again (outbid, same disk): the one listing at start sees an
    incomplete directory (killed mid-upload) and a complete one; both go once newer complete
    ones exist, every key of theirs with them, and the newest complete checkpoint stays."""
    fake = FakeStorage()
    fake.objects[f"{ROOT}000000000001/model.bin"] = b"half"  # no manifest: killed upload
    fake.objects[f"{ROOT}000000000002/model.bin"] = b"m"
    fake.objects[f"{ROOT}000000000002/stray.tmp"] = b"s"
    fake.objects[f"{ROOT}000000000002/manifest.json"] = b"{}"
    up = uploader(fake, tmp_path, keep=1)
    assert up.adopt_remote() == [2]
    assert steps_in_bucket(fake) == [1, 2]
    checkpoint(tmp_path, 3, {"model.bin": 10})
    (ref,) = up.upload_pending()
    assert ref.step == 3
    assert steps_in_bucket(fake) == [3]
    assert f"{ROOT}000000000003/manifest.json" in fake.objects
    assert fake.ops("list") == [ROOT]


def test_retention_never_deletes_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    """A failed try leaves an incomplete newer directory: the newest complete one stays."""
    fake = FakeStorage()
    up = uploader(fake, tmp_path, keep=1)
    checkpoint(tmp_path, 1, {"model.bin": 10})
    up.upload_pending()
    fake.objects[f"{ROOT}000000000002/model.bin"] = b"in flight"  # newer, incomplete
    assert up.apply_retention() == []
    assert f"{ROOT}000000000001/manifest.json" in fake.objects


def test_the_largest_file_goes_up_first_and_the_manifest_last(tmp_path: Path) -> None:
    fake = FakeStorage()
    up = uploader(fake, tmp_path)
    checkpoint(tmp_path, 7, {"a_small.json": 10, "m_big.bin": 3000, "z_mid.bin": 200})
    (ref,) = up.upload_pending()
    base = f"{ROOT}000000000007/"
    uploads = [k.removeprefix(base) for k in fake.ops("upload")]
    assert uploads == ["m_big.bin", "z_mid.bin", "a_small.json", MARKER]
    ops = [op for op, _ in fake.calls]
    assert ops.index("manifest") == len(uploads)  # after every file, before retention's listing
    manifest = Manifest.model_validate_json(fake.objects[ref.manifest_key])
    assert [f.path for f in manifest.files] == [MARKER, "a_small.json", "m_big.bin", "z_mid.bin"]


def test_ranged_gets_split_small_files_and_keep_large_ranges_for_large_ones() -> None:
    from tether_agent.storage import Storage as RealStorage
    from tether_agent.storage_credentials import Credentials, CredentialStore

    store = CredentialStore(Credentials("k", "s", "", None, "http://127.0.0.1:9", "b"))
    storage = RealStorage(store, PREFIX, part_size=16 * 2**20)
    mib = 2**20
    try:
        ranges = [storage.range_for(n) // mib for n in (1, 32 * mib, 64 * mib, 100 * mib)]
        assert ranges == [16, 16, 16, 25]  # a 64 MiB shard: four ranges, not one stream
        assert storage.range_for(2**30) // mib == 64
    finally:
        storage.close()
