"""`GET /jobs/{id}/logs`: the job's training-log segments as presigned GET URLs.

Each generation's agent writes its segments under its own prefix,
`jobs/<id>/g<generation>/logs/<sequence>.log` (`tether_agent/logs.py`; the layout is
`functions/domain/storage_layout.py`). The API names each `g<generation>-<sequence>.log`
(4 and 6 digits), names that sort in writing order across host replacements, and lists them
generation by generation. A page lists the segments after the cursor `after` (a segment name,
e.g. `g0002-000017.log`), with a URL each that works for a few minutes; `next` is the cursor for
the following page, and `ended` tells a follower that the job has reached a terminal state, so
once a page comes back empty nothing more will come. `missing` names each generation listed
whole that is over (replaced, or the job ended) and uploaded no segment at all, with why
(`functions/domain/log_gaps.py`): no generation is skipped silently. Each generation's prefix is
read with a read-only key of its own (cached), so the API never holds a key to the job's
checkpoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from functions.adapters.factory import SecretNotSet
from functions.adapters.r2 import ReadOnlyBucket
from functions.adapters.store import JobStore
from functions.api.job_service import JOB_ID_SHAPE
from functions.domain.errors import DomainError, FieldError, Invalid, LogsUnavailable, NotFound
from functions.domain.job import TERMINAL_STATES
from functions.domain.log_gaps import missing_log_reason
from functions.domain.storage_layout import (
    SEGMENT_NAME,
    log_segment_key,
    log_segment_name,
    logs_prefix,
    parse_segment_key,
    parse_segment_name,
)

URL_TTL_S = 300
MAX_PAGE = 100


@dataclass(frozen=True)
class LogsDeps:
    store: JobStore
    bucket: Callable[[], ReadOnlyBucket]  # built on first use: it reads the Cloudflare secret
    clock: Callable[[], float] = field(default=time.time)


def validate_after(after: str | None) -> str | None:
    if after is not None and not SEGMENT_NAME.match(after):
        raise Invalid(
            "bad cursor",
            [FieldError(path="query.after", reason="must be a segment name like g0001-000000.log")],
        )
    return after


def list_logs(deps: LogsDeps, job_id: str, *, after: str | None, limit: int) -> dict[str, Any]:
    job = deps.store.get_job(job_id) if JOB_ID_SHAPE.match(job_id) else None
    if job is None:
        raise NotFound(f"no job {job_id!r}", [FieldError(path="path.id", reason="unknown job")])
    after = validate_after(after)
    cursor = parse_segment_name(after) if after else None
    first = cursor[0] if cursor else 1
    segments: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    ended = job.state in TERMINAL_STATES
    more = False
    try:
        bucket = deps.bucket()
        for generation in range(first, job.current_generation + 1):
            prefix = logs_prefix(job_id, generation)
            start = None
            if cursor and generation == cursor[0]:
                start = log_segment_key(job_id, generation, cursor[1])
            room = limit - len(segments)
            found = bucket.list_after(prefix, start, room)
            for obj in found:
                parsed = parse_segment_key(job_id, obj.key)
                if parsed is None or parsed[0] != generation:
                    continue  # not ours to show (a stray object under the prefix)
                url, expires_at = bucket.presign_get(prefix, obj.key, URL_TTL_S)
                segments.append(
                    {
                        "name": log_segment_name(*parsed),
                        "generation": parsed[0],
                        "sequence": parsed[1],
                        "size": obj.size,
                        "url": url,
                        "expires_at": expires_at,
                    }
                )
            if len(found) >= room:
                more = True
                break
            over = generation < job.current_generation or ended
            if not found and start is None and over:  # listed whole: it never uploaded any
                record = deps.store.get_generation(job_id, generation)
                missing.append({"generation": generation, "reason": missing_log_reason(record)})
    except DomainError:
        raise
    except Exception as exc:
        raise LogsUnavailable(_unavailable_reason(exc)) from None
    return {
        "job_id": job_id,
        "state": job.state.value,
        "generation": job.current_generation,
        "ended": ended,
        "segments": segments,
        # Generations over with no segment at all, each with why (`log_gaps`).
        "missing": missing,
        "next": segments[-1]["name"] if segments else after,
        "more": more,
    }


def _unavailable_reason(exc: Exception) -> str:
    # The secret's own message says which field to set; anything else stays generic (it may
    # carry an endpoint or a key id, never a secret, but the caller does not need it).
    if isinstance(exc, SecretNotSet):
        return f"logs are unavailable: {exc}"
    return f"logs are unavailable right now ({type(exc).__name__}); try again shortly"
