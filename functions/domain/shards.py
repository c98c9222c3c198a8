"""Monitor shards (docs/architecture.md#shards): the fleet split across monitor schedules by a hash
of the job id, each shard a bounded run of its own. Pure.

A shard owns a contiguous run of the label slots (`functions/domain/labels.py`): it reads,
judges and marks supervised only its own jobs, lists only the instances whose labels fall in
its slots (plus the labels written before slots, which it filters by job), and sweeps only the
orphans of its slots. So a shard that fails renews no lease but its own jobs', and no other
shard's run extends them: each job's lease rests on its own shard's `supervised_at` writes
(docs/decisions/0001-label-slots.md).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from functions.domain.labels import (
    SHARD_SLOTS,
    UNSLOTTED_RANGE,
    LabelRange,
    label_slot,
    parse_label,
    slot_range,
)

MAX_SHARDS = SHARD_SLOTS


@dataclass(frozen=True)
class Shard:
    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS:
            raise ValueError(f"the shard count must be 1 … {MAX_SHARDS}, not {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index} is not one of 0 … {self.count - 1}")

    @property
    def whole(self) -> bool:
        return self.count == 1

    @property
    def slots(self) -> range:
        """Slots `index·16/count` … up to `(index+1)·16/count`: contiguous, all covered."""
        return range(
            self.index * SHARD_SLOTS // self.count, (self.index + 1) * SHARD_SLOTS // self.count
        )

    def owns_job(self, job_id: str) -> bool:
        return self.whole or label_slot(job_id) in self.slots

    def owns_label(self, label: str | None) -> bool:
        """A tether label of one of this shard's jobs (any other label is no shard's)."""
        parsed = parse_label(label)
        return parsed is not None and self.owns_job(parsed[0])

    def label_ranges(self, chains: int) -> list[LabelRange]:
        """The label ranges this shard lists, one page chain each: its slots cut into at most
        `chains` runs of about equal size, and the labels written before slots."""
        slots = self.slots
        pieces = max(1, min(chains, len(slots)))
        if self.whole and pieces == 1:  # one chain: every slot and the unslotted labels
            return [(slot_range(0, SHARD_SLOTS)[0], UNSLOTTED_RANGE[1])]
        cuts = [slots.start + len(slots) * k // pieces for k in range(pieces + 1)]
        return [*(slot_range(lo, hi) for lo, hi in itertools.pairwise(cuts)), UNSLOTTED_RANGE]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"
