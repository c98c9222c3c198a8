"""The monitor judges a generation by its heartbeat item (functions/domain/heartbeat_item.py)
where it has one, and by its generation item where it was stored before heartbeat items."""

from __future__ import annotations

from typing import Any

from functions.adapters.table import deserialize, generation_key, heartbeat_key, serialize
from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.job import Heartbeat
from tests.integration.supervision_harness import Supervised


def raw(sup: Supervised, key: dict[str, str]) -> dict[str, Any] | None:
    reply = sup.store.client.get_item(
        TableName=sup.store.table_name, Key=serialize(key), ConsistentRead=True
    )
    return deserialize(reply["Item"]) if "Item" in reply else None


def test_the_monitor_reads_the_heartbeat_item(sup: Supervised) -> None:
    job, _ = sup.provisioned()
    sup.agent_beat(job.job_id, 1, step=5)
    sup.clock.advance(60)
    sup.agent_beat(job.job_id, 1, step=9)  # hot parts only: the heartbeat item alone
    generation_item = raw(sup, generation_key(job.job_id, 1))
    assert generation_item is not None and generation_item["heartbeat"]["step"] == 5

    report = sup.monitor()

    assert report["verdicts"] == {"healthy": 1}
    observed = sup.store.get_generation(job.job_id, 1)
    assert observed is not None and observed.progress_step == 9

    sup.clock.advance(120)
    hung = {"available": True, "responsive": False, "unresponsive_s": 400}
    sup.agent_beat(job.job_id, 1, step=9, gpu=hung)
    assert raw(sup, generation_key(job.job_id, 1))["heartbeat"]["gpu"]["responsive"] is True  # type: ignore[index]

    assert sup.monitor()["verdicts"] == {"hung": 1}


def test_a_generation_from_before_heartbeat_items_is_judged_then_moves_over(
    sup: Supervised,
) -> None:
    job, generation = sup.provisioned()
    sup.clock.advance(60)
    old_beat = Heartbeat(
        at=sup.clock(),
        agent_time=sup.clock(),
        phase="training",
        step=5,
        gpu=GpuProbe(available=True, utilization_pct=90.0),
    )
    # As an earlier release stored it: the heartbeat on the generation item, no heartbeat item.
    sup.store.put_generation(generation.model_copy(update={"heartbeat": old_beat}))
    assert raw(sup, heartbeat_key(job.job_id, 1)) is None

    report = sup.monitor()

    assert report["verdicts"] == {"healthy": 1}
    observed = sup.store.get_generation(job.job_id, 1)
    assert observed is not None and observed.progress_step == 5

    sup.clock.advance(60)
    sup.agent_beat(job.job_id, 1, step=7)
    assert raw(sup, heartbeat_key(job.job_id, 1)) is not None
    assert sup.monitor()["verdicts"] == {"healthy": 1}
    moved = sup.store.get_generation(job.job_id, 1)
    assert moved is not None and moved.heartbeat_item and moved.progress_step == 7
