"""Monitor shards (docs/architecture.md#shards): the fleet split by a hash of the job id across
schedules, each run bounded by its shard's jobs and instances. A shard reads, judges and marks
supervised only its own jobs, lists only its own label ranges, sweeps only its own orphans; a
failing shard extends no other shard's leases, and a listing filter that does not select what it
should is caught, never read as a fleet of dead hosts."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from functions.adapters.vast import VastClient, VastError
from functions.domain.labels import instance_label, label_slot
from functions.domain.shards import Shard
from functions.monitor import service, vast_reads
from tests.integration.monitor.test_monitor_at_scale import World, world

JOBS = 40
SHARDS = 4


@pytest.fixture
def fleet() -> Iterator[World]:
    yield from world(JOBS)


def supervised_at(w: World, job_id: str) -> float | None:
    generation = w.store.get_generation(job_id, 1)
    assert generation is not None
    return generation.supervised_at


def owned(shard: Shard) -> list[str]:
    return [f"bench-{i:05d}" for i in range(JOBS) if shard.owns_job(f"bench-{i:05d}")]


def test_every_job_belongs_to_exactly_one_shard() -> None:
    jobs = [f"bench-{i:05d}" for i in range(JOBS)]
    shards = [Shard(k, SHARDS) for k in range(SHARDS)]
    assert sorted(j for s in shards for j in owned(s)) == sorted(jobs)
    assert all(owned(s) for s in shards)  # the hash spreads 40 jobs over every shard


def test_a_shard_judges_and_renews_only_its_own_jobs(fleet: World) -> None:
    shard = Shard(1, SHARDS)
    mine = owned(shard)

    report = fleet.run(shard)
    batch_reads = fleet.meter.calls["dynamodb.BatchGetItem"]  # the run's, not the checks' below

    assert report.jobs == report.supervised == len(mine)
    assert report.shard == "1/4"
    for i in range(JOBS):
        job_id = f"bench-{i:05d}"
        assert (supervised_at(fleet, job_id) is not None) == (job_id in mine), job_id
    # Only the shard's generations are read; only its label ranges are listed.
    assert batch_reads == 1
    lows = {
        parse_qs(urlsplit(url).query)["select_filters"][0]
        for _, url in fleet.vast_sim.request_log
        if "/v1/instances" in url
    }
    assert len(lows) == 2  # its slots (one chain: a small fleet) and the unslotted labels
    assert report.instances == len(mine)


def test_a_failing_shard_extends_no_lease_of_another(fleet: World, monkeypatch) -> None:
    """Shard 0's runs fail (its table reads raise) while shard 1 runs on: shard 0's jobs keep
    the `supervised_at` they had, so their heartbeats stop renewing leases, and their hosts stop
    themselves within the lease; shard 1's jobs are renewed every run."""
    failing, healthy = Shard(0, SHARDS), Shard(1, SHARDS)
    for k in range(SHARDS):
        fleet.run(Shard(k, SHARDS))
    before = {j: supervised_at(fleet, j) for j in owned(failing)}
    fleet.clock.now += 60
    real_read = type(fleet.store).read_generations

    def broken(store, jobs, **kwargs):
        if any(failing.owns_job(j.job_id) for j in jobs):
            raise RuntimeError("shard 0's reads fail")
        return real_read(store, jobs, **kwargs)

    monkeypatch.setattr(type(fleet.store), "read_generations", broken)
    with pytest.raises(RuntimeError):
        fleet.run(failing)
    report = fleet.run(healthy)

    assert report.supervised == len(owned(healthy))
    assert {j: supervised_at(fleet, j) for j in owned(failing)} == before  # not extended
    assert all(supervised_at(fleet, j) == fleet.clock() for j in owned(healthy))


