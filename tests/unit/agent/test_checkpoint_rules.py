"""Rules a bug in the agent could break unseen: path safety of manifests, retention counts.

Every weakening of `is_safe_relative` lets a crafted manifest write outside the restore
directory; every retention count other than the user's deletes the wrong checkpoints.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tether_agent.checkpoints import (
    Manifest,
    ManifestFile,
    RemoteCheckpointId,
    is_safe_relative,
    local_step,
    manifest_problem,
    name_problem,
    retention_victims,
    sibling_marker_name,
)

C = RemoteCheckpointId
SHA = "0" * 64


@pytest.mark.parametrize(
    ("path", "safe"),
    [
        ("model.npz", True),
        ("sub/dir/optimizer.pt", True),
        ("a..b/c", True),  # dots inside a name are a name
        ("", False),
        ("/etc/passwd", False),
        ("../escape", False),
        ("a/../../escape", False),
        ("a/..", False),
        ("..", False),
        ("a\\..\\b", False),
        ("//double", False),
    ],
)
def test_manifest_paths_stay_inside_the_checkpoint(path: str, safe: bool) -> None:
    assert is_safe_relative(path) is safe


@pytest.mark.parametrize("path", ["../x", "/abs", "a/../../b"])
def test_a_manifest_with_an_unsafe_path_is_never_restorable(path: str) -> None:
    manifest = Manifest(
        step=100,
        generation=2,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        files=[
            ManifestFile(path="ok.bin", size=1, sha256=SHA),
            ManifestFile(path=path, size=1, sha256=SHA),
        ],
    )
    problem = manifest_problem(manifest, C(100, 2))
    assert problem is not None and path in problem


def test_a_manifest_for_another_directory_is_refused() -> None:
    manifest = Manifest(
        step=100, generation=2, created_at=datetime(2026, 1, 1, tzinfo=UTC), files=[]
    )
    assert manifest_problem(manifest, C(100, 2)) is None
    assert manifest_problem(manifest, C(200, 2)) is not None
    assert manifest_problem(manifest, C(100, 3)) is not None


STEPS = [C(s, 1) for s in (10, 20, 30, 40, 50)]


@pytest.mark.parametrize(
    ("keep_last", "victims"),
    [
        (1, [10, 20, 30, 40]),
        (2, [10, 20, 30]),
        (3, [10, 20]),
        (5, []),
        (6, []),  # fewer complete than asked: delete nothing
    ],
)
def test_retention_keeps_exactly_the_newest_keep_last(keep_last: int, victims: list[int]) -> None:
    found = retention_victims(STEPS, set(STEPS), own_generation=1, keep_last=keep_last)
    assert [c.step for c in found] == victims


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("checkpoint-500", 500),
        ("step_000500", 500),
        ("epoch=0-step=50.ckpt", 50),  # Lightning's default name
        ("step_50.pt", 50),
        ("ckpt.500", 500),  # a number after the dot is the step, not a suffix
        ("last.ckpt", None),  # Lightning's last: no step, no checkpoint
        ("model.h5", None),
        # Lightning's `{step}` wins over a later number: a metric, a version for a name taken
        ("epoch=3-step=20-val_loss=0.12.ckpt", 20),
        ("epoch=0-step=20-v1.ckpt", 20),
        ("step=20.ckpt", 20),
        ("epoch=0-global_step=20-7.ckpt", 7),  # `global_step=` is not Lightning's `step=`
    ],
)
def test_the_step_of_a_local_checkpoint_is_its_step_key_or_last_number_before_its_suffix(
    name: str, step: int | None
) -> None:
    assert local_step(name) == step


def test_a_file_checkpoint_is_marked_by_a_sibling_named_after_it() -> None:
    assert sibling_marker_name("epoch=0-step=50.ckpt", ".tether-complete") == (
        "epoch=0-step=50.ckpt.tether-complete"
    )
    assert sibling_marker_name("step_50.pt", "COMPLETE") == "step_50.pt.COMPLETE"


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("step_20", None),
        ("epoch=0-step=20.ckpt", None),
        ("../step_20", "not one path component"),
        ("a\\step_20", "not one path component"),
        (".step_20", "hidden"),
        ("step_20\u202e", "control characters"),  # a bidi override: invisible in a listing
        ("step_20\x7f", "control characters"),
        ("step_21", "does not carry step 20"),
        ("x" * 260 + "_20", "longer than 255 bytes"),
    ],
)
def test_a_recorded_name_is_written_back_only_when_plain(name: str, problem: str | None) -> None:
    found = name_problem(name, 20)
    assert (found is None) if problem is None else (found is not None and problem in found)
