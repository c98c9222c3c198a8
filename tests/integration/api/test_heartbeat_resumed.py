"""The agent's `resumed` report through the real heartbeat handler on moto: stored on the
generation on the server's clock, once; a `resumed` timeline event with the lower bound of the
work lost; recovery (`RecoveryToTrainingS`) measured to the first step, not the process start."""

from __future__ import annotations

from typing import Any

from functions.domain.agent_token import hash_token
from functions.domain.job import Generation, JobState, TimelineEvent
from tests.integration.api.helpers import TOKEN, auth, heartbeat_body, replace, running_job
from tests.integration.api.test_job_events_and_measures import emitted

G1_TOKEN = "tok-" + "1" * 40
AGENT_BEHIND_S = 1_000.0  # the agent's clock runs this far behind the server's
RESTORED = {"step": 100, "generation": 1, "manifest_key": "m-100.json"}


def replaced_by_g2(api: Any, *, g1_step: int, exit_code: int | None = None) -> str:
    """Generation 1 reports `g1_step` and dies; the monitor starts a replace 5 s later; the
    lifecycle rents generation 2 (holding TOKEN)."""
    job_id = running_job(api, token=G1_TOKEN)
    body = heartbeat_body(job_id, 1, step=g1_step, exit_code=exit_code)
    assert (
        api.heartbeat("POST", "/agent/heartbeat", body=body, headers=auth(G1_TOKEN)).status == 200
    )
    api.clock.now += 5
    api.store.record_incident(job_id, at=api.clock.now, reason="dead: offline", generation=1)
    replace(api, job_id, 1)
    now = api.clock.now
    assert api.store.record_generation(
        Generation(
            job_id=job_id,
            generation=2,
            status="running",
            token_hash=hash_token(TOKEN),
            instance_id=1002,
            created_at=now,
            supervised_at=now,
        ),
        expected=[JobState.REPLACING],
        now=now,
        event=TimelineEvent(job_id=job_id, at=now, kind="running", message="host up"),
    )
    return job_id


def agent_clock(api: Any, seconds_ago: float = 0.0) -> float:
    now: float = api.clock.now
    return now - AGENT_BEHIND_S - seconds_ago


def beat_g2(api: Any, job_id: str, resumed: dict[str, Any], step: int = 100) -> Any:
    body = heartbeat_body(
        job_id, 2, step=step, last_checkpoint=RESTORED, restored_checkpoint=RESTORED,
        resumed=resumed, agent_time=agent_clock(api),
    )  # fmt: skip
    return api.heartbeat("POST", "/agent/heartbeat", body=body, headers=auth())


def resumed_events(api: Any, job_id: str) -> list[TimelineEvent]:
    view = api.store.get_job_view(job_id, max_events=100)
    return [e for e in view.events if e.kind == "resumed"]


def test_the_first_step_is_stored_once_and_recovery_ends_there(api, capsys):
    job_id = replaced_by_g2(api, g1_step=117)
    incident_at = api.clock.now
    capsys.readouterr()

    # 20 s after the replace began the process has started (8 s ago, agent clock) but not stepped
    api.clock.now += 20
    started = {"step": 100, "started_at": agent_clock(api, 8)}
    assert beat_g2(api, job_id, started).status == 200
    stored = api.store.get_generation(job_id, 2)
    assert (stored.resumed_step, stored.resumed_started_at) == (100, incident_at + 12)
    assert stored.first_step_at is None
    assert "RecoveryToTrainingS" not in emitted(capsys)  # the process start is not a recovery
    assert resumed_events(api, job_id) == []

    # 10 s later: the first step came 16.5 s after the start (agent clock 1.5 s ago)
    api.clock.now += 10
    stepped = {**started, "first_step_at": agent_clock(api, 1.5)}
    assert beat_g2(api, job_id, stepped, step=101).status == 200
    stored = api.store.get_generation(job_id, 2)
    assert stored.first_step_at == incident_at + 28.5
    assert stored.resumed_started_at == incident_at + 12  # kept
    assert emitted(capsys)["RecoveryToTrainingS"] == [28.5]
    [event] = resumed_events(api, job_id)
    assert event.message == (
        "generation 2 resumed at step 100; first step 16.5 s after the training process "
        "started, 28.5 s after the replace began; ≥ 17 steps lost (generation 1 last reported "
        "step 117)"
    )
    assert event.data == {
        "resumed_step": 100,
        "first_step_after_start_s": 16.5,
        "lost_steps": 17,
        "lost_steps_lower_bound": True,
        "recovery_s": 28.5,
    }

    # a later report of another first step changes nothing, and says nothing again
    api.clock.now += 10
    later = {**started, "first_step_at": agent_clock(api, 0.5)}
    assert beat_g2(api, job_id, later, step=130).status == 200
    assert api.store.get_generation(job_id, 2).first_step_at == incident_at + 28.5
    assert "RecoveryToTrainingS" not in emitted(capsys)
    assert len(resumed_events(api, job_id)) == 1


def test_lost_work_is_exact_when_the_dead_host_had_already_exited(api):
    job_id = replaced_by_g2(api, g1_step=100, exit_code=1)
    api.clock.now += 20
    resumed = {"step": 100, "started_at": agent_clock(api, 8), "first_step_at": agent_clock(api, 1)}
    assert beat_g2(api, job_id, resumed, step=101).status == 200
    [event] = resumed_events(api, job_id)
    assert event.message.endswith("; no steps lost (generation 1 last reported step 100)")
    assert (event.data["lost_steps"], event.data["lost_steps_lower_bound"]) == (0, False)


def test_a_first_step_before_the_start_is_refused_and_nothing_is_stored(api):
    job_id = replaced_by_g2(api, g1_step=117)
    api.clock.now += 20
    backwards = {
        "step": 100,
        "started_at": agent_clock(api, 1),
        "first_step_at": agent_clock(api, 8),
    }
    reply = beat_g2(api, job_id, backwards)
    assert reply.status == 400
    assert "resumed" in str(reply.body) and "first_step_at is before started_at" in str(reply.body)
    stored = api.store.get_generation(job_id, 2)
    assert stored.heartbeat is None and stored.resumed_step is None
    oversized = {"step": 10**16, "started_at": agent_clock(api)}
    reply = beat_g2(api, job_id, oversized)
    assert reply.status == 400 and "resumed.step" in str(reply.body)