def test_orphans_are_swept_by_their_own_shard_only(fleet: World) -> None:
    ghost = next(
        f"ghost-{n:08x}" for n in range(100) if Shard(2, SHARDS).owns_job(f"ghost-{n:08x}")
    )
    vast = fleet.deps().vast()
    offer = sorted(fleet.vast_sim.offers(), key=lambda o: o["id"])[-1]
    orphan = vast.rent(
        int(offer["id"]), image="x", disk_gb=10, label=instance_label(ghost, 1), env={},
        onstart="true",
    ).instance_id  # fmt: skip
    fleet.clock.now += 120  # older than the grace

    others = [fleet.run(Shard(k, SHARDS)).orphans_destroyed for k in (0, 1, 3)]
    assert others == [0, 0, 0] and fleet.vast_sim.instance(orphan) is not None
    assert fleet.run(Shard(2, SHARDS)).orphans_destroyed == 1
    assert fleet.vast_sim.instance(orphan) is None


def test_an_instance_labelled_before_slots_is_kept_by_its_jobs_shard(fleet: World) -> None:
    """Hosts rented before the label had a slot are listed by every shard (their own range) and
    judged by the one whose job it is: healthy, not a missing host."""
    job_id = "bench-00003"
    generation = fleet.store.get_generation(job_id, 1)
    assert generation is not None and generation.instance_id is not None
    fleet.vast_sim.garble(generation.instance_id, label=f"tether:{job_id}:g1")
    shard = Shard(next(k for k in range(SHARDS) if Shard(k, SHARDS).owns_job(job_id)), SHARDS)

    report = fleet.run(shard)

    assert report.verdicts.get("dead", 0) == sum(
        1 for j in owned(shard) if int(j.split("-")[1]) % 100 == 99
    )
    assert supervised_at(fleet, job_id) == fleet.clock()
    assert report.instances == len(owned(shard))


def test_a_known_host_the_filter_missed_is_looked_up_not_taken_for_dead(fleet: World) -> None:
    """A host whose label no longer falls in its shard's ranges (changed by hand, or a filter
    Vast applies otherwise than assumed) is found by id; a host Vast destroyed is gone."""
    relabelled = fleet.store.get_generation("bench-00004", 1)
    destroyed = fleet.store.get_generation("bench-00005", 1)
    assert relabelled is not None and destroyed is not None
    fleet.vast_sim.garble(relabelled.instance_id or 0, label="renamed by hand")
    fleet.deps().vast().destroy_instance(destroyed.instance_id or 0)

    report = service.run_monitor(fleet.deps())

    shows = [u for m, u in fleet.vast_sim.request_log if m == "GET" and "/v0/instances/" in u]
    assert len(shows) == 2  # the two known hosts the listing did not show
    assert report.verdicts.get("dead") == 1  # bench-00005 only: its host is gone
    assert supervised_at(fleet, "bench-00004") == fleet.clock()


def test_a_filter_that_misses_many_known_hosts_leaves_the_listing_unread(
    fleet: World, monkeypatch
) -> None:
    """More known hosts missing than are looked up: the listing is not trusted this run (no
    instance rule, no orphan sweep), never a fleet of dead verdicts."""
    monkeypatch.setattr(vast_reads, "MISSING_CHECKS", 3)
    for i in range(10):
        generation = fleet.store.get_generation(f"bench-{i:05d}", 1)
        assert generation is not None
        fleet.vast_sim.garble(generation.instance_id or 0, label=f"elsewhere {i}")

    report = service.run_monitor(fleet.deps())

    assert report.instances is None  # counted as VastListFailed
    assert "dead" not in report.verdicts
    assert report.supervised == JOBS  # spend, budget and heartbeats are still judged


def test_a_vast_that_refuses_the_label_filter_is_listed_whole(fleet: World, monkeypatch) -> None:
    real = VastClient.list_instances

    def refusing(self, *, label_range=None, label=None):
        if label_range is not None:
            raise VastError("unknown filter", status=400, code="invalid_args")
        return real(self, label_range=label_range, label=label)

    monkeypatch.setattr(VastClient, "list_instances", refusing)
    report = service.run_monitor(fleet.deps())
    assert report.instances == JOBS and report.verdicts.get("healthy") == JOBS


def test_slots_spread_job_ids_that_share_a_name() -> None:
    slots = {label_slot(f"sweep-lr-{n:08x}") for n in range(200)}
    assert slots == set(range(16))
