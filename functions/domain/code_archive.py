"""The job's code as an archive (spec `code: {dir}` → `code: {archive: {sha256, size_bytes}}`).

`tether submit` packs the directory into a deterministic tar.gz (`tether_cli/code_pack.py`),
asks the jobs API for a presigned PUT of the content-addressed key `code/<sha256>.tar.gz`
(`POST /code/uploads`), uploads it, and submits the job with the archive's sha256 and size. The
API checks that the object exists with that size and hashes to that sha256 before it stores the
job; the lifecycle's `begin` step copies it to `jobs/<job_id>/code/<sha256>.tar.gz`, where every
generation's read-only key can read it; the agent downloads, verifies and extracts it before the
restore (`agent/tether_agent/code_archive.py`). Pure: limits, shapes and the upload request.

The limits bound what the API hashes in one request and what a host downloads before training:
the CLI refuses a bigger working directory with the biggest files and directories named, and the
user adds them to `.tetherignore`. The agent keeps its own copy of these numbers (it cannot import
this package); `tests/unit/agent/test_contract.py` holds them equal.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from functions.domain.errors import Invalid, field_errors

MAX_ARCHIVE_BYTES = 100 * 1024 * 1024  # compressed: what is uploaded, hashed and downloaded
MAX_ARCHIVE_FILES = 20_000  # entries (files, directories, links) in one archive
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024  # the files' sizes added up: a zip bomb stops here
SHA256 = re.compile(r"^[0-9a-f]{64}$")


class UploadRequest(BaseModel):
    """`POST /code/uploads`: the archive the caller is about to upload."""

    model_config = ConfigDict(extra="forbid", strict=True)

    sha256: str = Field(pattern=SHA256.pattern, description="sha256 of the tar.gz")
    size_bytes: int = Field(
        gt=0,
        le=MAX_ARCHIVE_BYTES,
        description=f"the tar.gz's size, at most {MAX_ARCHIVE_BYTES} bytes",
    )


def parse_upload_request(body: dict[str, Any]) -> UploadRequest:
    """The upload `body` (a decoded JSON object) asks for, or `Invalid` naming each field."""
    try:
        return UploadRequest.model_validate(body)
    except ValidationError as exc:
        raise Invalid("the upload request is not valid", field_errors(exc)) from None
