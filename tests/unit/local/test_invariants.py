"""The demo's judges of invariants 2, 6 and 8 (tether_local/demo/invariants.py), on hand-made
evidence: a restore counts only if the control plane recorded it and gave it to that
generation, with the sha256 its manifest still has; each host's keys are scoped to the job
(read) and to its own generation (write); a zombie's late checkpoint is not the job's result."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.job import Generation, new_job
from functions.domain.jobspec import parse_job
from tests.integration.api.helpers import SPEC
from tether_local.demo.invariants import (
    CheckpointFacts,
    Evidence,
    Fault,
    GenerationProgress,
    Incident,
    KeyFacts,
    Recorded,
    Restore,
    hosts_hold_job_scoped_credentials,
    incidents,
    no_bad_checkpoint_restored,
    result_checkpoint,
)

JOB = "tiny-cpu-0000abcd"
SHA = "a" * 64
KEY = f"jobs/{JOB}/g1/checkpoints/000000000100/manifest.json"


def facts(step: int = 100, generation: int = 1, **over: Any) -> CheckpointFacts:
    found: dict[str, Any] = {
        "prefix": f"jobs/{JOB}/g{generation}/checkpoints/{step:012d}/",
        "step": step,
        "generation": generation,
        "has_manifest": True,
        "verified": True,
        "written_at": 10.0,
        "manifest_sha256": SHA,
    }
    return CheckpointFacts(**{**found, **over})


def evidence(**over: Any) -> Evidence:
    job, _ = new_job(parse_job(SPEC), job_id=JOB, now=1.0, submitted_by="me")
    found: dict[str, Any] = {
        "job": job,
        "generations": (
            Generation(job_id=JOB, generation=1, token_hash="h", ended_at=20.0),
            Generation(job_id=JOB, generation=2, token_hash="h"),
        ),
        "ledgers": (),
        "billing_samples": (),
        "checkpoints": (facts(),),
        "restores": (Restore(generation=2, step=100, manifest_key=KEY, manifest_sha256=SHA),),
        "restore_candidates": {
            2: (Recorded(step=100, generation=1, manifest_key=KEY, manifest_sha256=SHA),)
        },
        "host_envs": {},
        "account_secrets": (),
        "bad_input_statuses": {},
        "labels_rented": {},
        "weights_sha256": None,
        "reference_sha256": None,
        "monitor_interval_s": 1.0,
        "ended_at": 30.0,
    }
    return Evidence(**{**found, **over})


def test_a_recorded_verified_restore_holds() -> None:
    check = no_bad_checkpoint_restored(evidence())
    assert check.ok, check.detail


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"restore_candidates": {}}, "never recorded"),
        (
            {
                "restores": (
                    Restore(generation=2, step=100, manifest_key=KEY, manifest_sha256="b" * 64),
                )
            },
            "other than the recorded one",
        ),
        ({"checkpoints": (facts(verified=False),)}, "does not verify"),
        ({"checkpoints": (facts(has_manifest=False),)}, "has no manifest"),
        ({"checkpoints": ()}, "never seen complete"),
        ({"checkpoints": (facts(manifest_sha256="c" * 64),)}, "whose manifest changed"),
        ({"checkpoints": (facts(written_at=25.0),)}, "written after g1 was replaced"),
        (
            {
                "restore_candidates": {
                    2: (
                        Recorded(step=100, generation=1, manifest_key=KEY, manifest_sha256=SHA),
                        Recorded(step=300, generation=2, manifest_key="k", manifest_sha256=SHA),
                    )
                }
            },
            "was given k of g2",
        ),
    ],
)
def test_invariant_2_refuses(over: dict[str, Any], why: str) -> None:
    check = no_bad_checkpoint_restored(evidence(**over))
    assert not check.ok and why in check.detail


def host_env(generation: int = 2) -> dict[str, str]:
    return {
        "TETHER_GENERATION": str(generation),
        "TETHER_S3_PREFIX": f"jobs/{JOB}/",
        "TETHER_S3_ACCESS_KEY_ID": "read",
        "TETHER_S3_CREDENTIALS_EXPIRE_AT": "100",
        "TETHER_S3_WRITE_ACCESS_KEY_ID": "write",
        "TETHER_S3_WRITE_CREDENTIALS_EXPIRE_AT": "100",
    }


def scopes(write_prefix: str = f"jobs/{JOB}/g2/", read: str = "object-read-only") -> Any:
    return {
        "read": KeyFacts(permission=read, prefixes=(f"jobs/{JOB}/",), expires_at=100),
        "write": KeyFacts(permission="object-read-write", prefixes=(write_prefix,), expires_at=100),
    }


def test_invariant_6_holds_for_a_read_key_on_the_job_and_a_write_key_on_its_generation() -> None:
    check = hosts_hold_job_scoped_credentials(
        evidence(host_envs={7: host_env()}, key_scopes=scopes())
    )
    assert check.ok, check.detail


@pytest.mark.parametrize(
    ("env", "key_scopes", "why"),
    [
        (host_env(), scopes(write_prefix=f"jobs/{JOB}/"), "TETHER_S3_WRITE_ACCESS_KEY_ID is"),
        (host_env(), scopes(write_prefix=f"jobs/{JOB}/g1/"), "not object-read-write"),
        (host_env(), scopes(read="object-read-write"), "TETHER_S3_ACCESS_KEY_ID is"),
        (
            {k: v for k, v in host_env().items() if "WRITE_CREDENTIALS_EXPIRE" not in k},
            scopes(),
            "TETHER_S3_WRITE_CREDENTIALS_EXPIRE_AT",
        ),
    ],
)
def test_invariant_6_refuses(env: dict[str, str], key_scopes: Any, why: str) -> None:
    check = hosts_hold_job_scoped_credentials(evidence(host_envs={7: env}, key_scopes=key_scopes))
    assert not check.ok and why in check.detail


def test_a_zombies_late_checkpoint_is_not_the_jobs_result() -> None:
    generations = evidence().generations
    ours = facts(300, 2, written_at=40.0)
    zombie = facts(99_950, 1, written_at=25.0)  # g1 ended at 20
    unverified = facts(500, 2, verified=False)
    assert result_checkpoint([ours, zombie, unverified], generations) == ours


# --- incidents: recovery to the first step, lost work as a lower bound -----------------------


def test_an_incident_is_measured_to_the_first_step_and_its_loss_is_a_lower_bound() -> None:
    faults = [
        Fault(kind="dead", at=100.0, generation=1, step_at_fault=117),
        Fault(kind="dead", at=200.0, generation=2, step_at_fault=230),
    ]
    progress = {
        # g2's process was seen training at 106 s, its first step after the restore came at 114
        2: GenerationProgress(
            generation=2,
            first_training_at=106.0,
            restored_step=100,
            first_step_at=114.0,
            first_step_after_start_s=7.5,
        ),
        # g3 was seen training, but its first step never came
        3: GenerationProgress(generation=3, first_training_at=206.0, restored_step=200),
    }
    found = incidents(faults, [(101.0, "dead"), (201.5, "dead")], progress)
    assert found == [
        Incident(
            kind="dead",
            detected_after_s=1.0,
            resumed_after_s=14.0,
            first_step_after_start_s=7.5,
            lost_steps=17,
            lost_steps_lower_bound=True,
        ),
        Incident(
            kind="dead",
            detected_after_s=1.5,
            resumed_after_s=None,
            first_step_after_start_s=None,
            lost_steps=None,
            lost_steps_lower_bound=True,
        ),
    ]
