"""The heartbeat item (functions/domain/heartbeat_item.py): under 1 KB whatever the heartbeat
contract allows, so a heartbeat's write bills one write unit; the generation merged back whole;
the generation item written only when a rare part changes."""

from __future__ import annotations

from typing import Any

from bench.lib.meter import WRITE_UNIT_BYTES, item_size
from functions.adapters.table import heartbeat_key, serialize
from functions.domain.heartbeat_contract import (
    MAX_BYTES,
    MAX_GENERATION,
    MAX_SECONDS,
    MAX_STEP,
    CheckpointRef,
    GpuProbe,
)
from functions.domain.heartbeat_item import (
    HOT_GENERATION_FIELDS,
    HOT_HEARTBEAT_FIELDS,
    hot_part,
    merge_generation_fields,
    needs_generation_write,
    rare_part,
)
from functions.domain.job import Generation, Heartbeat
from functions.domain.recovery import Resumed

# DynamoDB's largest number (38 significant digits): 20 bytes by its size rule.
LARGEST_NUMBER = {"N": "9" * 38}


def largest_numbers(value: dict[str, Any]) -> dict[str, Any]:
    """A DynamoDB attribute value with every number at DynamoDB's largest."""
    ((kind, inner),) = value.items()
    if kind == "N":
        return LARGEST_NUMBER
    if kind == "M":
        return {"M": {k: largest_numbers(v) for k, v in inner.items()}}
    if kind == "L":
        return {"L": [largest_numbers(v) for v in inner]}
    return value


def beat(**fields: Any) -> Heartbeat:
    values: dict[str, Any] = {
        "at": 1000.0,
        "agent_time": 999.0,
        "phase": "training",
        "step": 5,
        "gpu": GpuProbe(available=True, utilization_pct=90.0),
    }
    values.update(fields)
    return Heartbeat(**values)


def test_the_largest_heartbeat_item_the_contract_allows_is_one_write_unit() -> None:
    """Longest job id, largest generation, every field of the hot parts set (the longest phase
    name, a GPU error of the most text allowed), and every number at DynamoDB's largest."""
    heartbeat = beat(
        received_at=MAX_SECONDS,
        phase="restoring",  # the longest phase names are 9 characters
        step=MAX_STEP,
        total_steps=MAX_STEP,
        gpu=GpuProbe(
            available=True,
            responsive=False,
            utilization_pct=100.0,
            memory_used_mb=1e9,
            memory_total_mb=1e9,
            unresponsive_s=MAX_SECONDS,
            error="e" * 1024,  # rare: stays on the generation item
        ),
        last_checkpoint=CheckpointRef(step=1, generation=1, manifest_key="k" * 1024),
        exit_output="x" * 2048,
        bytes_downloaded=MAX_BYTES,
        bytes_uploaded=MAX_BYTES,
        last_upload_s=MAX_SECONDS,
    )
    hot = hot_part(heartbeat.model_dump(mode="json", exclude_none=True))
    # What `GenerationRecords.store_heartbeat` writes onto the item.
    item: dict[str, Any] = {
        **heartbeat_key("j" * 64, MAX_GENERATION),
        "heartbeat": hot,
        "lease_expires_at": 1.0,
        "gpu_busy_at": 1.0,
        "is_current": True,
        "token_hash": "f" * 64,
    }
    assert set(hot) == HOT_HEARTBEAT_FIELDS
    assert set(hot["gpu"]) == set(GpuProbe.model_fields) - {"error"}
    largest = {name: largest_numbers(value) for name, value in serialize(item).items()}
    assert item_size(largest) <= WRITE_UNIT_BYTES


def test_the_hot_and_rare_parts_make_the_whole_heartbeat() -> None:
    heartbeat = beat(
        gpu=GpuProbe(available=True, responsive=False, error="Xid 79"),
        last_checkpoint=CheckpointRef(step=4, generation=1, manifest_key="m.json"),
    ).model_dump(mode="json", exclude_none=True)
    hot, rare = hot_part(heartbeat), rare_part(heartbeat)
    assert "last_checkpoint" in rare and "last_checkpoint" not in hot
    assert hot["gpu"] == {"available": True, "responsive": False, "unresponsive_s": 0}
    assert rare["gpu"] == {"error": "Xid 79"}
    merged = merge_generation_fields(
        {"job_id": "j", "heartbeat": heartbeat}, {"heartbeat": hot, "lease_expires_at": 9.0}
    )
    assert merged["heartbeat"] == heartbeat and merged["lease_expires_at"] == 9.0


