"""Ranged downloads against a real S3 server (`rclone serve s3`): every range streams through its
thread's reused buffer into the file at its own offset, the sha256 is taken from the file as the
bytes land, a range cut off mid-body resumes where it stopped, and the connection a finished
range used serves the next request (tether_agent/ranged_download.py)."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from tether_agent.checkpoints import MIB
from tether_agent.ranged_download import READ_PATH_COPY, READ_PATH_DIRECT
from tether_agent.storage import IntegrityError, Storage

from tests.integration.agent.conftest import make_storage
from tests.integration.agent.test_checkpoint_storage import restore, upload, write_checkpoint
from tether_local.r2.s3server import S3Server

KEY = "jobs/j1/data.bin"
SIZE = 13 * MIB + 123  # three 5 MiB ranges, the last one short and not page aligned


def pattern(size: int) -> bytes:
    """Bytes that differ at every offset that matters: a block written at the wrong offset, or
    twice, or a stale buffer's leftovers, all change the file."""
    block = os.urandom(MIB)
    return b"".join(block[i % 251 :] + block[: i % 251] for i in range(-(-size // MIB)))[:size]


def small_ranges(storage: Storage) -> Storage:
    storage.download_range = storage.min_download_range = 5 * MIB
    return storage


@pytest.fixture
def serial(s3_server: S3Server, bucket: str) -> Iterator[Storage]:
    """One transfer thread: every range goes through the same reused buffer, on the same
    connection."""
    st = small_ranges(make_storage(s3_server.endpoint_url, bucket, concurrency=1))
    yield st
    st.close()


class Client:
    """The real S3 client, with `get_object` replies passed through `edit` (and the ranges
    asked for recorded)."""

    def __init__(self, real: Any, edit: Callable[[dict[str, Any], dict[str, Any]], Any]) -> None:
        self._real, self._edit = real, edit
        self.ranges: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def get_object(self, **kwargs: Any) -> Any:
        self.ranges.append(kwargs.get("Range", ""))
        return self._edit(kwargs, self._real.get_object(**kwargs))


def intercept(storage: Storage, edit: Callable[[dict[str, Any], dict[str, Any]], Any]) -> Client:
    client = Client(storage.store.client(storage.store.current()), edit)
    storage.store.client = lambda creds: client  # type: ignore[method-assign]
    return client


class CutBody:
    """A body that ends after `cut` bytes, as a connection reset mid-transfer does."""

    def __init__(self, real: Any, cut: int) -> None:
        self._real, self._left = real, cut

    def read(self, amt: int) -> bytes:
        data: bytes = self._real.read(min(amt, self._left))
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._real.close()


def test_ranges_from_one_reused_buffer_land_intact_at_their_offsets(
    serial: Storage, tmp_path: Path
) -> None:
    data = pattern(SIZE)
    serial.put_bytes(KEY, data)
    assert len(serial.spans(SIZE)) == 3
    dest = tmp_path / "data.bin"
    digest = serial.download_file(KEY, dest, SIZE)
    assert dest.read_bytes() == data
    assert digest == hashlib.sha256(data).hexdigest()
    assert serial.stats.bytes_downloaded == SIZE
    # botocore over urllib3: each body read from the socket straight into the buffer
    assert serial.stats.read_paths == {READ_PATH_DIRECT: 3}


class PlainBody:
    """A body with only `read` and `close`, as another HTTP stack's would be."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def read(self, amt: int) -> bytes:
        data: bytes = self._real.read(amt)
        return data

    def close(self) -> None:
        self._real.close()


def test_a_body_without_the_socket_beneath_is_read_by_copy_and_counted_so(
    serial: Storage, tmp_path: Path
) -> None:
    data = pattern(SIZE)
    serial.put_bytes(KEY, data)

    def plain(kwargs: dict[str, Any], reply: dict[str, Any]) -> Any:
        reply["Body"] = PlainBody(reply["Body"])
        return reply

    intercept(serial, plain)
    digest = serial.download_file(KEY, tmp_path / "data.bin", SIZE)
    assert digest == hashlib.sha256(data).hexdigest()
    assert serial.stats.read_paths == {READ_PATH_COPY: 3}


def test_the_digest_is_of_the_bytes_served_so_a_changed_range_shows(
    serial: Storage, tmp_path: Path
) -> None:
    data = pattern(SIZE)
    served = bytearray(data)
    served[7 * MIB] ^= 1  # one bit, in the middle range
    serial.put_bytes(KEY, bytes(served))
    digest = serial.download_file(KEY, tmp_path / "data.bin", SIZE)
    assert digest == hashlib.sha256(served).hexdigest() != hashlib.sha256(data).hexdigest()


def test_a_range_cut_off_mid_body_resumes_where_it_stopped(serial: Storage, tmp_path: Path) -> None:
    data = pattern(SIZE)
    serial.put_bytes(KEY, data)
    cut = 2 * MIB + 17
    calls = {"n": 0}

    def cut_second(kwargs: dict[str, Any], reply: dict[str, Any]) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            reply["Body"] = CutBody(reply["Body"], cut)
        return reply

    client = intercept(serial, cut_second)
    digest = serial.download_file(KEY, tmp_path / "data.bin", SIZE)
    assert (tmp_path / "data.bin").read_bytes() == data
    assert digest == hashlib.sha256(data).hexdigest()
    second = 5 * MIB
    assert client.ranges == [
        f"bytes=0-{second - 1}",
        f"bytes={second}-{2 * second - 1}",
        f"bytes={second + cut}-{2 * second - 1}",  # only what had not landed
        f"bytes={2 * second}-{SIZE - 1}",
    ]


def test_a_reply_of_another_length_than_the_range_is_an_integrity_error(
    serial: Storage, tmp_path: Path
) -> None:
    serial.put_bytes(KEY, pattern(SIZE))

    def whole_object(kwargs: dict[str, Any], reply: dict[str, Any]) -> Any:
        reply["Body"].close()
        return serial.store.client(serial.store.current())._real.get_object(
            Bucket=kwargs["Bucket"], Key=kwargs["Key"]
        )  # a server that ignores Range

    intercept(serial, whole_object)
    with pytest.raises(IntegrityError, match="expected"):
        serial.download_file(KEY, tmp_path / "data.bin", SIZE)


def test_a_failed_range_fails_the_file(s3_server: S3Server, bucket: str, tmp_path: Path) -> None:
    storage = small_ranges(make_storage(s3_server.endpoint_url, bucket, concurrency=2))
    try:
        storage.put_bytes(KEY, pattern(SIZE))

        def gone_at_the_last(kwargs: dict[str, Any], reply: dict[str, Any]) -> Any:
            if kwargs.get("Range", "").startswith(f"bytes={10 * MIB}-"):
                reply["Body"].close()
                raise ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject")
            return reply

        intercept(storage, gone_at_the_last)
        with pytest.raises(IntegrityError, match="missing"):
            storage.download_file(KEY, tmp_path / "data.bin", SIZE)
    finally:
        storage.close()


def test_empty_and_single_range_files(serial: Storage, tmp_path: Path) -> None:
    serial.put_bytes("jobs/j1/empty", b"")
    serial.put_bytes("jobs/j1/small", b"abc")
    assert serial.download_file("jobs/j1/empty", tmp_path / "e", 0) == hashlib.sha256().hexdigest()
    assert (tmp_path / "e").read_bytes() == b""
    assert serial.download_file("jobs/j1/small", tmp_path / "s", 3) == (
        hashlib.sha256(b"abc").hexdigest()
    )
    with pytest.raises(IntegrityError, match="missing"):
        serial.download_file("jobs/j1/absent", tmp_path / "a", 3)


def test_the_connection_of_a_finished_range_serves_the_next(
    serial: Storage, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = pattern(SIZE)
    serial.put_bytes(KEY, data)
    with caplog.at_level(logging.DEBUG, logger="urllib3.connectionpool"):
        serial.download_file(KEY, tmp_path / "data.bin", SIZE)
        serial.download_file(KEY, tmp_path / "again.bin", SIZE)
    opened = [r for r in caplog.records if "Starting new" in r.getMessage()]
    # put_bytes opened the one connection (one thread); six ranges later it is the only one
    assert opened == []
    assert (tmp_path / "again.bin").read_bytes() == data


def test_a_checkpoint_with_one_changed_range_is_not_restored(
    serial: Storage, tmp_path: Path
) -> None:
    data = pattern(SIZE)
    write_checkpoint(tmp_path / "up", 10, {"model.bin": data})
    write_checkpoint(tmp_path / "up", 20, {"model.bin": data})
    refs = upload(serial, tmp_path / "up")
    tampered = bytearray(data)
    tampered[SIZE - 5] ^= 0xFF  # the last range only: the first two still land intact
    serial.put_bytes("jobs/j1/g1/checkpoints/000000000020/model.bin", bytes(tampered))

    result = restore(serial, refs[::-1], tmp_path / "down")
    assert result.restored is not None and result.restored.ref.step == 10
    assert "sha256 mismatch" in result.report.skipped[0].reason
    assert (result.restored.local_dir / "model.bin").read_bytes() == data
    assert not (tmp_path / "down" / "checkpoint-20").exists()


def test_ranges_dropped_by_a_closing_storage_fail_the_file_instead_of_hanging(
    serial: Storage, tmp_path: Path
) -> None:
    serial.put_bytes(KEY, pattern(SIZE))
    first_asked, closed = threading.Event(), threading.Event()

    def hold_the_first(kwargs: dict[str, Any], reply: dict[str, Any]) -> Any:
        first_asked.set()
        closed.wait()
        return reply

    intercept(serial, hold_the_first)
    outcome: list[BaseException] = []

    def download() -> None:
        try:
            serial.download_file(KEY, tmp_path / "data.bin", SIZE)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=download)
    worker.start()
    first_asked.wait()
    serial.close()  # the agent shutting down: the two queued ranges are dropped
    closed.set()
    worker.join(60)  # a guard against a hang, not a measure of speed
    assert not worker.is_alive(), "download_file still waits on ranges that will never run"
    assert [type(e) for e in outcome] == [CancelledError]


def test_a_download_started_on_a_closed_storage_is_cancelled(
    serial: Storage, tmp_path: Path
) -> None:
    """The storage closing while a download still submits its ranges (the race of the test
    above, when the close lands between two submits) fails it as cancelled too, not with the
    pool's RuntimeError."""
    serial.put_bytes(KEY, pattern(SIZE))
    serial.close()
    with pytest.raises(CancelledError):
        serial.download_file(KEY, tmp_path / "data.bin", SIZE)


def test_an_upload_cut_by_a_closing_storage_fails_instead_of_hanging(
    s3_server: S3Server, bucket: str, tmp_path: Path
) -> None:
    """The upload side of the same shutdown: parts the closing pool drops never release their
    window slot themselves, so the reading loop must not wait on them, nor the error path."""
    st = make_storage(s3_server.endpoint_url, bucket, concurrency=2)
    path = tmp_path / "big.bin"
    path.write_bytes(pattern(8 * 5 * MIB + 7))  # 9 parts of 5 MiB: more than the window
    first_sent, closed = threading.Event(), threading.Event()
    real_acquire = st.limiter.acquire

    def hold(nbytes: int) -> None:
        first_sent.set()
        closed.wait()
        real_acquire(nbytes)

    st.limiter.acquire = hold  # type: ignore[method-assign]
    outcome: list[BaseException] = []

    def upload_it() -> None:
        try:
            st.upload_file(path, "jobs/j1/g1/big.bin")
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=upload_it)
    worker.start()
    first_sent.wait()
    st.close()  # the agent shutting down mid-upload: the queued parts are dropped
    closed.set()
    worker.join(60)  # a guard against a hang, not a measure of speed
    assert not worker.is_alive(), "upload_file still waits on parts that will never run"
    assert len(outcome) == 1 and isinstance(outcome[0], CancelledError | RuntimeError)
    assert st.get_bytes("jobs/j1/g1/big.bin") is None  # never completed
