"""DynamoDB data access: `JobStore`, every read and write of the tether table.

Callers speak the domain: a method per thing that happens (`create_job`, `transition_job`,
`record_generation`, `supersede_generation`, `end_generation`, `store_heartbeat`,
`record_checkpoints`, `store_credentials`, `record_supervised`, `record_spend`,
`record_incident`, `record_host_failure`, …), never a dict of attribute names. The items, keys,
indexes and the codec between items and records are `functions/adapters/table.py`.

`JobStore` is the one class callers hold; its methods live by concern in `job_records.py`
(jobs and their timeline), `generation_records.py` (generations, heartbeats, checkpoints,
credentials: the conditions that only the current generation writes),
`supervision_records.py` (spend only upwards, incidents, one blame per failure, sightings),
`measure_records.py` (pace and start-up learned per job name) and `bulk_reads.py` (the
monitor's read of every active job's generations in pages).
"""

from __future__ import annotations

from functions.adapters.bulk_reads import BulkReads, GenerationReads
from functions.adapters.generation_records import GenerationRecords
from functions.adapters.job_records import (
    ActiveJobs,
    IdempotencyConflict,
    JobPage,
    JobRecords,
    JobView,
    StateConflict,
)
from functions.adapters.measure_records import MeasureRecords
from functions.adapters.supervision_records import SupervisionRecords

__all__ = [
    "ActiveJobs",
    "GenerationReads",
    "IdempotencyConflict",
    "JobPage",
    "JobStore",
    "JobView",
    "StateConflict",
]


class JobStore(JobRecords, GenerationRecords, SupervisionRecords, MeasureRecords, BulkReads):
    """Every read and write of the tether table. `client=None` builds a default client."""