def test_a_reader_takes_the_hot_parts_from_the_heartbeat_item_the_rest_from_the_generation() -> (
    None
):
    written = beat(
        step=5,
        gpu=GpuProbe(available=True, error="old error"),
        last_checkpoint=CheckpointRef(step=4, generation=1, manifest_key="m.json"),
    )
    later = beat(at=1015.0, step=None, gpu=GpuProbe(available=True, responsive=False))
    generation = {
        "job_id": "j",
        "generation": 1,
        "token_hash": "h",
        "is_current": True,
        "lease_expires_at": 1.0,
        "gpu_busy_at": 2.0,
        "heartbeat": written.model_dump(mode="json", exclude_none=True),
    }
    heartbeat_item = {
        "heartbeat": hot_part(later.model_dump(mode="json", exclude_none=True)),
        "lease_expires_at": 3.0,
        "is_current": False,  # a guard copy: never read back
    }
    merged = Generation.model_validate(merge_generation_fields(generation, heartbeat_item))
    assert merged.heartbeat_item and merged.is_current
    assert merged.lease_expires_at == 3.0 and merged.gpu_busy_at == 2.0
    assert merged.heartbeat is not None
    assert merged.heartbeat.at == 1015.0 and merged.heartbeat.step is None  # not the stale 5
    assert merged.heartbeat.gpu.responsive is False
    assert merged.heartbeat.gpu.error == "old error"  # rare: as the generation item has it
    assert merged.heartbeat.last_checkpoint == written.last_checkpoint
    assert set(HOT_GENERATION_FIELDS) == {"lease_expires_at", "gpu_busy_at"}


def test_a_generation_without_a_heartbeat_item_is_read_as_stored() -> None:
    stored = {"job_id": "j", "generation": 1, "token_hash": "h", "lease_expires_at": 7.0}
    stored["heartbeat"] = beat().model_dump(mode="json", exclude_none=True)
    merged = Generation.model_validate(merge_generation_fields(stored, None))
    assert not merged.heartbeat_item and merged.lease_expires_at == 7.0
    assert merged.heartbeat == beat()
    assert "heartbeat_item" not in merged.model_dump()  # never stored


def previous_with(heartbeat: Heartbeat | None, **fields: Any) -> Generation:
    return Generation(
        job_id="j", generation=1, token_hash="h", heartbeat=heartbeat, heartbeat_item=True, **fields
    )


def as_stored(heartbeat: Heartbeat) -> dict[str, Any]:
    return heartbeat.model_dump(mode="json", exclude_none=True)


def test_only_a_rare_change_or_a_field_kept_once_writes_the_generation_item() -> None:
    ref = CheckpointRef(step=4, generation=1, manifest_key="m.json")
    previous = previous_with(beat(last_checkpoint=ref), training_started_at=1.0)

    def due(heartbeat: Heartbeat, **kwargs: Any) -> bool:
        kwargs.setdefault("training_start_step", None)
        kwargs.setdefault("resumed", None)
        return needs_generation_write(previous, as_stored(heartbeat), **kwargs)

    # Hot changes only: the heartbeat item alone.
    assert not due(beat(at=2000.0, step=9, last_checkpoint=ref, bytes_uploaded=7))
    assert not due(beat(last_checkpoint=ref, gpu=GpuProbe(available=True, responsive=False)))
    # Rare changes: a new checkpoint, a GPU error, an exit.
    assert due(beat(last_checkpoint=ref.model_copy(update={"step": 8})))
    assert due(beat(last_checkpoint=ref, gpu=GpuProbe(available=True, error="Xid 79")))
    assert due(beat(last_checkpoint=ref, exit_code=1))
    # Fields kept once: written only while missing.
    assert not due(beat(last_checkpoint=ref), training_start_step=3)
    resumed = Resumed(step=4, started_at=10.0, first_step_at=None)
    assert due(beat(last_checkpoint=ref), resumed=resumed)
    kept = previous_with(
        beat(last_checkpoint=ref), resumed_step=4, resumed_started_at=10.0, first_step_at=None
    )
    stored = as_stored(beat(last_checkpoint=ref))
    assert not needs_generation_write(kept, stored, training_start_step=None, resumed=resumed)
    first = resumed.model_copy(update={"first_step_at": 12.0})
    assert needs_generation_write(kept, stored, training_start_step=None, resumed=first)


def test_a_generation_without_its_heartbeat_item_or_unknown_writes_both() -> None:
    stored = as_stored(beat())
    old = previous_with(beat()).model_copy(update={"heartbeat_item": False})
    assert needs_generation_write(old, stored, training_start_step=None, resumed=None)
    assert needs_generation_write(None, stored, training_start_step=None, resumed=None)
