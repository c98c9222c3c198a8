"""Abort the multipart uploads an earlier agent of this generation left open.

An agent killed mid-upload (an outbid, a crash) leaves its multipart upload open, and its parts
are billed until the store expires them (R2: 7 days). When this generation's agent starts again
on the same disk, it lists the open uploads under its own write prefix `jobs/<id>/g<n>/` (the
only one its key reaches; an older generation's leftovers are out of its scope and are left to
the store's expiry) and aborts them, before it starts any upload of its own there.

Stores that cannot list multipart uploads answer `NotImplemented` (or 405); that is quiet, not
retried: the store's own expiry remains. R2 and `rclone serve s3` both list them.
"""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError

from tether_agent.storage import Storage, StorageError, TransferCancelled, error_code
from tether_agent.storage_credentials import Credentials

log = logging.getLogger(__name__)

UNSUPPORTED = frozenset({"NotImplemented", "501", "MethodNotAllowed", "405"})


def abort_stale_uploads(storage: Storage, prefix: str) -> int | None:
    """How many open uploads under `prefix` were aborted; None when the store could not list
    them (unsupported, refused, or failing after the storage's retries)."""
    aborted = 0
    marker: dict[str, str] = {}
    while True:

        def page(client: Any, creds: Credentials, marker: dict[str, str] = marker) -> Any:
            try:
                return client.list_multipart_uploads(Bucket=creds.bucket, Prefix=prefix, **marker)
            except ClientError as exc:
                if error_code(exc) in UNSUPPORTED:
                    return None  # not retried: it will not start working
                if error_code(exc) == "NoSuchUpload":
                    return {}  # rclone's answer for a bucket that never had one open
                raise

        try:
            reply: dict[str, Any] | None = storage.call(f"list uploads {prefix}", page)
        except TransferCancelled:
            raise
        except (ClientError, StorageError) as exc:
            log.info("stale multipart uploads under %s not listed: %s", prefix, exc)
            return None
        if reply is None:
            log.info("the store cannot list multipart uploads; it expires stale ones itself")
            return None
        for upload in reply.get("Uploads", []):
            key, upload_id = str(upload["Key"]), str(upload["UploadId"])
            if key.startswith(prefix):  # a store that ignores Prefix must not widen the reach
                log.info("aborting a stale multipart upload of %s", key)
                storage.abort_upload(key, upload_id)
                aborted += 1
        next_key = str(reply.get("NextKeyMarker") or "")
        if not reply.get("IsTruncated") or not next_key:
            return aborted
        marker = {"KeyMarker": next_key}
        if reply.get("NextUploadIdMarker"):
            marker["UploadIdMarker"] = str(reply["NextUploadIdMarker"])
