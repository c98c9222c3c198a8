"""The bucket layout the control plane builds and reads (functions/domain/storage_layout.py),
spelled out as DESIGN §3 has it."""

from __future__ import annotations

import pytest

from functions.domain import storage_layout as layout


def test_every_key_lives_under_the_jobs_own_prefix() -> None:
    assert layout.job_prefix("qlora-7b-3f2a9c1d") == "jobs/qlora-7b-3f2a9c1d/"
    assert layout.checkpoints_prefix("j-1") == "jobs/j-1/checkpoints/"
    assert layout.checkpoint_dir_key("j-1", 500, 2) == "jobs/j-1/checkpoints/000000000500-g2/"
    assert (
        layout.manifest_key("j-1", 500, 2) == "jobs/j-1/checkpoints/000000000500-g2/manifest.json"
    )
    assert layout.logs_prefix("j-1") == "jobs/j-1/logs/"
    assert layout.log_segment_key("j-1", 3, 17) == "jobs/j-1/logs/g0003-000017.log"


def test_a_prefix_never_covers_another_job_whose_id_it_starts() -> None:
    assert not layout.job_prefix("abcd").startswith(layout.job_prefix("abc"))


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("jobs/j-1/logs/g0003-000017.log", (3, 17)),
        ("jobs/j-1/logs/g123456789-123456789.log", (123456789, 123456789)),
        ("jobs/j-2/logs/g0003-000017.log", None),  # another job's
        ("jobs/j-1/logs/notes.txt", None),  # a stray object under the prefix
        ("jobs/j-1/logs/g3-17.log", None),  # too few digits: not a name the agent writes
        ("jobs/j-1/checkpoints/000000000500-g2/manifest.json", None),
    ],
)
def test_log_segment_keys_parse_to_generation_and_sequence(
    key: str, parsed: tuple[int, int] | None
) -> None:
    assert layout.parse_segment_key("j-1", key) == parsed


def test_segment_names_sort_in_writing_order_across_generations() -> None:
    written = [(1, 0), (1, 1), (1, 10), (2, 0), (10, 0)]
    names = [layout.log_segment_name(g, s) for g, s in written]
    assert sorted(names) == names
