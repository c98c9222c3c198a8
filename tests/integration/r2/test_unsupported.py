"""Features R2 does not take, refused by the front as R2 refuses them although rclone would
accept them: boto3's default request checksums and aws-chunked trailers on uploads (400), ACLs,
tagging and object lock (501 `NotImplemented`). The agent's own configuration still passes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.integration.r2_harness import BUCKET, R2, refused

MIB = 1024 * 1024


def test_boto3_default_checksums_are_refused_on_put_object(r2: R2) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/crc/"]), checksums="when_supported")
    assert refused(s3.put_object, Bucket=BUCKET, Key="jobs/crc/a.bin", Body=b"x" * 1000) == (
        400,
        "InvalidRequest",
    )
    assert not (r2.data / "jobs/crc/a.bin").exists()
    assert [(r.method, r.status, r.code) for r in r2.front.refusals] == [
        ("PUT", 400, "InvalidRequest")
    ]


def test_boto3_default_checksums_are_refused_on_upload_part(r2: R2) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/crc/"]), checksums="when_supported")
    upload_id = s3.create_multipart_upload(Bucket=BUCKET, Key="jobs/crc/m.bin")["UploadId"]
    assert refused(
        s3.upload_part,
        Bucket=BUCKET,
        Key="jobs/crc/m.bin",
        UploadId=upload_id,
        PartNumber=1,
        Body=b"p" * (5 * MIB),
    ) == (400, "InvalidRequest")
    s3.abort_multipart_upload(Bucket=BUCKET, Key="jobs/crc/m.bin", UploadId=upload_id)


def test_the_agents_checksum_configuration_still_uploads(r2: R2) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/crc/"]))  # `when_required`, as the agent
    s3.put_object(Bucket=BUCKET, Key="jobs/crc/ok.bin", Body=b"x" * 1000)
    upload_id = s3.create_multipart_upload(Bucket=BUCKET, Key="jobs/crc/okm.bin")["UploadId"]
    etag = s3.upload_part(
        Bucket=BUCKET, Key="jobs/crc/okm.bin", UploadId=upload_id, PartNumber=1, Body=b"p" * 10
    )["ETag"]
    s3.complete_multipart_upload(
        Bucket=BUCKET,
        Key="jobs/crc/okm.bin",
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
    )
    # DeleteObjects must carry a checksum (botocore sends its CRC32 even `when_required`).
    s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": "jobs/crc/ok.bin"}]})
    assert (r2.data / "jobs/crc/okm.bin").read_bytes() == b"p" * 10
    assert list(r2.front.refusals) == []


def test_an_aws_chunked_upload_with_a_trailer_is_refused(r2: R2) -> None:
    creds = r2.mint(prefixes=["jobs/crc/"])
    url = f"{r2.url}/{BUCKET}/jobs/crc/chunked.bin"
    body = b"5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n"
    request = AWSRequest(
        method="PUT",
        url=url,
        headers={
            "Content-Encoding": "aws-chunked",
            "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
            "x-amz-decoded-content-length": "5",
            "x-amz-trailer": "x-amz-checksum-crc32",
            "Content-Length": str(len(body)),
        },
    )
    SigV4Auth(
        Credentials(creds.access_key_id, creds.secret_access_key, creds.session_token), "s3", "auto"
    ).add_auth(request)
    reply = httpx.put(url, headers=dict(request.headers.items()), content=body)
    assert reply.status_code == 400 and "<Code>InvalidRequest</Code>" in reply.text
    assert not (r2.data / "jobs/crc/chunked.bin").exists()


@pytest.mark.parametrize(
    "extra",
    [
        {"ACL": "public-read"},
        {"GrantRead": 'id="someone"'},
        {"Tagging": "team=ml"},
        {"ObjectLockMode": "GOVERNANCE", "ObjectLockRetainUntilDate": "2030-01-01T00:00:00Z"},
        {"ObjectLockLegalHoldStatus": "ON"},
    ],
    ids=["acl", "grant", "tagging", "lock-mode", "legal-hold"],
)
def test_acls_tagging_and_object_lock_are_not_implemented(r2: R2, extra: dict[str, Any]) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/acl/"]))
    key = f"jobs/acl/{'-'.join(extra)}.bin"
    assert refused(s3.put_object, Bucket=BUCKET, Key=key, Body=b"x", **extra) == (
        501,
        "NotImplemented",
    )
    assert not (r2.data / key).exists()


def test_tagging_sub_resource_is_not_implemented(r2: R2) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/acl/"]))
    s3.put_object(Bucket=BUCKET, Key="jobs/acl/t.bin", Body=b"x")
    assert refused(s3.get_object_tagging, Bucket=BUCKET, Key="jobs/acl/t.bin") == (
        501,
        "NotImplemented",
    )
    assert refused(
        s3.put_object_tagging,
        Bucket=BUCKET,
        Key="jobs/acl/t.bin",
        Tagging={"TagSet": [{"Key": "team", "Value": "ml"}]},
    ) == (501, "NotImplemented")
    assert refused(s3.get_object_acl, Bucket=BUCKET, Key="jobs/acl/t.bin") == (
        501,
        "NotImplemented",
    )


def test_scope_is_judged_before_features(r2: R2) -> None:
    """An out-of-scope write from a default boto3 client is AccessDenied, not a checksum error."""
    s3 = r2.client(r2.mint(prefixes=["jobs/crc/"]), checksums="when_supported")
    assert refused(s3.put_object, Bucket=BUCKET, Key="jobs/other/a.bin", Body=b"x") == (
        403,
        "AccessDenied",
    )
