"""`tether status` after a recovery, on the real stack (LocalAws, the Vast simulator): the
monitor finds generation 1 dead, the lifecycle rents generation 2, its agent restores and
trains through the real heartbeat function, and `GET /jobs/{id}` through the real jobs
function says what a user needs: recovered (not the old `dead: …` as the state's reason), the
host's real state (not its record's `provisioning`), step N of M, the pace and the ETA."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra import names
from tests.integration.supervision_harness import Supervised, logical_id_by_handler
from tether_cli.job_status import status_lines
from tether_local.aws.apigw import http_api_event

TOTAL_STEPS = 1000


def job_view(sup: Supervised, job_id: str) -> dict[str, Any]:
    """`GET /jobs/{id}` through the deployed jobs function, signed as a user."""
    arn = sup.deployed.function_arn(logical_id_by_handler(sup.template, names.JOBS_HANDLER))
    event = http_api_event(
        "GET", f"/jobs/{job_id}", iam_arn="arn:aws:iam::123456789012:user/tester"
    )
    reply = sup.aws.invoke(arn, event)
    assert reply["statusCode"] == 200, reply
    view: dict[str, Any] = json.loads(reply["body"])
    return view


def state_line(view: dict[str, Any], now: float) -> str:
    (found,) = [line for line in status_lines(view, now) if line.startswith("state ")]
    return found


def test_after_a_recovery_status_says_recovered_with_the_real_host_state_and_eta(
    sup: Supervised,
) -> None:
    job, first = sup.provisioned(total_steps=TOTAL_STEPS)
    sup.agent_beat(job.job_id, 1, step=130)
    sup.vast.kill(first.instance_id or 0, "offline")
    assert sup.monitor()["verdicts"] == {"dead": 1}
    assert sup.wait_for(f"{job.job_id}-replace-g2-a1")["status"] == "SUCCEEDED"

    # Rented, its agent not heard from yet: recovering, the host provisioning.
    view = job_view(sup, job.job_id)
    stored = sup.store.get_job(job.job_id)
    assert stored is not None and stored.state_reason.startswith("dead: ")  # as the item keeps it
    assert (view["state"], view["state_reason"]) == ("RUNNING", None)
    assert view["last_transition"]["text"] == (
        "recovering from a dead host: a new host is rented, training not resumed yet"
    )
    assert view["host"]["state"] == "provisioning"

    sup.clock.advance(30)
    sup.agent_beat(job.job_id, 2, phase="restoring", step=None)
    assert job_view(sup, job.job_id)["host"]["state"] == "restoring"

    # Restored at step 100; its first step 40 s after the restore began, then 10 minutes of
    # training at 12 steps a minute.
    sup.clock.advance(40)
    first_step_at = sup.clock()
    resumed = {"step": 100, "started_at": first_step_at - 20, "first_step_at": first_step_at}
    sup.agent_beat(job.job_id, 2, step=101, resumed=resumed)
    sup.clock.advance(600)
    sup.agent_beat(job.job_id, 2, step=220, resumed=resumed)

    view = job_view(sup, job.job_id)
    assert view["state_reason"] is None
    assert view["last_transition"] == {"text": "recovered from a dead host", "at": first_step_at}
    assert (view["host"]["generation"], view["host"]["state"]) == (2, "training")
    assert view["host"]["status"] == "provisioning"  # the record's, which nothing moves on
    progress = view["progress"]
    assert (progress["step"], progress["total_steps"]) == (220, TOTAL_STEPS)
    assert progress["pace"]["steps_per_min"] == pytest.approx(12.0)
    assert progress["pace"]["source"] == "this host"
    assert progress["eta_s"] == pytest.approx(780 / 12 * 60)  # 65 min
    assert progress["expected_total_usd"] > view["spend"]["spent_usd"]
    assert view["last_error"]["generation"] == 1
    assert view["last_error"]["text"].startswith("host replaced as dead: ")

    now = sup.clock()
    assert state_line(view, now) == "state     RUNNING, recovered from a dead host 10 min ago"
    lines = status_lines(view, now)
    (progress_line,) = [line for line in lines if line.startswith("progress")]
    assert progress_line.startswith(
        "progress  step 220 of 1000 (22%), 12.0 steps/min measured on this host, ETA 65 min"
    )
    (host_line,) = [line for line in lines if line.startswith("host ")]
    assert host_line.endswith("(training)")

    # Silent past the job's heartbeat timeout: lost.
    sup.clock.advance(job.spec.policy.heartbeat_timeout_s + 1)
    assert job_view(sup, job.job_id)["host"]["state"] == "lost"
