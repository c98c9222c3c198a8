"""What the API stores of a heartbeat: every field the agent sent, plus the time it arrived."""

from __future__ import annotations

from functions.domain.heartbeat_contract import (
    CheckpointRef,
    GpuProbe,
    HeartbeatRequest,
    OutputsRef,
)
from functions.domain.heartbeat_decision import heartbeat_record


def test_every_field_of_the_request_is_kept() -> None:
    request = HeartbeatRequest(
        job_id="tiny-cpu-0123abcd",
        generation=3,
        phase="failed",
        step=420,
        last_checkpoint=CheckpointRef(step=400, generation=3, manifest_key="k/400/manifest.json"),
        restored_checkpoint=CheckpointRef(step=200, generation=2, manifest_key="k/200/m.json"),
        outputs=OutputsRef(
            generation=3,
            manifest_key="jobs/tiny-cpu-0123abcd/g3/outputs/manifest.json",
            manifest_sha256="a" * 64,
            files=2,
            bytes=10,
        ),
        gpu=GpuProbe(available=True, responsive=False, utilization_pct=3.5, unresponsive_s=61),
        exit_code=137,
        bytes_downloaded=123,
        bytes_uploaded=456,
        agent_time=1_700_000_000.5,
        credentials_expire_at=1_700_003_600.0,
    )
    record = heartbeat_record(request, now=1_700_000_002.0, received_at=1_700_000_001.25)
    assert record.at == 1_700_000_002.0
    assert record.received_at == 1_700_000_001.25  # API Gateway's receipt: orders the writes
    assert record.agent_time == 1_700_000_000.5
    assert record.phase == "failed"
    assert record.step == 420
    assert record.exit_code == 137
    assert record.last_checkpoint == request.last_checkpoint
    assert record.restored_checkpoint == request.restored_checkpoint
    assert record.gpu == request.gpu
    assert (record.bytes_downloaded, record.bytes_uploaded) == (123, 456)
    # Nothing the agent sent is dropped on the way to the table, but what asks for this
    # reply only (newer credentials, the job's secrets, the job itself).
    sent = request.model_dump(
        exclude={"job_id", "generation", "credentials_expire_at", "wants_secrets", "wants_job"}
    )
    assert record.model_dump(exclude={"at", "received_at"}) == sent
