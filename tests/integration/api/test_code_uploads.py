"""Code archives on the jobs API under moto: POST /code/uploads hands out a presigned PUT (or
says the archive is there), and POST /jobs with `code.archive` is refused, storing nothing,
unless the archive is in storage with that size and sha256. The bucket is an in-memory twin of
`CodeBucket` (the real one runs against the R2 front in tests/integration/r2/)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from functions.adapters.code_bucket import CodeBucket
from functions.api import jobs
from functions.domain.storage_layout import code_upload_key
from tests.integration.api.helpers import spec
from tests.xray_traces import recorded_traces

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")

CONTENT = b"\x1f\x8b pretend this is a tar.gz"
SHA = hashlib.sha256(CONTENT).hexdigest()


class MemoryBucket:
    """The methods of `CodeBucket` the API calls, over a dict of keys."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.presigned: list[tuple[str, int]] = []

    def presign_put(self, sha256: str, expires_s: int) -> tuple[str, str, float]:
        key = code_upload_key(sha256)
        self.presigned.append((key, expires_s))
        return key, f"https://r2.example/{key}?X-Amz-Signature=s", 1_800_000_000.0 + expires_s

    def size_of(self, sha256: str) -> int | None:
        data = self.objects.get(code_upload_key(sha256))
        return None if data is None else len(data)

    def sha256_of(self, sha256: str, max_bytes: int) -> tuple[int, str] | None:
        data = self.objects.get(code_upload_key(sha256))
        if data is None:
            return None
        data = data[: max_bytes + 1]
        return len(data), hashlib.sha256(data).hexdigest()


@pytest.fixture
def bucket(api: Any, monkeypatch: pytest.MonkeyPatch) -> MemoryBucket:
    memory = MemoryBucket()
    monkeypatch.setattr(jobs, "_code_bucket", lambda settings: memory)
    return memory


def archive(sha256: str = SHA, size_bytes: int = len(CONTENT)) -> dict[str, Any]:
    return {"dir": ".", "archive": {"sha256": sha256, "size_bytes": size_bytes}}


def test_an_upload_is_presigned_for_the_content_addressed_key(api, bucket):
    reply = api.jobs("POST", "/code/uploads", body={"sha256": SHA, "size_bytes": len(CONTENT)})
    assert reply.status == 200, reply.body
    assert reply.body["exists"] is False and reply.body["method"] == "PUT"
    assert reply.body["key"] == f"code/{SHA}.tar.gz"
    assert reply.body["url"].startswith(f"https://r2.example/code/{SHA}.tar.gz")
    assert bucket.presigned == [(f"code/{SHA}.tar.gz", 600)]


def test_the_presigned_url_is_not_kept_in_the_trace(api, bucket, monkeypatch):
    # The handler runs with the X-Ray SDK recording in memory: no document it would send to
    # X-Ray (kept 30 days, readable with X-Ray read rights) holds the URL.
    with recorded_traces(monkeypatch) as emitter:
        reply = api.jobs("POST", "/code/uploads", body={"sha256": SHA, "size_bytes": len(CONTENT)})
    assert reply.status == 200, reply.body
    assert "X-Amz-Signature" in reply.body["url"]
    assert emitter.documents, "nothing was traced: the recorder is not on"
    assert reply.body["url"] not in emitter.text()
    assert "X-Amz-Signature" not in emitter.text()


def test_an_archive_already_there_is_not_uploaded_again(api, bucket):
    bucket.objects[f"code/{SHA}.tar.gz"] = CONTENT
    reply = api.jobs("POST", "/code/uploads", body={"sha256": SHA, "size_bytes": len(CONTENT)})
    assert reply.status == 200
    assert reply.body["exists"] is True and reply.body["url"] is None
    assert bucket.presigned == []


def test_an_object_with_other_content_under_the_key_is_uploaded_again(api, bucket):
    bucket.objects[f"code/{SHA}.tar.gz"] = b"x" * len(CONTENT)  # same size, other bytes
    reply = api.jobs("POST", "/code/uploads", body={"sha256": SHA, "size_bytes": len(CONTENT)})
    assert reply.status == 200 and reply.body["exists"] is False


