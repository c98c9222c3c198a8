"""The agent's two keys on the job's storage and the two clients they back.

A read-only key on the job's whole prefix restores (`reader`); a read-write key on this
generation's own prefix uploads checkpoints, outputs and logs (`writer`). Both clients share the
bandwidth cap, the transfer counts and the cancel event, so a `superseded` or a signal stops
every transfer at once. Heartbeat replies may bring newer keys for the same two prefixes
(`offer`); keys for any other prefix are ignored.
"""

from __future__ import annotations

import logging
import threading

from tether_agent.checkpoints import MIB, generation_prefix
from tether_agent.protocol import StorageCredentials, StorageKey
from tether_agent.settings import AgentSettings, Tuning
from tether_agent.storage import RateLimiter, Storage, TransferStats
from tether_agent.storage_credentials import Credentials, CredentialStore

log = logging.getLogger(__name__)


class JobStorage:
    def __init__(self, settings: AgentSettings, tuning: Tuning) -> None:
        self.settings = settings
        self.tuning = tuning
        s = settings
        self.write_credentials = CredentialStore(
            Credentials(
                access_key_id=s.s3_write_access_key_id,
                secret_access_key=s.s3_write_secret_access_key,
                session_token=s.s3_write_session_token,
                expires_at=s.s3_write_credentials_expire_at,
                endpoint=s.s3_endpoint,
                bucket=s.s3_bucket,
            )
        )
        self.read_credentials = CredentialStore(
            Credentials(
                access_key_id=s.s3_access_key_id,
                secret_access_key=s.s3_secret_access_key,
                session_token=s.s3_session_token,
                expires_at=s.s3_credentials_expire_at,
                endpoint=s.s3_endpoint,
                bucket=s.s3_bucket,
            )
        )
        limit = tuning.bandwidth_limit_mb_s
        limiter = RateLimiter(limit * 1e6 if limit else None)
        self.writer = self._storage(self.write_credentials, limiter, TransferStats(), None)
        self.reader = self._storage(
            self.read_credentials, limiter, self.writer.stats, self.writer.cancel
        )
        # Both clients are built while the agent starts (heartbeat, code), not by the restore.
        threading.Thread(target=self._warm, name="s3-warm", daemon=True).start()

    def _warm(self) -> None:
        for storage in (self.reader, self.writer):
            try:
                storage.warm()
            except Exception as exc:  # a bad endpoint fails the first transfer, as before
                log.warning("storage client not built ahead: %s", exc)

    def _storage(
        self,
        store: CredentialStore,
        limiter: RateLimiter,
        stats: TransferStats,
        cancel: threading.Event | None,
    ) -> Storage:
        s, tuning = self.settings, self.tuning
        return Storage(
            store,
            s.s3_prefix,
            concurrency=tuning.upload_concurrency,
            part_size=tuning.part_size_mb * MIB,
            limiter=limiter,
            nice=tuning.upload_nice,
            backoff_s=min(1.0, s.heartbeat_interval_s),
            credential_wait_s=max(4 * s.heartbeat_interval_s, 1.0),
            stale_wait_s=max(s.heartbeat_interval_s, 1.0),
            cancel=cancel,
            stats=stats,
        )

    def offer(self, new: StorageCredentials) -> None:
        """Newer keys from a heartbeat reply, installed only for the two expected prefixes."""
        s = self.settings
        expected = (s.s3_prefix, generation_prefix(s.s3_prefix, s.generation))
        if (new.read.prefix, new.write.prefix) != expected:
            log.warning(
                "credentials for prefixes %s, %s ignored (expected %s, %s)",
                new.read.prefix, new.write.prefix, *expected,
            )  # fmt: skip
            return
        for store, key in ((self.read_credentials, new.read), (self.write_credentials, new.write)):
            store.offer(_credentials(key, new))

    def expire_at(self) -> float | None:
        """When the first of the two keys expires (None: neither says)."""
        held = (self.write_credentials.current(), self.read_credentials.current())
        found = [c.expires_at for c in held if c.expires_at is not None]
        return min(found) if found else None

    def secrets(self) -> list[str]:
        """The secret parts of every key this agent was given or holds (scrubbed from logs)."""
        s = self.settings
        held = (self.write_credentials.current(), self.read_credentials.current())
        return [
            s.s3_secret_access_key,
            s.s3_session_token,
            s.s3_write_secret_access_key,
            s.s3_write_session_token,
            *(c.secret_access_key for c in held),
            *(c.session_token for c in held),
        ]

    def close(self) -> None:
        self.writer.close()
        self.reader.close()


def _credentials(key: StorageKey, new: StorageCredentials) -> Credentials:
    return Credentials(
        access_key_id=key.access_key_id,
        secret_access_key=key.secret_access_key,
        session_token=key.session_token,
        expires_at=key.expires_at,
        endpoint=new.endpoint,
        bucket=new.bucket,
    )
