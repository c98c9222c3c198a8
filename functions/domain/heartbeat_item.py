"""The heartbeat item: what every heartbeat changes, kept on a small item of its own.

DynamoDB bills an UpdateItem by the larger of the item's size before and after it, one write
unit per KB: a heartbeat written onto the generation item (several KB: credentials, prices,
the monitor's observation, the heartbeat's checkpoint references) would bill several units
however little it changes. So a generation has two items (`functions/adapters/table.py`):

- the generation item (`sk=GEN#<nnnn>`): everything, the heartbeat (`heartbeat`) as of the
  last heartbeat that changed one of its RARE parts (checkpoint references, the restore and
  resume reports, misplaced and unmarked paths, outputs, exit code and output, the GPU's error
  text) or wrote a field kept once (`training_started_at`, `resumed_*`, `first_step_at`);
- the heartbeat item (`sk=GEN#<nnnn>#HB`, under 1 KB whatever the heartbeat contract allows:
  `tests/unit/domain/test_heartbeat_item.py`): the heartbeat's HOT parts (times, phase, steps,
  byte counts, the GPU probe's numbers), `lease_expires_at`, `gpu_busy_at`, and copies of
  `is_current` and `token_hash` that make its write conditional on its own item.

A reader merges the two (`merge_generation_fields`): the hot parts, the lease and
`gpu_busy_at` from the heartbeat item, the rest from the generation item. A generation written
before the heartbeat item existed has none, so its fields are read from the generation item
alone; its first heartbeat writes both items (`needs_generation_write`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from functions.domain.job import Generation
from functions.domain.recovery import Resumed

HEARTBEAT_SUFFIX = "#HB"
# The heartbeat's fields every heartbeat may change (`Heartbeat`, functions/domain/job.py).
HOT_HEARTBEAT_FIELDS = frozenset(
    {
        "at",
        "agent_time",
        "received_at",
        "phase",
        "step",
        "total_steps",
        "gpu",
        "bytes_downloaded",
        "bytes_uploaded",
        "last_upload_s",
    }
)
RARE_GPU_FIELDS = frozenset({"error"})  # up to 1 KB of text: on the generation item
# The generation's own fields the heartbeat item holds, once it exists.
HOT_GENERATION_FIELDS = ("lease_expires_at", "gpu_busy_at")
# Copies for the write's condition only: a reader takes these from the generation item.
GUARD_FIELDS = ("is_current", "token_hash")


def hot_part(heartbeat: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a heartbeat (as stored: JSON, None left out) on the heartbeat item."""
    hot = {k: v for k, v in heartbeat.items() if k in HOT_HEARTBEAT_FIELDS}
    if isinstance(hot.get("gpu"), Mapping):
        hot["gpu"] = {k: v for k, v in hot["gpu"].items() if k not in RARE_GPU_FIELDS}
    return hot


def rare_part(heartbeat: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parts of a heartbeat kept on the generation item only."""
    if heartbeat is None:
        return {}
    rare = {k: v for k, v in heartbeat.items() if k not in HOT_HEARTBEAT_FIELDS}
    gpu = heartbeat.get("gpu")
    if isinstance(gpu, Mapping):
        rare["gpu"] = {k: v for k, v in gpu.items() if k in RARE_GPU_FIELDS}
    return rare


def merged_heartbeat(
    stored: Mapping[str, Any] | None, hot: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The heartbeat: the generation item's rare parts under the heartbeat item's hot ones."""
    if hot is None:
        return dict(stored) if stored is not None else None
    rare = rare_part(stored)
    merged = {**rare, **hot}
    gpu_rare = rare.get("gpu") or {}
    if "gpu" in hot:
        merged["gpu"] = {**hot["gpu"], **gpu_rare}
    return merged


def merge_generation_fields(
    generation: Mapping[str, Any], heartbeat_item: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A generation's fields (plain item) with its heartbeat item's merged in (module
    docstring); `heartbeat_item` says whether it had one."""
    if heartbeat_item is None:
        return {**generation, "heartbeat_item": False}
    merged = dict(generation)
    heartbeat = merged_heartbeat(generation.get("heartbeat"), heartbeat_item.get("heartbeat"))
    if heartbeat is not None:
        merged["heartbeat"] = heartbeat
    for name in HOT_GENERATION_FIELDS:
        if name in heartbeat_item:
            merged[name] = heartbeat_item[name]
    merged["heartbeat_item"] = True
    return merged


def is_heartbeat_sort_key(sk: str) -> bool:
    return sk.startswith("GEN#") and sk.endswith(HEARTBEAT_SUFFIX)


def generation_sort_key_of(heartbeat_sk: str) -> str:
    return heartbeat_sk.removesuffix(HEARTBEAT_SUFFIX)


def once_fields_due(
    previous: Generation, *, training_start_step: int | None, resumed: Resumed | None
) -> bool:
    """The heartbeat writes a field kept once on the generation item that is not there yet."""
    if training_start_step is not None and previous.training_started_at is None:
        return True
    if resumed is None:
        return False
    return (
        previous.resumed_step is None
        or previous.resumed_started_at is None
        or (resumed.first_step_at is not None and previous.first_step_at is None)
    )


def needs_generation_write(
    previous: Generation | None,
    heartbeat: Mapping[str, Any],
    *,
    training_start_step: int | None,
    resumed: Resumed | None,
) -> bool:
    """The heartbeat (as stored) must also be written onto the generation item: the
    generation as read before it (`previous`) is unknown or has no heartbeat item yet, a rare
    part changed, or a field kept once is due. Otherwise the heartbeat item alone is written."""
    if previous is None or not previous.heartbeat_item:
        return True
    stored = (
        previous.heartbeat.model_dump(mode="json", exclude_none=True)
        if previous.heartbeat is not None
        else None
    )
    if rare_part(stored) != rare_part(heartbeat):
        return True
    return once_fields_due(previous, training_start_step=training_start_step, resumed=resumed)
