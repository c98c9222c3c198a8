"""The features the R2 front refuses as R2 does, case by case (`tether_local.r2.features`)."""

from __future__ import annotations

import pytest

from tether_local.r2.features import unsupported_feature

CASES = [
    # (operation, headers, query, expected (status, code) or None)
    ("PutObject", [("x-amz-checksum-crc32", "AAAAAA==")], {}, (400, "InvalidRequest")),
    ("UploadPart", [("X-Amz-Checksum-CRC32C", "AAAAAA==")], {}, (400, "InvalidRequest")),
    ("PutObject", [("x-amz-sdk-checksum-algorithm", "CRC32")], {}, (400, "InvalidRequest")),
    ("UploadPart", [("x-amz-trailer", "x-amz-checksum-crc32")], {}, (400, "InvalidRequest")),
    ("PutObject", [("Content-Encoding", "aws-chunked")], {}, (400, "InvalidRequest")),
    ("PutObject", [("Content-Encoding", "gzip,aws-chunked")], {}, (400, "InvalidRequest")),
    (
        "PutObject",
        [("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")],
        {},
        (400, "InvalidRequest"),
    ),
    (
        "UploadPart",
        [("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER")],
        {},
        (400, "InvalidRequest"),
    ),
    ("PutObject", [("x-amz-acl", "private")], {}, (501, "NotImplemented")),
    ("CopyObject", [("x-amz-grant-read", 'id="x"')], {}, (501, "NotImplemented")),
    ("PutObject", [("x-amz-tagging", "a=b")], {}, (501, "NotImplemented")),
    ("CopyObject", [("x-amz-tagging-directive", "REPLACE")], {}, (501, "NotImplemented")),
    ("PutObject", [("x-amz-object-lock-mode", "GOVERNANCE")], {}, (501, "NotImplemented")),
    ("PutObject", [("x-amz-object-lock-legal-hold", "ON")], {}, (501, "NotImplemented")),
    ("DeleteObject", [("x-amz-bypass-governance-retention", "true")], {}, (501, "NotImplemented")),
    ("GetObject", [], {"tagging": ""}, (501, "NotImplemented")),
    ("PutObject", [("x-amz-checksum-crc32", "AAAAAA==")], {"tagging": ""}, (501, "NotImplemented")),
    ("GetObject", [], {"acl": ""}, (501, "NotImplemented")),
    ("PutObject", [], {"retention": ""}, (501, "NotImplemented")),
    ("PutObject", [], {"legal-hold": ""}, (501, "NotImplemented")),
    ("GetBucket:object-lock", [], {"object-lock": ""}, (501, "NotImplemented")),
    # What R2 takes.
    ("PutObject", [("x-amz-content-sha256", "UNSIGNED-PAYLOAD")], {}, None),
    (
        "PutObject",
        [("Content-Encoding", "gzip"), ("Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg==")],
        {},
        None,
    ),
    ("UploadPart", [], {"partNumber": "1", "uploadId": "u"}, None),
    ("DeleteObjects", [("x-amz-checksum-crc32", "AAAAAA==")], {"delete": ""}, None),
    ("CreateMultipartUpload", [("x-amz-checksum-algorithm", "CRC32")], {"uploads": ""}, None),
    ("GetObject", [("x-amz-checksum-mode", "ENABLED")], {}, None),
    ("ListObjects", [], {"prefix": "jobs/", "list-type": "2"}, None),
]


@pytest.mark.parametrize(("operation", "headers", "query", "expected"), CASES)
def test_unsupported_feature(
    operation: str,
    headers: list[tuple[str, str]],
    query: dict[str, str],
    expected: tuple[int, str] | None,
) -> None:
    refusal = unsupported_feature(operation, headers, query)
    answer = (refusal.status, refusal.code) if refusal is not None else None
    assert answer == expected


def test_the_refusal_names_what_was_refused() -> None:
    refusal = unsupported_feature("UploadPart", [("X-Amz-Trailer", "x-amz-checksum-crc32")], {})
    assert refusal is not None and refusal.message == (
        "R2 does not take header x-amz-trailer on UploadPart."
    )
