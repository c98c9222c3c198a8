"""Every prefix and key of the R2 bucket that the control plane builds or reads (DESIGN §3).

    jobs/<job_id>/                        the job's prefix: all its credentials reach
    jobs/<job_id>/checkpoints/<step, 12 digits>-g<generation>/<files…>
    jobs/<job_id>/checkpoints/<step, 12 digits>-g<generation>/manifest.json   (written last)
    jobs/<job_id>/logs/g<generation, 4 digits>-<sequence, 6 digits>.log

The agent (`tether_agent/checkpoints.py`, `tether_agent/logs.py`) writes this layout; it is a
separate distribution that cannot import this module, so it keeps its own copy and a contract
test (`tests/unit/agent/test_contract.py`) holds the two equal. Pure.
"""

from __future__ import annotations

import re

JOBS_ROOT = "jobs/"
CHECKPOINTS_DIR = "checkpoints/"
LOGS_DIR = "logs/"
MANIFEST_NAME = "manifest.json"
STEP_DIGITS = 12
SEGMENT_NAME = re.compile(r"^g(\d{4,9})-(\d{6,9})\.log$")


def job_prefix(job_id: str) -> str:
    """`jobs/<job_id>/`: the trailing slash matters, or `jobs/abc` would also grant `jobs/abcd/`."""
    return f"{JOBS_ROOT}{job_id}/"


def checkpoints_prefix(job_id: str) -> str:
    return job_prefix(job_id) + CHECKPOINTS_DIR


def checkpoint_dir_key(job_id: str, step: int, generation: int) -> str:
    return f"{checkpoints_prefix(job_id)}{step:0{STEP_DIGITS}d}-g{generation}/"


def manifest_key(job_id: str, step: int, generation: int) -> str:
    """A checkpoint exists only once this key exists."""
    return checkpoint_dir_key(job_id, step, generation) + MANIFEST_NAME


def logs_prefix(job_id: str) -> str:
    return job_prefix(job_id) + LOGS_DIR


def log_segment_name(generation: int, sequence: int) -> str:
    """Sorts in writing order, across host replacements too."""
    return f"g{generation:04d}-{sequence:06d}.log"


def log_segment_key(job_id: str, generation: int, sequence: int) -> str:
    return logs_prefix(job_id) + log_segment_name(generation, sequence)


def parse_segment_key(job_id: str, key: str) -> tuple[int, int] | None:
    """(generation, sequence) of a log segment key of this job, or None for anything else."""
    prefix = logs_prefix(job_id)
    if not key.startswith(prefix):
        return None
    match = SEGMENT_NAME.match(key[len(prefix) :])
    return (int(match[1]), int(match[2])) if match else None
