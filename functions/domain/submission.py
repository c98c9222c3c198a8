"""A job as submitted to the API: the parsed spec, and the hash of the body that carried it.

An `Idempotency-Key` replay must carry the same body: the store keeps `request_sha256` with the
key and refuses the key with a different one. The hash is of the body as sent (canonical JSON),
not of the parsed spec, so it matches what earlier deployments stored.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from functions.domain.errors import Invalid
from functions.domain.jobspec import JobSpec, SpecError, parse_job


@dataclass(frozen=True)
class JobSubmission:
    spec: JobSpec
    request_sha256: str


def request_hash(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def parse_submission(body: dict[str, Any]) -> JobSubmission:
    """The submission `body` (a decoded JSON object) describes, or `Invalid` naming every field
    at fault. The hash is taken after the spec parsed: a valid spec holds only valid text, so
    the hash cannot fail."""
    try:
        spec = parse_job(body)
    except SpecError as exc:
        raise Invalid("the job spec is not valid", exc.errors) from None
    return JobSubmission(spec=spec, request_sha256=request_hash(body))
