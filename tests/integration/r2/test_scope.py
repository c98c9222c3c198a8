"""A minted key reaches its bucket, prefixes or objects, with its permission, and nothing else:
what R2 refuses with 403 AccessDenied, the front refuses too, and nothing lands on disk."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.r2_harness import BUCKET, OTHER_BUCKET, R2, refused

ACCESS_DENIED = (403, "AccessDenied")


def job() -> str:
    return f"jobs/{uuid.uuid4().hex[:8]}/"


def test_in_scope_write_read_list_and_delete_work(r2: R2) -> None:
    a = job()
    s3 = r2.client(r2.mint(prefixes=[a]))
    s3.put_object(Bucket=BUCKET, Key=f"{a}x.txt", Body=b"hello")
    assert s3.get_object(Bucket=BUCKET, Key=f"{a}x.txt")["Body"].read() == b"hello"
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=a)
    assert [o["Key"] for o in listed["Contents"]] == [f"{a}x.txt"]
    assert s3.head_object(Bucket=BUCKET, Key=f"{a}x.txt")["ContentLength"] == 5
    s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": f"{a}x.txt"}]})
    assert f"{a}x.txt" not in r2.on_disk()


@pytest.mark.parametrize("key", ["jobs/B/x.bin", "other.txt", "jobs/Aother/x.bin"])
def test_out_of_scope_writes_are_refused_and_nothing_lands(r2: R2, key: str) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/A/"]))
    before = r2.on_disk()
    assert refused(s3.put_object, Bucket=BUCKET, Key=key, Body=b"x" * 1000) == ACCESS_DENIED
    assert refused(s3.create_multipart_upload, Bucket=BUCKET, Key=key) == ACCESS_DENIED
    assert refused(s3.delete_object, Bucket=BUCKET, Key=key) == ACCESS_DENIED
    assert r2.on_disk() == before


def test_a_refused_write_is_not_readable_back_with_the_same_key(r2: R2) -> None:
    """Today's per-key views answered 200 to the write and to reading it back."""
    s3 = r2.client(r2.mint(prefixes=["jobs/A/"]))
    refused(s3.put_object, Bucket=BUCKET, Key="jobs/B/secret.bin", Body=b"x")
    assert refused(s3.get_object, Bucket=BUCKET, Key="jobs/B/secret.bin") == ACCESS_DENIED


def test_out_of_scope_reads_and_lists_are_refused(r2: R2) -> None:
    a, b = job(), job()
    r2.client(r2.mint(prefixes=[b])).put_object(Bucket=BUCKET, Key=f"{b}w.bin", Body=b"w")
    s3 = r2.client(r2.mint(prefixes=[a]))
    assert refused(s3.get_object, Bucket=BUCKET, Key=f"{b}w.bin") == ACCESS_DENIED
    assert refused(s3.head_object, Bucket=BUCKET, Key=f"{b}w.bin")[0] == 403  # HEAD: no body
    assert refused(s3.list_objects_v2, Bucket=BUCKET, Prefix=b) == ACCESS_DENIED
    assert refused(s3.list_objects_v2, Bucket=BUCKET) == ACCESS_DENIED  # the whole bucket
    assert refused(s3.list_objects_v2, Bucket=BUCKET, Prefix="jobs/") == ACCESS_DENIED
    assert refused(s3.list_objects, Bucket=BUCKET, Prefix=b) == ACCESS_DENIED  # v1 too


def test_delete_objects_with_one_key_out_of_scope_deletes_nothing(r2: R2) -> None:
    a, b = job(), job()
    r2.client(r2.mint(prefixes=[b])).put_object(Bucket=BUCKET, Key=f"{b}keep.bin", Body=b"k")
    s3 = r2.client(r2.mint(prefixes=[a]))
    s3.put_object(Bucket=BUCKET, Key=f"{a}mine.bin", Body=b"m")
    batch = {"Objects": [{"Key": f"{a}mine.bin"}, {"Key": f"{b}keep.bin"}]}
    assert refused(s3.delete_objects, Bucket=BUCKET, Delete=batch) == ACCESS_DENIED
    assert {f"{a}mine.bin", f"{b}keep.bin"} <= set(r2.on_disk())


