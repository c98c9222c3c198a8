"""Bodies through the front: large objects stream both ways intact over kept-alive connections,
a chunked upload gets R2's 411, and multipart uploads follow R2's part rules (which rclone alone
does not enforce)."""

from __future__ import annotations

import hashlib
import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.integration.r2_harness import BUCKET, R2, refused
from tether_local.r2.s3server import S3Server

MIB = 1024 * 1024


def parts(s3: Any, key: str, sizes: list[int]) -> tuple[str, list[dict[str, object]]]:
    """Start a multipart upload of `key` and upload parts of these sizes."""
    upload_id = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    done = []
    for number, size in enumerate(sizes, start=1):
        reply = s3.upload_part(
            Bucket=BUCKET, Key=key, UploadId=upload_id, PartNumber=number, Body=b"p" * size
        )
        done.append({"PartNumber": number, "ETag": reply["ETag"]})
    return upload_id, done


def test_large_object_round_trip_is_intact(r2: R2) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/big/"]))
    data = os.urandom(24 * MIB + 7)
    s3.put_object(Bucket=BUCKET, Key="jobs/big/blob.bin", Body=data)
    assert hashlib.sha256((r2.data / "jobs/big/blob.bin").read_bytes()).digest() == (
        hashlib.sha256(data).digest()
    )
    back = s3.get_object(Bucket=BUCKET, Key="jobs/big/blob.bin")["Body"].read()
    assert back == data
    ranged = s3.get_object(Bucket=BUCKET, Key="jobs/big/blob.bin", Range="bytes=5-9")
    assert ranged["Body"].read() == data[5:10]


def etag_of(data: bytes) -> str:
    """A single-part object's ETag: the quoted MD5 of its bytes (an S3 name, not a security
    hash)."""
    return f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'


def test_an_object_changed_on_disk_is_served_with_its_new_etag(r2: R2) -> None:
    """rclone keeps each object's MD5 from its upload, as R2 keeps its ETag; a file changed
    behind its back (as tests tamper with checkpoints) is hashed again, never served with the
    old ETag."""
    s3 = r2.client(r2.mint(prefixes=["jobs/etag/"]))
    first, second = os.urandom(3 * MIB), os.urandom(3 * MIB)
    s3.put_object(Bucket=BUCKET, Key="jobs/etag/blob.bin", Body=first)
    head = s3.head_object(Bucket=BUCKET, Key="jobs/etag/blob.bin")
    assert head["ETag"] == etag_of(first)
    on_disk = r2.data / "jobs/etag/blob.bin"
    on_disk.write_bytes(second)  # the same size: only the modification time tells
    stamp = on_disk.stat().st_mtime + 5
    os.utime(on_disk, (stamp, stamp))
    time.sleep(1.2)  # past rclone's directory cache (1 s)
    got = s3.get_object(Bucket=BUCKET, Key="jobs/etag/blob.bin")
    assert got["Body"].read() == second
    assert got["ETag"] == etag_of(second)


def test_the_servers_hash_cache_goes_with_it(tmp_path: Path) -> None:
    with S3Server(tmp_path / "root") as server:
        cache = server.hash_cache
        assert cache is not None and cache.is_dir()
    assert not cache.exists() and server.hash_cache is None


def test_uniform_parts_with_a_short_last_one_complete(r2: R2) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/mp/"]))
    key = f"jobs/mp/{uuid.uuid4().hex}.bin"
    upload_id, done = parts(s3, key, [5 * MIB, 5 * MIB, 1234])
    s3.complete_multipart_upload(
        Bucket=BUCKET, Key=key, UploadId=upload_id, MultipartUpload={"Parts": done}
    )
    assert s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"] == 10 * MIB + 1234


def test_a_part_under_5_mib_before_the_last_is_entity_too_small(r2: R2) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/mp/"]))
    key = f"jobs/mp/{uuid.uuid4().hex}.bin"
    upload_id, done = parts(s3, key, [1 * MIB, 1 * MIB])
    complete = {"Bucket": BUCKET, "Key": key, "UploadId": upload_id}
    code = refused(s3.complete_multipart_upload, **complete, MultipartUpload={"Parts": done})
    assert code == (400, "EntityTooSmall")
    assert not (r2.data / key).exists()


def test_unequal_parts_before_the_last_are_an_invalid_part(r2: R2) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/mp/"]))
    key = f"jobs/mp/{uuid.uuid4().hex}.bin"
    upload_id, done = parts(s3, key, [6 * MIB, 5 * MIB, 10])
    complete = {"Bucket": BUCKET, "Key": key, "UploadId": upload_id}
    code = refused(s3.complete_multipart_upload, **complete, MultipartUpload={"Parts": done})
    assert code == (400, "InvalidPart")
    assert not (r2.data / key).exists()


def test_parts_of_an_out_of_scope_key_are_refused(r2: R2) -> None:
    writer = r2.client(r2.mint(prefixes=["jobs/mp/"]))
    key = f"jobs/mp/{uuid.uuid4().hex}.bin"
    upload_id = writer.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    intruder = r2.client(r2.mint(prefixes=["jobs/other/"]))
    code = refused(
        intruder.upload_part, Bucket=BUCKET, Key=key, UploadId=upload_id, PartNumber=1, Body=b"x"
    )
    assert code == (403, "AccessDenied")
    code = refused(intruder.abort_multipart_upload, Bucket=BUCKET, Key=key, UploadId=upload_id)
    assert code == (403, "AccessDenied")


