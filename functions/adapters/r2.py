"""Read access to the R2 bucket for the API: list a job's keys and presign GETs.

The control plane holds no R2 secret key of its own (the `tether/cloudflare` secret has the API
token and the parent key's id), so it reads the bucket the way the agents write it: with
Cloudflare temporary credentials, here `object-read-only` and scoped to one prefix. Minted
credentials are cached per prefix until shortly before they expire, so `tether logs --follow`
polling every few seconds costs one Cloudflare call per prefix and TTL, not one per poll
(Cloudflare allows 1200 calls per 5 minutes and then blocks every call for 5 minutes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

from functions.adapters.cloudflare import TempCredentials

READ_TTL_S = 900  # Cloudflare's default and our minimum TTL
RENEW_BEFORE_S = 120  # never hand out a URL signed with credentials about to lapse


def r2_client(endpoint: str, creds: TempCredentials, *, read_timeout: float = 10) -> Any:
    """An S3 client on R2 signed with Cloudflare temporary credentials (path-style, SigV4)."""
    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=5,
        read_timeout=read_timeout,
    )
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=creds.access_key_id,
        aws_secret_access_key=creds.secret_access_key,
        aws_session_token=creds.session_token,
        region_name="auto",
        config=config,
    )


Mint = Callable[[str, int], TempCredentials]  # (prefix, ttl_s) → read-only credentials


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


class ReadOnlyBucket:
    """One R2 bucket, read with prefix-scoped temporary credentials from `mint`."""

    def __init__(
        self,
        *,
        endpoint: str,
        bucket: str,
        mint: Mint,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.endpoint = endpoint
        self.bucket = bucket
        self._mint = mint
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: dict[str, tuple[Any, float]] = {}  # prefix → (s3 client, expires_at)

    def _client(self, prefix: str) -> tuple[Any, float]:
        with self._lock:
            cached = self._clients.get(prefix)
            if cached and cached[1] - RENEW_BEFORE_S > self._clock():
                return cached
        creds = self._mint(prefix, READ_TTL_S)
        client = r2_client(self.endpoint, creds)
        with self._lock:
            self._clients[prefix] = (client, creds.expires_at)
        return client, creds.expires_at

    def list_after(self, prefix: str, start_after: str | None, limit: int) -> list[ObjectInfo]:
        """Up to `limit` objects under `prefix`, in key order, after `start_after`."""
        client, _ = self._client(prefix)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": limit}
        if start_after:
            kwargs["StartAfter"] = start_after
        reply = client.list_objects_v2(**kwargs)
        return [ObjectInfo(o["Key"], int(o.get("Size", 0))) for o in reply.get("Contents", [])]

    def get_bytes(self, prefix: str, key: str, max_bytes: int) -> bytes | None:
        """The object `key` (under `prefix`), None when it does not exist; at most `max_bytes`
        are read (a larger object raises ValueError)."""
        client, _ = self._client(prefix)
        try:
            reply = client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=0-{max_bytes}")
        except client.exceptions.NoSuchKey:
            return None
        data = bytes(reply["Body"].read())
        if len(data) > max_bytes:
            raise ValueError(f"{key} is larger than {max_bytes} bytes")
        return data

    def presign_get(self, prefix: str, key: str, expires_s: int) -> tuple[str, float]:
        """A GET URL for `key` (under `prefix`) and when it stops working: no later than the
        credentials that signed it."""
        client, creds_expire_at = self._client(prefix)
        expires_s = max(1, min(expires_s, int(creds_expire_at - self._clock())))
        url = client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s
        )
        return str(url), self._clock() + expires_s
