"""The storage credentials in use, swapped while transfers run, and the S3 clients built from
them (one per credentials version, configured for R2).

A heartbeat reply may carry newer credentials at any time; `CredentialStore.offer` installs them
atomically, and a transfer that hit an authentication error waits in `wait_newer` for them.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import boto3
from botocore.config import Config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str = field(repr=False)
    expires_at: float | None
    endpoint: str
    bucket: str
    version: int = 0


class CredentialStore:
    """The storage credentials in use. Heartbeat replies swap in newer ones atomically;
    transfers that hit an auth error wait here for the next version."""

    def __init__(self, initial: Credentials) -> None:
        self._cond = threading.Condition()
        self._current = replace(initial, version=0)
        self._clients: dict[int, Any] = {}
        self._session_lock = threading.Lock()

    def current(self) -> Credentials:
        with self._cond:
            return self._current

    def offer(self, new: Credentials) -> bool:
        """Install `new` if it differs from and does not expire before the current ones."""
        with self._cond:
            cur = self._current
            same = (new.access_key_id, new.secret_access_key, new.session_token) == (
                cur.access_key_id,
                cur.secret_access_key,
                cur.session_token,
            )
            older = (
                new.expires_at is not None
                and cur.expires_at is not None
                and new.expires_at < cur.expires_at
            )
            if same or older:
                return False
            self._current = replace(new, version=cur.version + 1)
            self._clients.pop(cur.version - 1, None)  # keep the previous one for in-flight calls
            self._cond.notify_all()
            log.info("storage credentials rotated (key %s…)", new.access_key_id[:4])
            return True

    def wait_newer(self, version: int, timeout: float) -> Credentials | None:
        with self._cond:
            self._cond.wait_for(lambda: self._current.version > version, timeout=timeout)
            return self._current if self._current.version > version else None

    def client(self, creds: Credentials) -> Any:
        with self._session_lock:  # boto3 client creation is not thread safe
            client = self._clients.get(creds.version)
            if client is None:
                client = boto3.session.Session().client(
                    "s3",
                    endpoint_url=creds.endpoint,
                    aws_access_key_id=creds.access_key_id,
                    aws_secret_access_key=creds.secret_access_key,
                    aws_session_token=creds.session_token or None,
                    region_name="auto",
                    config=_BOTO_CONFIG,
                )
                self._clients[creds.version] = client
            return client


_BOTO_CONFIG = Config(
    signature_version="s3v4",
    # Unsigned payloads: no extra sha256 pass per part; the manifest's sha256 is what counts.
    s3={"addressing_style": "path", "payload_signing_enabled": False},
    retries={"max_attempts": 1, "mode": "standard"},  # we retry ourselves, credential-aware
    max_pool_connections=64,
    connect_timeout=10,
    read_timeout=120,
    # R2 rejects some of the newer default checksums; sha256 is ours anyway.
    request_checksum_calculation="when_required",
    response_checksum_validation="when_required",
)


__all__ = ["CredentialStore", "Credentials"]
