"""The bucket layout the control plane builds and reads (functions/domain/storage_layout.py),
spelled out as docs/architecture.md#bucket-layout has it."""

from __future__ import annotations

import pytest

from functions.domain import storage_layout as layout


def test_each_generation_writes_under_its_own_prefix_within_the_jobs() -> None:
    assert layout.job_prefix("qlora-7b-3f2a9c1d") == "jobs/qlora-7b-3f2a9c1d/"
    assert layout.generation_prefix("j-1", 2) == "jobs/j-1/g2/"
    assert layout.checkpoints_prefix("j-1", 2) == "jobs/j-1/g2/checkpoints/"
    assert layout.checkpoint_dir_key("j-1", 500, 2) == "jobs/j-1/g2/checkpoints/000000000500/"
    assert (
        layout.manifest_key("j-1", 500, 2) == "jobs/j-1/g2/checkpoints/000000000500/manifest.json"
    )
    assert layout.logs_prefix("j-1", 3) == "jobs/j-1/g3/logs/"
    assert layout.log_segment_key("j-1", 3, 17) == "jobs/j-1/g3/logs/000017.log"


def test_a_prefix_never_covers_another_job_or_generation_whose_name_it_starts() -> None:
    assert not layout.job_prefix("abcd").startswith(layout.job_prefix("abc"))
    assert not layout.generation_prefix("j-1", 12).startswith(layout.generation_prefix("j-1", 1))


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("jobs/j-1/g3/logs/000017.log", (3, 17)),
        ("jobs/j-1/g123456789/logs/123456789.log", (123456789, 123456789)),
        ("jobs/j-2/g3/logs/000017.log", None),  # another job's
        ("jobs/j-1/g3/logs/notes.txt", None),  # a stray object under the prefix
        ("jobs/j-1/g3/logs/17.log", None),  # too few digits: not a name the agent writes
        ("jobs/j-1/g0/logs/000017.log", None),  # no generation 0
        ("jobs/j-1/logs/g0003-000017.log", None),  # the old layout
        ("jobs/j-1/g2/checkpoints/000000000500/manifest.json", None),
    ],
)
def test_log_segment_keys_parse_to_generation_and_sequence(
    key: str, parsed: tuple[int, int] | None
) -> None:
    assert layout.parse_segment_key("j-1", key) == parsed


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("jobs/j-1/g2/checkpoints/000000000500/manifest.json", (500, 2)),
        ("jobs/j-1/g2/checkpoints/000000000500/model.bin", None),
        ("jobs/j-1/g2/checkpoints/500/manifest.json", None),
        ("jobs/j-1/checkpoints/000000000500-g2/manifest.json", None),  # the old layout
        ("jobs/j-12/g2/checkpoints/000000000500/manifest.json", None),
    ],
)
def test_manifest_keys_parse_to_step_and_generation(
    key: str, parsed: tuple[int, int] | None
) -> None:
    assert layout.parse_manifest_key("j-1", key) == parsed


def test_segment_names_sort_in_writing_order_across_generations() -> None:
    written = [(1, 0), (1, 1), (1, 10), (2, 0), (10, 0)]
    names = [layout.log_segment_name(g, s) for g, s in written]
    assert sorted(names) == names
    assert [layout.parse_segment_name(n) for n in names] == written
