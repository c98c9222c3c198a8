"""Stale multipart uploads of the generation's own prefix are aborted at start
(tether_agent/stale_uploads.py), through the R2 front with the generation's scoped key: its own
leftovers go, an older generation's (out of its key's reach) stay; a store that cannot list them
is passed over quietly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from tether_agent.stale_uploads import abort_stale_uploads
from tether_agent.storage import Storage
from tether_agent.storage_credentials import Credentials, CredentialStore

from tests.integration.agent.conftest import (
    ControlPlane,
    agent_env,
    fake_train,
    finish,
    make_storage,
    start_agent,
)
from tests.integration.r2_harness import BUCKET, R2, running_r2
from tether_local.r2.s3server import S3Server

OWN = "jobs/j1/g2/"
OLDER = "jobs/j1/g1/"


@pytest.fixture(scope="module")
def r2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[R2]:
    with running_r2(tmp_path_factory.mktemp("r2")) as running:
        yield running


def _open_upload(client: Any, key: str) -> str:
    upload_id = str(client.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"])
    client.upload_part(Bucket=BUCKET, Key=key, UploadId=upload_id, PartNumber=1, Body=b"p" * 64)
    return upload_id


def _open_keys(client: Any, prefix: str) -> list[str]:
    reply = client.list_multipart_uploads(Bucket=BUCKET, Prefix=prefix)
    return sorted(u["Key"] for u in reply.get("Uploads", []))


def test_own_generations_stale_uploads_are_aborted_through_the_front(r2: R2) -> None:
    older_key, own_key = r2.mint(prefixes=[OLDER]), r2.mint(prefixes=[OWN])
    _open_upload(r2.client(older_key), f"{OLDER}checkpoints/000000000010/model.bin")
    mine = r2.client(own_key)
    for step in (20, 30):
        _open_upload(mine, f"{OWN}checkpoints/{step:012d}/model.bin")
    storage = Storage(
        CredentialStore(Credentials(own_key.access_key_id, own_key.secret_access_key,
                                    own_key.session_token, None, r2.url, BUCKET)),
        "jobs/j1/", backoff_s=0.05,
    )  # fmt: skip
    try:
        assert abort_stale_uploads(storage, OWN) == 2
        assert abort_stale_uploads(storage, OWN) == 0
        # the older generation's is out of this key's reach, and stays for the store's expiry
        assert abort_stale_uploads(storage, OLDER) is None
    finally:
        storage.close()
    assert _open_keys(mine, OWN) == []
    assert _open_keys(r2.client(older_key), OLDER) == [f"{OLDER}checkpoints/000000000010/model.bin"]


def test_rclone_serve_s3_lists_them_too(s3_server: S3Server, bucket: str, tmp_path: Path) -> None:
    storage = make_storage(s3_server.endpoint_url, bucket)
    try:
        # a bucket that never had an open upload: rclone answers NoSuchUpload, meaning none
        assert abort_stale_uploads(storage, OWN) == 0
        creds = storage.store.current()
        client = storage.store.client(creds)
        upload_id = client.create_multipart_upload(Bucket=bucket, Key=f"{OWN}x.bin")["UploadId"]
        client.create_multipart_upload(Bucket=bucket, Key="jobs/j1/g3/y.bin")
        assert abort_stale_uploads(storage, OWN) == 1
        left = client.list_multipart_uploads(Bucket=bucket, Prefix="jobs/j1/")["Uploads"]
        assert [u["Key"] for u in left] == ["jobs/j1/g3/y.bin"]
        assert upload_id not in {u["UploadId"] for u in left}
    finally:
        storage.close()


class _Unsupported:
    """A store without ListMultipartUploads (answers 501 NotImplemented)."""

    def __init__(self, code: str, status: int) -> None:
        self.code, self.status, self.calls = code, status, 0

    def list_multipart_uploads(self, **kwargs: Any) -> Any:
        self.calls += 1
        raise ClientError(
            {"Error": {"Code": self.code, "Message": "no"},
             "ResponseMetadata": {"HTTPStatusCode": self.status}},
            "ListMultipartUploads",
        )  # fmt: skip


class _StubStore(CredentialStore):
    def __init__(self, client: Any) -> None:
        super().__init__(Credentials("K", "S", "", None, "http://127.0.0.1:9", "b"))
        self.stub = client

    def client(self, creds: Credentials) -> Any:
        return self.stub


@pytest.mark.parametrize(("code", "status"), [("NotImplemented", 501), ("MethodNotAllowed", 405)])
def test_a_store_that_cannot_list_them_is_passed_over_quietly(code: str, status: int) -> None:
    stub = _Unsupported(code, status)
    storage = Storage(_StubStore(stub), "jobs/j1/", backoff_s=0.01)
    try:
        assert abort_stale_uploads(storage, OWN) is None
    finally:
        storage.close()
    assert stub.calls == 1  # not retried: it will not start working


def test_a_failing_store_is_passed_over_after_its_retries() -> None:
    stub = _Unsupported("InternalError", 500)
    storage = Storage(_StubStore(stub), "jobs/j1/", backoff_s=0.001, max_attempts=3)
    try:
        assert abort_stale_uploads(storage, OWN) is None
    finally:
        storage.close()
    assert stub.calls == 3


def test_the_agent_aborts_its_generations_stale_uploads_at_start(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    """Killed mid-upload, the generation's agent starts again (outbid, same disk): the upload it
    left open is aborted before it uploads anything; another generation's is not its to touch."""
    storage = make_storage(s3_server.endpoint_url, bucket)
    client = storage.store.client(storage.store.current())
    client.create_multipart_upload(Bucket=bucket, Key="jobs/j1/g1/checkpoints/000000000001/m")
    client.create_multipart_upload(Bucket=bucket, Key="jobs/j1/g9/checkpoints/000000000001/m")
    env = agent_env(tmp_path, s3_server, bucket, control_plane)
    code, out = finish(start_agent(env, fake_train("--steps", "1", "--exit-code", "0")))
    assert code == 0, out
    left = client.list_multipart_uploads(Bucket=bucket, Prefix="jobs/j1/").get("Uploads", [])
    storage.close()
    assert [u["Key"] for u in left] == ["jobs/j1/g9/checkpoints/000000000001/m"]
