"""Log shipping: bounded, ordered segments without secrets, against a fake writer and a real S3
server; and the real agent process shipping its training output."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from tether_agent.logs import LogShipper, cut_point, scrub, segment_key
from tether_agent.storage import StorageError, TransferCancelled

from functions.domain.storage_layout import parse_segment_key
from tests.integration.agent.conftest import (
    ControlPlane,
    agent_env,
    finish,
    make_storage,
    start_agent,
)
from tether_local.r2.s3server import S3Server


class FakeWriter:
    """Records segments; `fail` makes the next N puts raise."""

    prefix = "jobs/j1/"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.fail = 0
        self.cancelled = False

    def put_bytes(self, key: str, data: bytes, content_type: str = "") -> None:
        if self.cancelled:
            raise TransferCancelled(key)
        if self.fail:
            self.fail -= 1
            raise StorageError(f"put {key}: boom")
        assert key not in self.objects, "a segment is written once"
        self.objects[key] = data

    def text(self) -> bytes:
        return b"".join(self.objects[k] for k in sorted(self.objects))


def lines(n: int, width: int = 20) -> list[bytes]:
    return [f"line {i:05d} ".ljust(width - 1, "x").encode() + b"\n" for i in range(n)]


@pytest.mark.parametrize(
    ("buffer", "limit", "expected"),
    [
        (b"abc\n", 10, 4),  # fits
        (b"ab\ncd\nef", 7, 6),  # up to the last newline within the limit
        (b"abcdefgh\n", 4, 4),  # a line longer than the limit is cut hard
        (b"ab\ncdefgh", 3, 3),  # the newline at the limit's edge counts
    ],
)
def test_cut_point(buffer: bytes, limit: int, expected: int) -> None:
    assert cut_point(buffer, limit) == expected


def test_scrub_replaces_secrets_but_not_short_strings() -> None:
    data = b"token=s3cr3t-value-123 key=abc\n"
    assert scrub(data, ["s3cr3t-value-123", "abc", ""]) == b"token=[redacted] key=abc\n"


def test_segments_are_bounded_ordered_and_lossless() -> None:
    writer = FakeWriter()
    shipper = LogShipper(writer, 2, segment_bytes=100, max_buffer_bytes=1000)
    output = lines(23)
    for line in output:
        shipper.write(line)
    shipper.close()
    keys = sorted(writer.objects)
    assert keys == [segment_key("jobs/j1/", 2, i) for i in range(len(keys))]
    assert all(len(writer.objects[k]) <= 100 for k in keys)
    assert all(writer.objects[k].endswith(b"\n") for k in keys)  # cut at line breaks
    assert writer.text() == b"".join(output)


def test_only_full_segments_go_before_the_interval() -> None:
    writer = FakeWriter()
    shipper = LogShipper(writer, 1, segment_bytes=100)
    for line in lines(7):  # 140 bytes: one full segment and a partial one
        shipper.write(line)
    assert shipper.flush(partial=False) == 1
    assert shipper.flush(partial=False) == 0
    assert shipper.flush(partial=True) == 1
    assert len(writer.objects) == 2


def test_failed_upload_is_retried_under_the_same_name_without_loss() -> None:
    writer = FakeWriter()
    shipper = LogShipper(writer, 1, segment_bytes=100)
    first = lines(3)
    for line in first:
        shipper.write(line)
    writer.fail = 1
    assert shipper.flush(partial=True) == 0
    later = lines(2)
    for line in later:
        shipper.write(line)
    assert shipper.flush(partial=True) == 1
    assert list(writer.objects) == [segment_key("jobs/j1/", 1, 0)]
    assert writer.text() == b"".join(first + later)


def test_memory_is_bounded_when_uploads_keep_failing() -> None:
    writer = FakeWriter()
    shipper = LogShipper(writer, 1, segment_bytes=100, max_buffer_bytes=200)
    for line in lines(50):  # 1000 bytes; only the newest 200 fit
        shipper.write(line)
    writer.fail = 0
    shipper.close()
    text = writer.text()
    assert text.startswith(b"[tether] 800 bytes of log dropped\n")
    assert text.endswith(lines(50)[-1])


def test_total_upload_is_capped_per_generation() -> None:
    writer = FakeWriter()
    shipper = LogShipper(writer, 1, segment_bytes=100, max_total_bytes=250)
    for line in lines(40):
        shipper.write(line)
        shipper.flush(partial=False)
    shipper.close()
    text = writer.text()
    assert len(text) <= 250 + 100
    assert text.endswith(b"log upload cap reached; the full log stays on the host\n")
    shipper.write(b"more\n")
    assert shipper.flush(partial=True) == 0


def test_cancelled_storage_stops_shipping() -> None:
    writer = FakeWriter()
    shipper = LogShipper(writer, 1, segment_bytes=100)
    shipper.write(b"hello\n")
    writer.cancelled = True
    assert shipper.flush(partial=True) == 0
    writer.cancelled = False
    shipper.write(b"more\n")
    assert shipper.flush(partial=True) == 0
    assert writer.objects == {}


def test_secrets_never_reach_the_bucket() -> None:
    writer = FakeWriter()
    shipper = LogShipper(writer, 1, secrets=lambda: ["hunter2-long-secret"])
    shipper.write(b"export KEY=hunter2-long-secret\n")
    shipper.close()
    assert writer.text() == b"export KEY=[redacted]\n"


def test_segment_names_are_the_ones_the_api_lists() -> None:
    key = segment_key("jobs/j-1/", 12, 345)
    assert parse_segment_key("j-1", key) == (12, 345)
    assert parse_segment_key("j-2", key) is None


def test_shipper_thread_uploads_to_real_s3(s3_server: S3Server, bucket: str) -> None:
    storage = make_storage(s3_server.endpoint_url, bucket)
    shipper = LogShipper(storage, 3, segment_bytes=1024, interval_s=0.05)
    shipper.start()
    output = lines(200, width=40)
    for line in output:
        shipper.write(line)
    shipper.close()
    keys = storage.list_keys("jobs/j1/")
    assert keys == sorted(keys) and len(keys) >= 8
    assert all(re.fullmatch(r"jobs/j1/g3/logs/\d{6}\.log", k) for k in keys)
    assert b"".join(storage.get_bytes(k) or b"" for k in keys) == b"".join(output)
    storage.close()


def test_agent_ships_training_output_without_its_secrets(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(tmp_path, s3_server, bucket, control_plane)
    script = "import os; print('step 1'); print('key', os.environ['CONTAINER_API_KEY'])"
    code, out = finish(start_agent(env, [sys.executable, "-c", script]))
    assert code == 0, out
    storage = make_storage(s3_server.endpoint_url, bucket)
    keys = storage.list_keys("jobs/j1/g1/logs/")
    text = b"".join(storage.get_bytes(k) or b"" for k in keys).decode()
    assert storage.list_keys("jobs/j1/") == keys  # no checkpoint: nothing else was written
    storage.close()
    assert keys and all(k.startswith("jobs/j1/g1/logs/") for k in keys)
    assert text.startswith("[tether] generation 1 on instance 4242: no checkpoint;")
    assert "step 1\nkey [redacted]\n" in text
    assert "instance-key-4242" not in text
    assert text.endswith("[tether] training exited with 0\n")


def test_api_reader_lists_and_presigns_what_the_agent_wrote(
    s3_server: S3Server, bucket: str
) -> None:
    """The logs API's bucket reader against the same S3 server: listing after a cursor and a
    presigned GET that works without credentials and not after it is tampered with."""
    import httpx

    from functions.adapters.cloudflare import TempCredentials
    from functions.adapters.r2 import ReadOnlyBucket
    from tests.integration.agent.conftest import ACCESS_KEY, SECRET_KEY

    storage = make_storage(s3_server.endpoint_url, bucket)
    shipper = LogShipper(storage, 1, segment_bytes=64)
    for line in lines(12):  # 3 lines of 20 bytes per segment: 4 segments
        shipper.write(line)
    shipper.close()
    storage.close()
    minted: list[tuple[str, int]] = []

    def mint(prefix: str, ttl_s: int) -> TempCredentials:
        minted.append((prefix, ttl_s))
        return TempCredentials(ACCESS_KEY, SECRET_KEY, "", 4e9)

    reader = ReadOnlyBucket(endpoint=s3_server.endpoint_url, bucket=bucket, mint=mint)
    prefix = "jobs/j1/g1/logs/"
    found = reader.list_after(prefix, None, 100)
    assert [o.key for o in found] == [segment_key("jobs/j1/", 1, i) for i in range(4)]
    later = reader.list_after(prefix, found[1].key, 2)
    assert [o.key for o in later] == [found[2].key, found[3].key]
    url, _ = reader.presign_get(prefix, found[0].key, 60)
    assert httpx.get(url).content == b"".join(lines(3))
    assert httpx.get(url.replace("X-Amz-Signature=", "X-Amz-Signature=0")).status_code == 403
    assert minted == [(prefix, 900)]  # one mint serves every call while it is valid
