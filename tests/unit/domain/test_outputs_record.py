"""The outputs recording rule (functions/domain/outputs_record.py): which heartbeat's outputs
the control plane records, and the job spec's `outputs` section."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.heartbeat_contract import HeartbeatRequest, OutputsRef
from functions.domain.job import Generation, Job, JobState, new_job
from functions.domain.jobspec import SpecError, parse_job
from functions.domain.outputs_record import outputs_to_record
from tests.integration.api.helpers import SPEC, heartbeat_body

JOB = "tiny-cpu-0000abcd"


def outputs(generation: int = 2, **over: Any) -> OutputsRef:
    found: dict[str, Any] = {
        "generation": generation,
        "manifest_key": f"jobs/{JOB}/g{generation}/outputs/manifest.json",
        "manifest_sha256": "b" * 64,
        "files": 1,
        "bytes": 5,
    }
    return OutputsRef.model_validate({**found, **over})


def job(current: int = 2) -> Job:
    found, _ = new_job(parse_job(SPEC), job_id=JOB, now=1.0, submitted_by="me")
    return found.model_copy(update={"state": JobState.RUNNING, "current_generation": current})


def gen(number: int = 2, *, is_current: bool = True) -> Generation:
    return Generation(job_id=JOB, generation=number, token_hash="h", is_current=is_current)


def request(generation: int = 2, out: OutputsRef | None = None) -> HeartbeatRequest:
    body = heartbeat_body(JOB, generation=generation, phase="finished", exit_code=0)
    body["outputs"] = out.model_dump(mode="json") if out else None
    return HeartbeatRequest.model_validate(body)


def test_the_current_generations_own_outputs_are_recorded() -> None:
    sent = outputs()
    assert outputs_to_record(job(), gen(), request(out=sent)) == sent


def test_a_heartbeat_without_outputs_records_none() -> None:
    assert outputs_to_record(job(), gen(), request()) is None


@pytest.mark.parametrize(
    ("what", "the_job", "the_gen", "sent"),
    [
        ("a superseded generation", job(current=3), gen(2, is_current=False), outputs()),
        ("another generation's outputs", job(), gen(), outputs(1)),
        (
            "outputs named outside the layout",
            job(),
            gen(),
            outputs(manifest_key=f"jobs/{JOB}/g2/checkpoints/manifest.json"),
        ),
        (
            "another job's outputs",
            job(),
            gen(),
            outputs(manifest_key="jobs/other-0000abcd/g2/outputs/manifest.json"),
        ),
    ],
)
def test_outputs_are_not_recorded_from(
    what: str, the_job: Job, the_gen: Generation, sent: OutputsRef
) -> None:
    assert outputs_to_record(the_job, the_gen, request(out=sent)) is None, what


def test_outputs_ref_needs_the_manifest_sha256() -> None:
    with pytest.raises(ValueError, match="manifest_sha256"):
        outputs(manifest_sha256=None)


def test_the_outputs_section_defaults_to_workspace_outputs() -> None:
    assert parse_job(SPEC).outputs is None
    spec = parse_job({**parse_job(SPEC).model_dump(mode="json"), "outputs": {}})
    assert spec.outputs is not None and spec.outputs.dir == "/workspace/outputs"


@pytest.mark.parametrize(
    ("outputs_dir", "says"),
    [
        ("outputs", "must be an absolute path"),
        ("/workspace/checkpoints", "must be apart from checkpoint.dir"),
        ("/workspace/checkpoints/final", "must be apart from checkpoint.dir"),
        ("/workspace", "must be apart from checkpoint.dir"),
    ],
)
def test_a_bad_outputs_dir_names_the_field(outputs_dir: str, says: str) -> None:
    document = {**parse_job(SPEC).model_dump(mode="json"), "outputs": {"dir": outputs_dir}}
    with pytest.raises(SpecError) as raised:
        parse_job(document)
    assert says in str(raised.value)
    assert "outputs" in str(raised.value)
