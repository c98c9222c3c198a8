"""A host killed in the middle of a checkpoint transfer, end to end on one local stack: during
an upload (the half-written checkpoint is never restored) and during a restore (the next host
restores the same checkpoint). Asserted through stored state: DynamoDB (generations and their
heartbeats), the S3 stand-in's checkpoint directories and the Vast simulator's ledger."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from functions.adapters.store import JobStore
from functions.domain.job import Generation
from tether_cli.local_ship import SHIPPER
from tether_local.demo import MONITOR_INTERVAL_S, DemoSummary, demo_stack_config, run_scenario
from tether_local.stack import R2_BUCKET, LocalStack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(demo_stack_config(tmp_path_factory.mktemp("killed"))) as stack:
        yield stack


def _assert_sound(summary: DemoSummary) -> None:
    failed = {k: summary.invariant_details[k] for k, ok in summary.invariants.items() if not ok}
    assert not failed, failed
    assert summary.scenario_checks and all(summary.scenario_checks.values()), summary
    assert summary.final_state == "FINISHED", summary
    # the final weights equal an uninterrupted run's, bit for bit
    assert summary.identical_to_uninterrupted and summary.compared_step == 200


def _generations(stack: LocalStack, job_id: str) -> list[Generation]:
    return JobStore(stack.table_name()).list_generations(job_id)


def _checkpoint_dirs(stack: LocalStack, job_id: str, generation: int) -> dict[int, Path]:
    base = stack.root / "s3" / R2_BUCKET / "jobs" / job_id / f"g{generation}" / "checkpoints"
    return {int(d.name): d for d in base.glob("*")}


def _billed_one_at_a_time(stack: LocalStack, instance_ids: list[int]) -> None:
    """The ledger: each instance's bill closed before the next one's opened
    (docs/architecture.md#invariant-1 allows one monitor interval of overlap; invariant 1's slack on
    top)."""
    ledgers = sorted((stack.vast.ledger(i) for i in instance_ids), key=lambda led: led.opened_at)
    assert all(led.closed_at is not None for led in ledgers), ledgers
    for before, after in itertools.pairwise(ledgers):
        assert before.closed_at is not None
        assert before.closed_at - after.opened_at <= MONITOR_INTERVAL_S + 2.0, (before, after)


def test_killed_during_upload_restores_the_previous_complete_checkpoint(
    demo_stack: LocalStack,
) -> None:
    summary = run_scenario("killed-during-upload", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert summary.scenario_checks == {
        "killed_mid_upload": True,
        "restored_last_complete_checkpoint": True,
    }
    g1, g2 = _generations(demo_stack, summary.job_id)
    assert g2.heartbeat is not None and g2.heartbeat.restored_checkpoint is not None
    restored = g2.heartbeat.restored_checkpoint
    assert restored.generation == 1
    assert restored.manifest_key.startswith(f"jobs/{summary.job_id}/g1/checkpoints/")
    # nothing g1 started after the restored checkpoint ever became complete
    g1_dirs = _checkpoint_dirs(demo_stack, summary.job_id, 1)
    assert not [
        d for s, d in g1_dirs.items() if s > restored.step and (d / "manifest.json").exists()
    ]
    assert g1.instance_id is not None and g2.instance_id is not None
    _billed_one_at_a_time(demo_stack, [g1.instance_id, g2.instance_id])


def test_killed_during_restore_the_third_generation_restores_and_finishes(
    demo_stack: LocalStack,
) -> None:
    summary = run_scenario("killed-during-restore", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert summary.scenario_checks == {
        "killed_mid_restore": True,
        "third_generation_restored": True,
    }
    g1, g2, g3 = _generations(demo_stack, summary.job_id)
    # g2 never got past restoring: it never reported a restored checkpoint nor a training step
    assert g2.heartbeat is None or (
        g2.heartbeat.restored_checkpoint is None and g2.heartbeat.phase != "training"
    )
    assert not _checkpoint_dirs(demo_stack, summary.job_id, 2)  # it uploaded nothing
    assert g3.heartbeat is not None and g3.heartbeat.restored_checkpoint is not None
    assert g3.heartbeat.restored_checkpoint.generation == 1
    ids = [g.instance_id for g in (g1, g2, g3)]
    assert None not in ids
    _billed_one_at_a_time(demo_stack, [i for i in ids if i is not None])
