"""Vast instance labels (docs/architecture.md#instance-labels): how the monitor knows whose host an
instance is. Pure.

`tether.<slot>:<job_id>:g<generation>`. The slot (one hex digit, `label_slot`) is a hash of the
job id, put first so that the labels of a monitor shard's jobs are one contiguous range of
label text: a shard lists only its own instances (`select_filters` on `label`, `functions/
domain/shards.py`). Labels written before the slot (`tether:<job_id>:g<generation>`) are
still read as ours; they are listed by every shard and kept by the one whose job it is
(docs/decisions/0001-label-slots.md).
"""

from __future__ import annotations

import hashlib
import re

LABEL_PREFIX = "tether"
SHARD_SLOTS = 16  # one hex digit; a monitor shard owns a contiguous run of slots
_LABEL = re.compile(
    r"^tether(?:\.(?P<slot>[0-9a-f])|):(?P<job>[A-Za-z0-9_-]{1,64}):g(?P<gen>[0-9]{1,6})$"
)

LabelRange = tuple[str, str]  # labels `low <= label < high`, compared as bytes
# Labels without a slot (written before it) all fall in this range, and no slotted label does.
UNSLOTTED_RANGE: LabelRange = (f"{LABEL_PREFIX}:", f"{LABEL_PREFIX};")


def label_slot(job_id: str) -> int:
    """The job's slot, 0 … SHARD_SLOTS - 1: stable, and even across job ids whatever their
    names (a sweep's jobs share a name, so the id's text order would not spread them)."""
    return int(hashlib.sha256(job_id.encode()).hexdigest()[0], 16)


def instance_label(job_id: str, generation: int) -> str:
    """`tether.<slot>:<job_id>:g<generation>`."""
    return f"{LABEL_PREFIX}.{label_slot(job_id):x}:{job_id}:g{generation}"


def parse_label(label: str | None) -> tuple[str, int] | None:
    """(job id, generation) of a tether label, with or without its slot; None for anything
    else (not ours), including a slot that is not the job's (not a label tether wrote)."""
    match = _LABEL.match(label or "")
    if match is None:
        return None
    job = match["job"]
    if match["slot"] is not None and int(match["slot"], 16) != label_slot(job):
        return None
    return job, int(match["gen"])


def slot_range(low: int, high: int) -> LabelRange:
    """The labels of slots `low <= slot < high`: hex digits sort in byte order ('0' … '9' <
    'a' … 'f'), and '/' follows '.' for the range's open end."""
    start = f"{LABEL_PREFIX}.{low:x}"
    end = f"{LABEL_PREFIX}.{high:x}" if high < SHARD_SLOTS else f"{LABEL_PREFIX}/"
    return start, end


def job_label_ranges(job_id: str) -> list[LabelRange]:
    """The labels of every generation of one job, with its slot and without (';' follows ':')."""
    slotted = f"{LABEL_PREFIX}.{label_slot(job_id):x}:{job_id}:"
    unslotted = f"{LABEL_PREFIX}:{job_id}:"
    return [(slotted, slotted[:-1] + ";"), (unslotted, unslotted[:-1] + ";")]
