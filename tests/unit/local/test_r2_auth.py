"""The R2 front's decisions without a server (`tether_local.r2.auth`): which operation a request
is, what a scope allows, R2's part rules, and SigV4 checked against botocore's own signer."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tether_local.r2.auth import (
    Refusal,
    Request,
    authenticate,
    authorize,
    check_part_sizes,
    classify,
)

MIB = 1024 * 1024
NOW = 1_800_000_000.0


@dataclass(frozen=True)
class Scope:
    bucket: str = "tether"
    prefixes: tuple[str, ...] = ("jobs/a/",)
    objects: tuple[str, ...] = ()
    permission: str = "object-read-write"


@dataclass(frozen=True)
class Key:
    secret_access_key: str = "s3cr3t"
    session_token: str = "tok"
    scope: Scope = Scope()


# --- operations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "target", "copy_source", "name", "level", "access"),
    [
        ("GET", "/", None, "ListBuckets", "service", "read"),
        ("GET", "/tether?list-type=2&prefix=jobs%2Fa%2F", None, "ListObjects", "listing", "read"),
        ("GET", "/tether?uploads&prefix=jobs/a/", None, "ListMultipartUploads", "listing", "read"),
        ("HEAD", "/tether", None, "HeadBucket", "listing", "read"),
        ("GET", "/tether?versioning", None, "GetBucket:versioning", "bucket", "read"),
        ("PUT", "/newbucket", None, "CreateBucket", "bucket", "write"),
        ("DELETE", "/tether", None, "DeleteBucket", "bucket", "write"),
        ("PUT", "/tether?cors", None, "PutBucket:cors", "bucket", "write"),
        ("POST", "/tether?delete", None, "DeleteObjects", "object", "write"),
        ("GET", "/tether/jobs/a/x", None, "GetObject", "object", "read"),
        ("HEAD", "/tether/jobs/a/x", None, "HeadObject", "object", "read"),
        ("GET", "/tether/jobs/a/x?uploadId=u1", None, "ListParts", "object", "read"),
        ("PUT", "/tether/jobs/a/x", None, "PutObject", "object", "write"),
        ("PUT", "/tether/jobs/a/x", "/tether/jobs/b/y", "CopyObject", "object", "write"),
        ("PUT", "/tether/jobs/a/x?partNumber=2&uploadId=u1", None, "UploadPart", "object", "write"),
        ("POST", "/tether/jobs/a/x?uploads", None, "CreateMultipartUpload", "object", "write"),
        (
            "POST",
            "/tether/jobs/a/x?uploadId=u1",
            None,
            "CompleteMultipartUpload",
            "object",
            "write",
        ),
        ("DELETE", "/tether/jobs/a/x?uploadId=u1", None, "AbortMultipartUpload", "object", "write"),
        ("DELETE", "/tether/jobs/a/x", None, "DeleteObject", "object", "write"),
    ],
)
def test_operations(
    method: str, target: str, copy_source: str | None, name: str, level: str, access: str
) -> None:
    path, _, query = target.partition("?")
    op = classify(method, path, dict(Request(method, path, query, []).query()), copy_source)
    assert (op.name, op.level, op.access) == (name, level, access)


def test_operation_details() -> None:
    op = classify("PUT", "/tether/jobs/a/x%20y", {"partNumber": "3", "uploadId": "u"}, None)
    assert (op.bucket, op.key, op.part_number, op.upload_id) == ("tether", "jobs/a/x y", 3, "u")
    copy = classify("PUT", "/tether/jobs/a/x", {}, "tether/jobs/b/y%2Bz?versionId=1")
    assert copy.copy_source == ("tether", "jobs/b/y+z")
    listing = classify("GET", "/tether", {"list-type": "2", "prefix": "jobs/a/"}, None)
    assert listing.list_prefix == "jobs/a/"


# --- scope and permission ------------------------------------------------------------------------

DENIED = "AccessDenied"


def decide(scope: Scope, method: str, target: str, body_keys: tuple[str, ...] = ()) -> str:
    path, _, query = target.partition("?")
    op = classify(method, path, dict(Request(method, path, query, []).query()), None)
    refusal = authorize(scope, op, body_keys)
    return "ok" if refusal is None else refusal.code


@pytest.mark.parametrize(
    ("scope", "method", "target", "expected"),
    [
        (Scope(), "PUT", "/tether/jobs/a/x", "ok"),
        (Scope(), "PUT", "/tether/jobs/b/x", DENIED),
        (Scope(), "PUT", "/tether/other.txt", DENIED),
        (Scope(), "PUT", "/tether/jobs/ab/x", DENIED),  # a prefix, not a string prefix of a name
        (Scope(), "PUT", "/other/jobs/a/x", DENIED),  # another bucket
        (Scope(), "GET", "/tether?list-type=2&prefix=jobs/a/checkpoints/", "ok"),
        (Scope(), "GET", "/tether?list-type=2&prefix=jobs/a", DENIED),  # would show jobs/ab/
        (Scope(), "GET", "/tether?list-type=2", DENIED),
        (Scope(), "HEAD", "/tether", "ok"),
        (Scope(), "HEAD", "/other", DENIED),
        (Scope(), "GET", "/", DENIED),
        (Scope(), "PUT", "/newbucket", DENIED),
        (Scope(permission="object-read-only"), "GET", "/tether/jobs/a/x", "ok"),
        (Scope(permission="object-read-only"), "PUT", "/tether/jobs/a/x", DENIED),
        (Scope(permission="object-read-only"), "DELETE", "/tether/jobs/a/x", DENIED),
        (Scope(permission="object-read-only"), "POST", "/tether/jobs/a/x?uploads", DENIED),
        (Scope(prefixes=(), objects=("jobs/a/x",)), "GET", "/tether/jobs/a/x", "ok"),
        (Scope(prefixes=(), objects=("jobs/a/x",)), "GET", "/tether/jobs/a/y", DENIED),
        (Scope(prefixes=(), objects=("jobs/a/x",)), "GET", "/tether?prefix=jobs/a/x", DENIED),
        (Scope(prefixes=()), "PUT", "/tether/anything", "ok"),  # neither: the whole bucket
        (Scope(prefixes=()), "GET", "/tether?list-type=2", "ok"),
        (Scope(permission="admin-read-only"), "GET", "/", "ok"),
        (Scope(permission="admin-read-only"), "PUT", "/newbucket", DENIED),
        (Scope(permission="admin-read-only"), "PUT", "/tether/jobs/a/x", DENIED),
        (Scope(permission="admin-read-write"), "PUT", "/tether?cors", "ok"),
        (Scope(permission="admin-read-write"), "PUT", "/other?cors", DENIED),
        (Scope(permission="admin-read-write"), "PUT", "/tether/jobs/b/x", DENIED),
    ],
)
def test_scope_and_permission(scope: Scope, method: str, target: str, expected: str) -> None:
    assert decide(scope, method, target) == expected


def test_delete_objects_is_judged_on_every_key() -> None:
    assert decide(Scope(), "POST", "/tether?delete", ("jobs/a/1", "jobs/a/2")) == "ok"
    assert decide(Scope(), "POST", "/tether?delete", ("jobs/a/1", "jobs/b/2")) == DENIED


def test_copy_source_must_be_readable() -> None:
    inside = classify("PUT", "/tether/jobs/a/x", {}, "/tether/jobs/a/y")
    outside = classify("PUT", "/tether/jobs/a/x", {}, "/tether/jobs/b/y")
    other_bucket = classify("PUT", "/tether/jobs/a/x", {}, "/other/jobs/a/y")
    assert authorize(Scope(), inside) is None
    assert authorize(Scope(), outside) is not None
    assert authorize(Scope(), other_bucket) is not None


# --- R2's part rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        ([1], None),  # a single (last) part may be small
        ([5 * MIB, 5 * MIB, 1], None),
        ([16 * MIB, 16 * MIB, 16 * MIB], None),
        ([5 * MIB - 1, 10], "EntityTooSmall"),
        ([6 * MIB, 5 * MIB, 10], "InvalidPart"),
    ],
)
def test_part_sizes(sizes: list[int], expected: str | None) -> None:
    refusal = check_part_sizes(sizes)
    assert (refusal.code if refusal else None) == expected


# --- SigV4 against botocore's signer -------------------------------------------------------------


def signed_request(
    method: str,
    url: str,
    *,
    secret: str = Key.secret_access_key,
    token: str | None = Key.session_token,
    presign_s: int | None = None,
    headers: dict[str, str] | None = None,
) -> Request:
    aws = AWSRequest(method=method, url=url, headers=headers or {})
    creds = Credentials("AKIDTEST", secret, token)
    if presign_s is None:
        aws.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
        S3SigV4Auth(creds, "s3", "auto").add_auth(aws)
    else:
        S3SigV4QueryAuth(creds, "s3", "auto", expires=presign_s).add_auth(aws)
    aws.prepare()
    parts = urlsplit(aws.url)
    sent = [(k, v) for k, v in aws.headers.items()]
    sent.append(("Host", parts.netloc))
    return Request(method, parts.path, parts.query, sent)


def check(request: Request, key: Key | None = None, now: float | None = None) -> str:
    import time

    result = authenticate(request, lambda _: key or Key(), now or time.time())
    return result.code if isinstance(result, Refusal) else "ok"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9000/tether/jobs/a/x.bin",
        "http://127.0.0.1:9000/tether/jobs/a/with%20space%2Bplus~tilde%281%29.bin",  # boto3's
        "http://127.0.0.1:9000/tether/jobs/a/loosely(encoded)*!.bin",  # a laxer client's
        "http://127.0.0.1:9000/tether?list-type=2&prefix=jobs%2Fa%2F&delimiter=%2F",
        "http://127.0.0.1:9000/tether/jobs/a/x?partNumber=1&uploadId=abc%2Fdef",
        "http://127.0.0.1:9000/tether/jobs/a/x?uploads",
    ],
)
def test_botocore_signatures_verify(url: str) -> None:
    assert check(signed_request("PUT", url)) == "ok"
    assert check(signed_request("GET", url, presign_s=60)) == "ok"


def test_wrong_secret_missing_or_wrong_token_and_tampering() -> None:
    url = "http://127.0.0.1:9000/tether/jobs/a/x.bin"
    assert check(signed_request("PUT", url, secret="other")) == "SignatureDoesNotMatch"
    assert check(signed_request("PUT", url, token=None)) == "Unauthorized"
    assert check(signed_request("PUT", url, token="not-it")) == "Unauthorized"
    tampered = signed_request("PUT", url)
    tampered = Request("PUT", "/tether/jobs/b/x.bin", tampered.raw_query, tampered.headers)
    assert check(tampered) == "SignatureDoesNotMatch"
    signed_meta = signed_request("PUT", url, headers={"x-amz-meta-step": "1"})
    changed = [(k, "2" if k.lower() == "x-amz-meta-step" else v) for k, v in signed_meta.headers]
    assert check(Request("PUT", signed_meta.raw_path, "", changed)) == "SignatureDoesNotMatch"


def test_unknown_key_anonymous_and_sigv2_are_unauthorized() -> None:
    url = "http://127.0.0.1:9000/tether/jobs/a/x.bin"
    unknown = authenticate(signed_request("GET", url), lambda _: None, NOW)
    assert isinstance(unknown, Refusal) and unknown.code == "Unauthorized"
    assert check(Request("GET", "/tether/x", "", [("Host", "h")])) == "Unauthorized"
    v2 = [("Host", "h"), ("Authorization", "AWS AKIDTEST:c2lnbmF0dXJl")]
    assert check(Request("GET", "/tether/x", "", v2)) == "Unauthorized"
    v2_query = "AWSAccessKeyId=AKIDTEST&Expires=1&Signature=x"
    assert check(Request("GET", "/tether/x", v2_query, [("Host", "h")])) == "Unauthorized"


def test_presigned_url_expires() -> None:
    import time

    request = signed_request("GET", "http://127.0.0.1:9000/tether/jobs/a/x", presign_s=60)
    assert check(request, now=time.time() + 30) == "ok"
    assert check(request, now=time.time() + 120) == "ExpiredRequest"