def test_a_multipart_upload_outlives_its_key(r2: R2) -> None:
    """R2's multipart uploads belong to the bucket: a rotated key finishes what the old began."""
    old = r2.client(r2.mint(prefixes=["jobs/rot/"]))
    key = f"jobs/rot/{uuid.uuid4().hex}.bin"
    upload_id, done = parts(old, key, [5 * MIB])
    new = r2.client(r2.mint(prefixes=["jobs/rot/"]))
    last = new.upload_part(Bucket=BUCKET, Key=key, UploadId=upload_id, PartNumber=2, Body=b"e")
    done.append({"PartNumber": 2, "ETag": last["ETag"]})
    new.complete_multipart_upload(
        Bucket=BUCKET, Key=key, UploadId=upload_id, MultipartUpload={"Parts": done}
    )
    assert (r2.data / key).stat().st_size == 5 * MIB + 1


def test_chunked_upload_without_length_is_refused_as_r2_does(r2: R2) -> None:
    creds = r2.mint(prefixes=["jobs/chunked/"])
    url = f"{r2.url}/{BUCKET}/jobs/chunked/streamed.bin"
    request = AWSRequest(
        method="PUT", url=url, headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"}
    )
    SigV4Auth(
        Credentials(creds.access_key_id, creds.secret_access_key, creds.session_token), "s3", "auto"
    ).add_auth(request)
    pieces = [os.urandom(300_000) for _ in range(5)]

    def body() -> Iterator[bytes]:
        yield from pieces

    reply = httpx.put(url, headers=dict(request.headers.items()), content=body())
    assert reply.status_code == 411 and "<Code>MissingContentLength</Code>" in reply.text
    assert not (r2.data / "jobs/chunked/streamed.bin").exists()


def test_many_requests_share_one_keep_alive_connection(r2: R2) -> None:
    creds = r2.mint(prefixes=["jobs/ka/"])
    s3 = r2.client(creds)
    s3.put_object(Bucket=BUCKET, Key="jobs/ka/x", Body=b"x")
    with httpx.Client() as client:
        sockets = set()
        for _ in range(5):
            url = s3.generate_presigned_url(
                "get_object", Params={"Bucket": BUCKET, "Key": "jobs/ka/x"}, ExpiresIn=60
            )
            with client.stream("GET", url) as reply:
                reply.read()
                assert reply.status_code == 200
                stream = reply.extensions["network_stream"]
                sockets.add(stream.get_extra_info("client_addr"))
        refused_url = url.replace("jobs/ka/x", "jobs/other/x")
        assert client.get(refused_url).status_code == 403
        assert client.get(url).status_code == 200  # a refusal keeps the connection usable
        assert len(sockets) == 1


def test_a_request_after_a_head_reaches_rclone_once(r2: R2) -> None:
    """The front's upstream connection stays usable after a bodiless answer (HEAD, 204): had it
    been left unread, the next request would be sent once on it, refused by http.client, and
    sent again on a fresh connection, so rclone would run a copy or a CreateMultipartUpload
    twice, the two racing (a GET right after such a copy once read the key as missing)."""
    s3 = r2.client(r2.mint(prefixes=["jobs/once/"]))
    s3.put_object(Bucket=BUCKET, Key="jobs/once/x", Body=b"x")
    for n in range(3):
        s3.head_object(Bucket=BUCKET, Key="jobs/once/x")  # same client connection as the next
        s3.create_multipart_upload(Bucket=BUCKET, Key=f"jobs/once/up-{n}")
    s3.delete_object(Bucket=BUCKET, Key="jobs/once/x")  # 204
    s3.create_multipart_upload(Bucket=BUCKET, Key="jobs/once/up-3")
    listed = s3.list_multipart_uploads(Bucket=BUCKET, Prefix="jobs/once/")
    assert sorted(u["Key"] for u in listed.get("Uploads", [])) == [
        f"jobs/once/up-{n}" for n in range(4)
    ]


def test_a_long_listing_comes_through_whole(r2: R2) -> None:
    """rclone sends long listings chunked; the front passes them on re-chunked."""
    s3 = r2.client(r2.mint(prefixes=["jobs/many/"]))
    keys = [f"jobs/many/file-{i:04d}.bin" for i in range(150)]
    for key in keys:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"x")
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="jobs/many/")
    assert [o["Key"] for o in listed["Contents"]] == keys


def test_a_client_gone_mid_upload_leaves_nothing_and_the_front_serves_on(r2: R2) -> None:
    creds = r2.mint(prefixes=["jobs/cut/"])
    url = f"{r2.url}/{BUCKET}/jobs/cut/half.bin"
    request = AWSRequest(
        method="PUT",
        url=url,
        headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD", "Content-Length": str(8 * MIB)},
    )
    SigV4Auth(
        Credentials(creds.access_key_id, creds.secret_access_key, creds.session_token), "s3", "auto"
    ).add_auth(request)
    head = f"PUT /{BUCKET}/jobs/cut/half.bin HTTP/1.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in request.headers.items()
    )
    head += f"Host: 127.0.0.1:{r2.front.port}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", r2.front.port)) as sock:
        sock.sendall(head.encode() + b"x" * MIB)  # an eighth of the body, then gone
    s3 = r2.client(creds)
    s3.put_object(Bucket=BUCKET, Key="jobs/cut/whole.bin", Body=b"w")
    assert s3.get_object(Bucket=BUCKET, Key="jobs/cut/whole.bin")["Body"].read() == b"w"
    deadline = time.monotonic() + 10  # rclone drops the cut upload once it sees the close
    while (r2.data / "jobs/cut/half.bin").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (r2.data / "jobs/cut/half.bin").exists()
