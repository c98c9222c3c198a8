"""`BulkReads`: the monitor's read of every active job's generations in pages, not a Query per
job.

A job's generations are numbered 1 … `current_generation` without gaps (a generation is made
current only while the one before it is: `record_generation`), so their keys are known from the
job items the ActiveJobs index already returned, and BatchGetItem reads them 100 keys a call, the
calls in flight together. Chosen over a sparse index on generation items: an index would bill
every heartbeat write (the hottest write of the table) a second time, and over keeping the
current generation's facts on the job item, which sits in two ALL-projection indexes (every
job-item write billed three times). Eventually consistent, like the Query it replaces.

One job's trouble stays that job's: an item that no longer validates fails only its job, and a
batch call that raises falls back to one Query per job of that batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from functions.adapters.heartbeat_items import merged_generation_items
from functions.adapters.pool import map_bounded
from functions.adapters.store_base import StoreBase
from functions.adapters.table import (
    as_generation,
    deserialize,
    generation_key,
    heartbeat_key,
    serialize,
)
from functions.domain.job import Generation, Job

BATCH_GET_KEYS = 100  # the most one BatchGetItem may ask for
BATCH_GET_WORKERS = 8


@dataclass
class GenerationReads:
    """Each job's generations, oldest first; the jobs whose generations could not be read."""

    generations: dict[str, list[Generation]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # job id → why


def generation_keys(jobs: Sequence[Job]) -> list[dict[str, str]]:
    return [
        generation_key(job.job_id, n) for job in jobs for n in range(1, job.current_generation + 1)
    ]


def generation_and_heartbeat_keys(jobs: Sequence[Job]) -> list[dict[str, str]]:
    """Each generation's key followed by its heartbeat item's (functions/domain/
    heartbeat_item.py), so a batch of an even size holds both of a generation."""
    return [
        key
        for job in jobs
        for n in range(1, job.current_generation + 1)
        for key in (generation_key(job.job_id, n), heartbeat_key(job.job_id, n))
    ]


class BulkReads(StoreBase):
    """Reads of many jobs at once (the monitor's)."""

    def read_generations(
        self, jobs: Sequence[Job], *, workers: int | None = None
    ) -> GenerationReads:
        """Every generation of `jobs` (module docstring), in BatchGetItem calls of 100 keys,
        at most `workers` (default `BATCH_GET_WORKERS`) in flight."""
        keys = generation_and_heartbeat_keys(jobs)
        batches = [keys[i : i + BATCH_GET_KEYS] for i in range(0, len(keys), BATCH_GET_KEYS)]
        reads = GenerationReads(generations={job.job_id: [] for job in jobs})
        if not batches:
            return reads
        in_flight = BATCH_GET_WORKERS if workers is None else workers
        replies = map_bounded(self._batch_or_none, batches, workers=in_flight)
        for batch, items in zip(batches, replies, strict=True):
            if items is None:
                self._query_each(batch, reads)
                continue
            for item in merged_generation_items(items):
                _add(item, reads)
        for job_id, found in reads.generations.items():  # a job's keys may span two batches
            unique = {g.generation: g for g in found}
            reads.generations[job_id] = [unique[n] for n in sorted(unique)]
        return reads

    def _batch_or_none(self, keys: list[dict[str, str]]) -> list[dict[str, Any]] | None:
        try:
            return self._batch_get(keys)
        except Exception:
            return None

    def _batch_get(self, keys: list[dict[str, str]]) -> list[dict[str, Any]]:
        request: dict[str, Any] = {self.table_name: {"Keys": [serialize(k) for k in keys]}}
        return [deserialize(i) for i in self._table.batch_get(request)[self.table_name]]

    def _query_each(self, keys: list[dict[str, str]], reads: GenerationReads) -> None:
        for pk in dict.fromkeys(k["pk"] for k in keys):
            job_id = pk.removeprefix("JOB#")
            try:
                items = self._table.query_all(
                    KeyConditionExpression="pk = :pk AND begins_with(sk, :gen)",
                    ExpressionAttributeValues={":pk": {"S": pk}, ":gen": {"S": "GEN#"}},
                )
            except Exception as exc:
                reads.failed[job_id] = f"generations cannot be read: {exc}"[:300]
                continue
            reads.generations[job_id] = []  # the batch may have added nothing; Query has it all
            for item in merged_generation_items(items):
                _add(item, reads)


def _add(item: dict[str, Any], reads: GenerationReads) -> None:
    job_id = str(item.get("pk", "")).removeprefix("JOB#")
    if job_id in reads.failed:
        return
    try:
        generation = as_generation(item)
    except ValueError as exc:  # pydantic's ValidationError: this job alone is not judged
        reads.failed[job_id] = f"generation {item.get('sk')} cannot be read: {exc}"[:300]
        return
    reads.generations.setdefault(job_id, []).append(generation)
