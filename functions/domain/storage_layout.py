"""Every prefix and key of the R2 bucket that the control plane builds or reads
(docs/architecture.md#bucket-layout).

    code/<sha256>.tar.gz                            a packed working directory, as uploaded
    jobs/<job_id>/                                  read-only key of every generation
    jobs/<job_id>/code/<sha256>.tar.gz              the job's copy of it (lifecycle `begin`)
    jobs/<job_id>/g<generation>/                    read-write key of that generation only
    jobs/<job_id>/g<generation>/checkpoints/<step, 12 digits>/<files…>
    jobs/<job_id>/g<generation>/checkpoints/<step, 12 digits>/manifest.json   (written last)
    jobs/<job_id>/g<generation>/logs/<sequence, 6 digits>.log
    jobs/<job_id>/g<generation>/outputs/files/<files…>
    jobs/<job_id>/g<generation>/outputs/manifest.json                        (written last)

Uploads of code are content-addressed and shared by every job that ships the same tree; the
job's copy sits under its own prefix, outside every `g<generation>/`, so every generation's
read-only key reads it and no host can write it.

The outputs' files sit under `files/`, so a file of the job named `manifest.json` cannot take the
manifest's place.

Each generation writes only under its own `g<generation>/`, so nothing a replaced or zombie host
writes can land where a later generation looks, and a later generation restores only the
checkpoints the control plane recorded (`functions/domain/checkpoint_record.py`).

The logs API names a segment `g<generation, 4 digits>-<sequence, 6 digits>.log` (its cursor):
names sort in writing order across host replacements, whatever the keys look like.

The agent (`tether_agent/checkpoints.py`, `tether_agent/logs.py`) writes this layout; it is a
separate distribution that cannot import this module, so it keeps its own copy and a contract
test (`tests/unit/agent/test_contract.py`) holds the two equal. Pure.
"""

from __future__ import annotations

import re

JOBS_ROOT = "jobs/"
CODE_ROOT = "code/"
CODE_DIR = "code/"
ARCHIVE_SUFFIX = ".tar.gz"
CHECKPOINTS_DIR = "checkpoints/"
LOGS_DIR = "logs/"
OUTPUTS_DIR = "outputs/"
OUTPUT_FILES_DIR = "files/"
MANIFEST_NAME = "manifest.json"
STEP_DIGITS = 12
SEGMENT_NAME = re.compile(r"^g(\d{4,9})-(\d{6,9})\.log$")
_SEGMENT_KEY = re.compile(r"^g([1-9]\d{0,8})/logs/(\d{6,9})\.log$")
_MANIFEST_KEY = re.compile(rf"^g([1-9]\d{{0,8}})/checkpoints/(\d{{{STEP_DIGITS}}})/manifest\.json$")


def job_prefix(job_id: str) -> str:
    """`jobs/<job_id>/`: the trailing slash matters, or `jobs/abc` would also grant `jobs/abcd/`."""
    return f"{JOBS_ROOT}{job_id}/"


def code_upload_key(sha256: str) -> str:
    """`code/<sha256>.tar.gz`: where `tether submit` uploads a packed working directory."""
    return f"{CODE_ROOT}{sha256}{ARCHIVE_SUFFIX}"


def job_code_prefix(job_id: str) -> str:
    return job_prefix(job_id) + CODE_DIR


def job_code_key(job_id: str, sha256: str) -> str:
    """`jobs/<job_id>/code/<sha256>.tar.gz`: the job's own copy, read by its agents."""
    return f"{job_code_prefix(job_id)}{sha256}{ARCHIVE_SUFFIX}"


def generation_prefix(job_id: str, generation: int) -> str:
    """`jobs/<job_id>/g<generation>/`: all that generation may write (its read-write key)."""
    return f"{job_prefix(job_id)}g{generation}/"


def checkpoints_prefix(job_id: str, generation: int) -> str:
    return generation_prefix(job_id, generation) + CHECKPOINTS_DIR


def checkpoint_dir_key(job_id: str, step: int, generation: int) -> str:
    return f"{checkpoints_prefix(job_id, generation)}{step:0{STEP_DIGITS}d}/"


def manifest_key(job_id: str, step: int, generation: int) -> str:
    """A checkpoint exists only once this key exists."""
    return checkpoint_dir_key(job_id, step, generation) + MANIFEST_NAME


def parse_manifest_key(job_id: str, key: str) -> tuple[int, int] | None:
    """(step, generation) of a manifest key of this job in the layout above, else None."""
    prefix = job_prefix(job_id)
    if not key.startswith(prefix):
        return None
    match = _MANIFEST_KEY.match(key[len(prefix) :])
    return (int(match[2]), int(match[1])) if match else None


def outputs_prefix(job_id: str, generation: int) -> str:
    return generation_prefix(job_id, generation) + OUTPUTS_DIR


def output_files_prefix(job_id: str, generation: int) -> str:
    return outputs_prefix(job_id, generation) + OUTPUT_FILES_DIR


def outputs_manifest_key(job_id: str, generation: int) -> str:
    """The generation's outputs exist only once this key exists."""
    return outputs_prefix(job_id, generation) + MANIFEST_NAME


def logs_prefix(job_id: str, generation: int) -> str:
    return generation_prefix(job_id, generation) + LOGS_DIR


def log_segment_name(generation: int, sequence: int) -> str:
    """The logs API's name of a segment (and its cursor): sorts in writing order, across host
    replacements too."""
    return f"g{generation:04d}-{sequence:06d}.log"


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """(generation, sequence) of a segment name, or None."""
    match = SEGMENT_NAME.match(name)
    return (int(match[1]), int(match[2])) if match else None


def log_segment_key(job_id: str, generation: int, sequence: int) -> str:
    return f"{logs_prefix(job_id, generation)}{sequence:06d}.log"


def parse_segment_key(job_id: str, key: str) -> tuple[int, int] | None:
    """(generation, sequence) of a log segment key of this job, or None for anything else."""
    prefix = job_prefix(job_id)
    if not key.startswith(prefix):
        return None
    match = _SEGMENT_KEY.match(key[len(prefix) :])
    return (int(match[1]), int(match[2])) if match else None
