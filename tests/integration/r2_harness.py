"""The R2 front (`tether_local.r2.front`) as the local stack runs it, for the tests of the front
and of the agent against it: `rclone serve s3` behind it, keys minted by the Cloudflare
simulator, whose clock the tests move (no waiting for expiry).

`R2` bundles the three; `r2.mint(...)` mints through the simulator's real HTTP API and
`r2.client(creds)` is a boto3 S3 client configured like the agent's (path style, region `auto`,
unsigned payloads, no retries: a refusal must show on the first answer).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tether_local.r2.cloudflare_sim import CloudflareSim
from tether_local.r2.front import R2Front
from tether_local.r2.s3server import S3Server

BUCKET = "tether"
OTHER_BUCKET = "other"
PARENT = "r2-test-parent"
SECOND_PARENT = "r2-test-parent-2"
API_TOKEN = "r2-test-api-token"
MINTED = "<the minted session token>"


class MovableClock:
    """Real time plus an offset the test moves (the simulator's and the front's clock)."""

    def __init__(self) -> None:
        self.offset = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.offset += seconds


@dataclass(frozen=True)
class Minted:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str = field(repr=False)


@dataclass
class R2:
    sim: CloudflareSim
    front: R2Front
    s3: S3Server
    clock: MovableClock

    @property
    def url(self) -> str:
        return self.front.url

    @property
    def data(self) -> Path:
        """The bucket's directory on disk (what rclone really stored)."""
        return self.s3.root / BUCKET

    def on_disk(self, bucket: str = BUCKET) -> list[str]:
        base = self.s3.root / bucket
        return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())

    def mint(
        self,
        *,
        prefixes: list[str] | None = None,
        objects: list[str] | None = None,
        permission: str = "object-read-write",
        ttl_s: int = 900,
        bucket: str = BUCKET,
        parent: str = PARENT,
    ) -> Minted:
        body: dict[str, Any] = {
            "bucket": bucket,
            "parentAccessKeyId": parent,
            "permission": permission,
            "ttlSeconds": ttl_s,
        }
        if prefixes is not None:
            body["prefixes"] = prefixes
        if objects is not None:
            body["objects"] = objects
        url = f"https://api.invalid/client/v4/accounts/{self.sim.account_id}/r2/temp-access-credentials"
        reply = self.sim.handle(
            httpx.Request("POST", url, headers={"Authorization": f"Bearer {API_TOKEN}"}, json=body)
        )
        assert reply.status_code == 200, reply.text
        result = reply.json()["result"]
        return Minted(result["accessKeyId"], result["secretAccessKey"], result["sessionToken"])

    def client(
        self,
        creds: Minted,
        *,
        session_token: str | None = MINTED,
        secret: str | None = None,
        checksums: str = "when_required",
    ) -> Any:
        """An S3 client for `creds`; `session_token=None` leaves it out, another string
        replaces it, `secret` replaces the secret; `checksums="when_supported"` is boto3's
        default (request checksums R2 refuses)."""
        token = creds.session_token if session_token == MINTED else session_token
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=creds.access_key_id,
            aws_secret_access_key=secret or creds.secret_access_key,
            aws_session_token=token,
            region_name="auto",
            config=Config(
                signature_version="s3v4",
                s3={"addressing_style": "path", "payload_signing_enabled": False},
                retries={"max_attempts": 1, "mode": "standard"},
                request_checksum_calculation=checksums,
                response_checksum_validation="when_required",
            ),
        )


def error_of(exc: ClientError) -> tuple[int, str]:
    """(HTTP status, S3 error code) of a refused call."""
    status = int(exc.response["ResponseMetadata"]["HTTPStatusCode"])
    return status, str(exc.response.get("Error", {}).get("Code", ""))


def refused(call: Any, *args: Any, **kwargs: Any) -> tuple[int, str]:
    """Call and expect a refusal; returns its (status, code)."""
    with pytest.raises(ClientError) as caught:
        call(*args, **kwargs)
    return error_of(caught.value)


@contextlib.contextmanager
def running_r2(root: Path) -> Iterator[R2]:
    """rclone over `root` (buckets `tether` and `other`) behind a front asking a fresh simulator."""
    for name in (BUCKET, OTHER_BUCKET):
        (root / name).mkdir(parents=True, exist_ok=True)
    clock = MovableClock()
    sim = CloudflareSim(
        api_tokens=[API_TOKEN],
        parents={PARENT: "admin-read-write", SECOND_PARENT: "admin-read-write"},
        buckets=(BUCKET, OTHER_BUCKET),
        clock=clock,
    )
    with S3Server(root) as s3, R2Front(s3.endpoint_url, sim.live_key, clock=clock) as front:
        yield R2(sim, front, s3, clock)
