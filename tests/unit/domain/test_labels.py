"""Instance labels carry a slot (a hash of the job id) first, so that a monitor shard's
instances are contiguous label ranges; labels written before the slot still read as ours."""

from __future__ import annotations

import pytest

from functions.domain.labels import (
    UNSLOTTED_RANGE,
    instance_label,
    job_label_ranges,
    label_slot,
    parse_label,
    slot_range,
)
from functions.domain.shards import Shard


def test_a_label_has_the_slot_of_its_job_first() -> None:
    label = instance_label("sweep-lr-0123abcd", 3)
    assert label == f"tether.{label_slot('sweep-lr-0123abcd'):x}:sweep-lr-0123abcd:g3"
    assert parse_label(label) == ("sweep-lr-0123abcd", 3)


def test_labels_written_before_the_slot_are_still_ours() -> None:
    assert parse_label("tether:sweep-lr-0123abcd:g3") == ("sweep-lr-0123abcd", 3)
    assert UNSLOTTED_RANGE[0] <= "tether:sweep-lr-0123abcd:g3" < UNSLOTTED_RANGE[1]


@pytest.mark.parametrize(
    "label", ["tether.z:job-0123abcd:g1", "tether.:job-0123abcd:g1", "tether..:x:g1", "tether"]
)
def test_anything_else_is_not_ours(label: str) -> None:
    assert parse_label(label) is None


def test_a_slot_that_is_not_the_jobs_is_not_a_label_tether_wrote() -> None:
    job = "job-0123abcd"
    wrong = (label_slot(job) + 1) % 16
    assert parse_label(f"tether.{wrong:x}:{job}:g1") is None


def test_slot_ranges_sort_in_byte_order_and_hold_only_their_slots() -> None:
    jobs = [f"job-{n:08x}" for n in range(300)]
    for low, high in ((0, 4), (4, 10), (10, 16), (0, 16)):
        start, end = slot_range(low, high)
        inside = {j for j in jobs if start <= instance_label(j, 1) < end}
        assert inside == {j for j in jobs if low <= label_slot(j) < high}


def test_a_jobs_ranges_hold_its_labels_and_no_other_jobs() -> None:
    job, longer = "train-0123abcd", "train-0123abcd-x-89abcdef"
    ranges = job_label_ranges(job)
    for label in (instance_label(job, 1), instance_label(job, 12), f"tether:{job}:g7"):
        assert any(lo <= label < hi for lo, hi in ranges), label
    for label in (instance_label(longer, 1), f"tether:{longer}:g1"):
        assert not any(lo <= label < hi for lo, hi in ranges), label


def test_shard_counts_that_do_not_divide_the_slots_still_cover_each_once() -> None:
    for count in range(1, 17):
        slots = [s for k in range(count) for s in Shard(k, count).slots]
        assert slots == list(range(16)), count
    with pytest.raises(ValueError, match="1 … 16"):
        Shard(0, 17)
    with pytest.raises(ValueError, match="shard 3"):
        Shard(3, 3)
