"""The job's code as an archive (spec `code: {dir}` → `code: {archive: {sha256, size_bytes}}`).

`tether submit` packs the directory into a deterministic tar.gz (`tether_cli/code_pack.py`),
asks the jobs API for a presigned PUT of the content-addressed key `code/<sha256>.tar.gz`
(`POST /code/uploads`), uploads it, and submits the job with the archive's sha256 and size. The
API checks that the object exists with that size and hashes to that sha256 before it stores the
job; the lifecycle's `begin` step copies it to `jobs/<job_id>/code/<sha256>.tar.gz`, where every
generation's read-only key can read it; the agent downloads, verifies and extracts it before the
restore (`agent/tether_agent/code_archive.py`). Pure: limits and shapes only.

The limits bound what the API hashes in one request and what a host downloads before training:
the CLI refuses a bigger working directory with the biggest files and directories named, and the
user adds them to `.tetherignore`. The agent keeps its own copy of these numbers (it cannot import
this package); `tests/unit/agent/test_contract.py` holds them equal.
"""

from __future__ import annotations

import re

MAX_ARCHIVE_BYTES = 100 * 1024 * 1024  # compressed: what is uploaded, hashed and downloaded
MAX_ARCHIVE_FILES = 20_000  # entries (files, directories, links) in one archive
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024  # the files' sizes added up: a zip bomb stops here
SHA256 = re.compile(r"^[0-9a-f]{64}$")