def test_copy_from_out_of_scope_source_is_refused(r2: R2) -> None:
    a, b = job(), job()
    r2.client(r2.mint(prefixes=[b])).put_object(Bucket=BUCKET, Key=f"{b}src.bin", Body=b"s")
    s3 = r2.client(r2.mint(prefixes=[a]))
    source = {"Bucket": BUCKET, "Key": f"{b}src.bin"}
    assert refused(s3.copy_object, Bucket=BUCKET, Key=f"{a}dst.bin", CopySource=source) == (
        ACCESS_DENIED
    )
    assert f"{a}dst.bin" not in r2.on_disk()


def test_another_bucket_is_refused(r2: R2) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/A/"]))
    assert refused(s3.put_object, Bucket=OTHER_BUCKET, Key="jobs/A/x", Body=b"x") == ACCESS_DENIED
    assert refused(s3.list_objects_v2, Bucket=OTHER_BUCKET, Prefix="jobs/A/") == ACCESS_DENIED
    assert r2.on_disk(OTHER_BUCKET) == []


def test_read_only_key_reads_but_cannot_write_or_delete(r2: R2) -> None:
    a = job()
    r2.client(r2.mint(prefixes=[a])).put_object(Bucket=BUCKET, Key=f"{a}x.bin", Body=b"x")
    s3 = r2.client(r2.mint(prefixes=[a], permission="object-read-only"))
    assert s3.get_object(Bucket=BUCKET, Key=f"{a}x.bin")["Body"].read() == b"x"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=a)["Contents"]] == [
        f"{a}x.bin"
    ]
    assert refused(s3.put_object, Bucket=BUCKET, Key=f"{a}y.bin", Body=b"y") == ACCESS_DENIED
    assert refused(s3.delete_object, Bucket=BUCKET, Key=f"{a}x.bin") == ACCESS_DENIED
    assert refused(s3.create_multipart_upload, Bucket=BUCKET, Key=f"{a}z.bin") == ACCESS_DENIED
    batch = {"Objects": [{"Key": f"{a}x.bin"}]}
    assert refused(s3.delete_objects, Bucket=BUCKET, Delete=batch) == ACCESS_DENIED
    assert f"{a}x.bin" in r2.on_disk() and f"{a}y.bin" not in r2.on_disk()


def test_objects_scoped_key_reads_only_its_objects(r2: R2) -> None:
    a = job()
    writer = r2.client(r2.mint(prefixes=[a]))
    for name in ("mine.bin", "theirs.bin"):
        writer.put_object(Bucket=BUCKET, Key=f"{a}{name}", Body=name.encode())
    s3 = r2.client(r2.mint(objects=[f"{a}mine.bin"], permission="object-read-only"))
    assert s3.get_object(Bucket=BUCKET, Key=f"{a}mine.bin")["Body"].read() == b"mine.bin"
    assert refused(s3.get_object, Bucket=BUCKET, Key=f"{a}theirs.bin") == ACCESS_DENIED
    assert refused(s3.list_objects_v2, Bucket=BUCKET, Prefix=a) == ACCESS_DENIED


def test_bucket_level_operations_need_an_admin_key(r2: R2) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/A/"]))
    assert refused(s3.list_buckets) == ACCESS_DENIED
    assert refused(s3.create_bucket, Bucket="newbucket") == ACCESS_DENIED
    assert refused(s3.delete_bucket, Bucket=BUCKET) == ACCESS_DENIED
    assert not (r2.s3.root / "newbucket").exists()
    admin = r2.client(r2.mint(permission="admin-read-only"))
    assert BUCKET in [b["Name"] for b in admin.list_buckets()["Buckets"]]
    assert refused(admin.create_bucket, Bucket="newbucket") == ACCESS_DENIED
    assert not (r2.s3.root / "newbucket").exists()


def test_whole_bucket_key_reaches_every_prefix(r2: R2) -> None:
    s3 = r2.client(r2.mint())
    a = job()
    s3.put_object(Bucket=BUCKET, Key=f"{a}x", Body=b"x")
    s3.put_object(Bucket=BUCKET, Key="top-level.txt", Body=b"t")
    assert "top-level.txt" in [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
