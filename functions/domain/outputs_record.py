"""The control plane's record of a job's outputs (docs/architecture.md#invariant-10). Pure.

Recording rule (`outputs_to_record`), applied to an authenticated, stored heartbeat: the
outputs a heartbeat reports are recorded, on the generation's stored heartbeat, only when the
heartbeat comes from the job's current generation, the outputs are that generation's own, and
their manifest key is where the layout puts them (`storage_layout.outputs_manifest_key`). The
sha256 of the manifest's bytes is required on the wire (the agent hashed what it sent), as for
recorded checkpoints. Anything else is dropped: a job whose spec names `outputs` then cannot
end FINISHED (`health._finished`) until a heartbeat carries outputs that pass.
"""

from __future__ import annotations

from functions.domain.heartbeat_contract import HeartbeatRequest, OutputsRef
from functions.domain.job import Generation, Job
from functions.domain.storage_layout import outputs_manifest_key


def outputs_to_record(
    job: Job, generation: Generation, request: HeartbeatRequest
) -> OutputsRef | None:
    """The outputs this heartbeat records, or None (the module docstring)."""
    ref = request.outputs
    current = (
        generation.is_current
        and generation.generation == job.current_generation
        and request.generation == generation.generation
        and request.job_id == job.job_id
    )
    if not current or ref is None or ref.generation != request.generation:
        return None
    if ref.manifest_key != outputs_manifest_key(job.job_id, ref.generation):
        return None
    return ref
