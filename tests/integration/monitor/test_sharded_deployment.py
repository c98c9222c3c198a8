"""A sharded deployment as synthesized (`monitorShards=2`), deployed on the local AWS and its
schedules fired as EventBridge Scheduler fires them: each schedule's run judges and renews only
its own shard's jobs, and every job is renewed by exactly one of them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from functions.domain.shards import Shard
from infra import names
from infra.synth import synth_template
from tests.integration.conftest import TIME_SCALE
from tests.integration.supervision_harness import Supervised, supervised_stack

SHARDS = 2


@pytest.fixture(scope="module")
def sharded() -> Iterator[Supervised]:
    before = os.environ.get(names.MONITOR_SHARDS_ENV)
    os.environ[names.MONITOR_SHARDS_ENV] = str(SHARDS)  # the synth's and the function's
    try:
        template = synth_template(bundle=False)
        yield from supervised_stack(template, TIME_SCALE)
    finally:
        if before is None:
            os.environ.pop(names.MONITOR_SHARDS_ENV, None)
        else:
            os.environ[names.MONITOR_SHARDS_ENV] = before


def test_each_schedule_renews_only_its_own_shards_jobs(sharded: Supervised) -> None:
    sharded.fresh()
    jobs = [sharded.provisioned()[0].job_id for _ in range(4)]
    owner = {j: next(k for k in range(SHARDS) if Shard(k, SHARDS).owns_job(j)) for j in jobs}
    schedules = sorted(sharded.deployed.schedules, key=lambda s: s.input or "")
    assert len(schedules) == SHARDS

    renewed_by: dict[str, list[int]] = {j: [] for j in jobs}
    for k, schedule in enumerate(schedules):
        sharded.clock.advance(61)
        sharded.aws.fire_schedule(schedule)
        for job_id in jobs:
            generation = sharded.store.get_generation(job_id, 1)
            assert generation is not None
            if generation.supervised_at == sharded.clock():
                renewed_by[job_id].append(k)

    assert renewed_by == {j: [owner[j]] for j in jobs}