@pytest.mark.parametrize("size_bytes", [len(CONTENT) - 1, len(CONTENT) + 1, 1024])
def test_no_put_is_handed_out_over_an_uploaded_archive_whatever_size_is_named(
    api, bucket, size_bytes
):
    bucket.objects[f"code/{SHA}.tar.gz"] = CONTENT
    reply = api.jobs("POST", "/code/uploads", body={"sha256": SHA, "size_bytes": size_bytes})
    assert reply.status == 409, reply.body
    assert reply.body["error"] == "conflict"
    (detail,) = reply.body["details"]
    assert detail["path"] == "size_bytes"
    assert f"has {len(CONTENT)} bytes, not {size_bytes}" in detail["reason"]
    assert bucket.presigned == []


def test_an_object_that_does_not_hash_to_its_name_may_be_replaced_at_any_size(api, bucket):
    bucket.objects[f"code/{SHA}.tar.gz"] = b"broken"
    reply = api.jobs("POST", "/code/uploads", body={"sha256": SHA, "size_bytes": len(CONTENT)})
    assert reply.status == 200 and reply.body["exists"] is False
    assert bucket.presigned == [(f"code/{SHA}.tar.gz", 600)]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"sha256": "abc", "size_bytes": 10}, "sha256"),
        ({"sha256": SHA.upper(), "size_bytes": 10}, "sha256"),
        ({"sha256": SHA, "size_bytes": 0}, "size_bytes"),
        ({"sha256": SHA, "size_bytes": 100 * 1024 * 1024 + 1}, "size_bytes"),
        ({"sha256": SHA, "size_bytes": "10"}, "size_bytes"),
        ({"sha256": SHA}, "size_bytes"),
        ({"size_bytes": 10}, "sha256"),
        ({"sha256": SHA, "size_bytes": 10, "key": "jobs/x"}, "key"),
    ],
)
def test_a_bad_upload_request_is_a_400_naming_the_field(api, bucket, body, path):
    reply = api.jobs("POST", "/code/uploads", body=body)
    assert reply.status == 400, reply.body
    assert [d["path"] for d in reply.body["details"]] == [path]
    assert bucket.presigned == []


def test_the_upload_route_needs_an_iam_identity(api, bucket):
    reply = api.jobs("POST", "/code/uploads", body={"sha256": SHA, "size_bytes": 1}, iam_arn=None)
    assert reply.status == 401


def test_a_job_with_its_archive_in_storage_is_stored_with_it(api, bucket):
    bucket.objects[f"code/{SHA}.tar.gz"] = CONTENT
    reply = api.jobs("POST", "/jobs", body=spec(code=archive()))
    assert reply.status == 201, reply.body
    stored = api.store.get_job(reply.body["job_id"])
    assert stored is not None and stored.spec.code is not None
    assert stored.spec.code.archive is not None
    assert (stored.spec.code.archive.sha256, stored.spec.code.archive.size_bytes) == (
        SHA,
        len(CONTENT),
    )
    assert stored.spec.code.dir == "."


@pytest.mark.parametrize(
    ("stored", "code", "path", "reason"),
    [
        (None, archive(), "code.archive", "no uploaded archive"),
        (CONTENT, archive(size_bytes=28), "code.archive.size_bytes", "has 27 bytes, not 28"),
        (b"y" * len(CONTENT), archive(), "code.archive.sha256", "hashes to"),
        (CONTENT, {"dir": "."}, "code.dir", "send code.archive"),
        (CONTENT, {"dir": ".", "git": "https://h/r", "commit": "a" * 40}, "code", "exclusive"),
    ],
)
def test_a_job_whose_archive_is_not_there_as_described_is_refused_and_nothing_stored(
    api, bucket, stored, code, path, reason
):
    if stored is not None:
        bucket.objects[f"code/{SHA}.tar.gz"] = stored
    before = api.items()
    reply = api.jobs("POST", "/jobs", body=spec(code=code))
    assert reply.status == 400, reply.body
    (detail,) = reply.body["details"]
    assert detail["path"] == path and reason in detail["reason"], detail
    assert api.items() == before
    assert api.executions() == []


def test_without_storage_configured_an_archive_job_is_a_503_not_a_500(api, monkeypatch):
    monkeypatch.setattr(jobs, "_code_bucket", lambda settings: None)
    reply = api.jobs("POST", "/jobs", body=spec(code=archive()))
    assert reply.status == 503
    assert "TETHER_CLOUDFLARE_SECRET_ARN" in reply.body["message"]


def test_the_real_bucket_type_offers_what_the_twin_does():
    for name in ("presign_put", "size_of", "sha256_of", "copy_to_job"):
        assert callable(getattr(CodeBucket, name))
