"""Job API behaviour under moto: submit, idempotency, list, get, cancel."""

from __future__ import annotations

import pytest

from functions.adapters import job_records
from functions.domain.job import JobState, TimelineEvent
from functions.domain.reconcile import Observation
from tests.integration.api.helpers import running_job, spec, submit

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def test_submit_stores_a_pending_job_and_starts_its_provision_transition(api):
    reply = api.jobs("POST", "/jobs", body=spec())
    assert reply.status == 201
    job = reply.body
    assert job["state"] == "PENDING"
    assert job["job_id"].startswith("tiny-cpu-")
    assert reply.headers["Location"] == f"/jobs/{job['job_id']}"
    assert job["submitted_by"] == "arn:aws:iam::123456789012:user/alice"
    assert [e["kind"] for e in job["timeline"]] == ["submitted"]
    assert api.executions() == [f"{job['job_id']}-provision-g1-a1"]
    stored = api.store.get_job(job["job_id"])
    assert stored is not None and stored.state == JobState.PENDING
    assert stored.spec.name == "tiny-cpu"


def test_submit_records_the_code_named_by_git(api):
    code = {"git": "https://github.com/you/finetune.git", "commit": "3f1c" + "0" * 36}
    reply = api.jobs("POST", "/jobs", body=spec(code=code))
    assert reply.status == 201, reply.body
    assert reply.body["spec"]["code"] == code
    stored = api.store.get_job(reply.body["job_id"])
    assert stored is not None and stored.spec.code is not None
    assert (stored.spec.code.git, stored.spec.code.commit) == (code["git"], code["commit"])


def test_a_retried_submit_with_the_same_idempotency_key_creates_one_job(api):
    headers = {"Idempotency-Key": "retry-1"}
    first = api.jobs("POST", "/jobs", body=spec(), headers=headers)
    second = api.jobs("POST", "/jobs", body=spec(), headers=headers)
    assert first.status == second.status == 201
    assert second.body["job_id"] == first.body["job_id"]
    assert second.headers.get("Idempotent-Replayed") == "true"
    listed = api.jobs("GET", "/jobs").body["jobs"]
    assert [j["job_id"] for j in listed] == [first.body["job_id"]]
    assert api.executions() == [f"{first.body['job_id']}-provision-g1-a1"]


def test_an_idempotency_key_reused_with_another_spec_is_a_409_and_stores_nothing(api):
    api.jobs("POST", "/jobs", body=spec(), headers={"Idempotency-Key": "k"})
    before = api.items()
    reply = api.jobs("POST", "/jobs", body=spec(budget_usd=2.0), headers={"Idempotency-Key": "k"})
    assert reply.status == 409
    assert reply.body["details"][0]["path"] == "header.idempotency-key"
    assert api.items() == before


def test_without_a_key_two_submits_are_two_jobs(api):
    assert submit(api) != submit(api)


def test_list_is_newest_first_and_paginates_without_gaps_or_repeats(api):
    ids = []
    for _ in range(5):
        ids.append(submit(api))
        api.clock.now += 10
    seen, token, pages = [], None, 0
    while True:
        query = {"limit": "2"} | ({"next": token} if token else {})
        page = api.jobs("GET", "/jobs", query=query)
        assert page.status == 200
        assert len(page.body["jobs"]) <= 2
        seen += [j["job_id"] for j in page.body["jobs"]]
        pages += 1
        token = page.body["next"]
        if token is None:
            break
    assert seen == list(reversed(ids))
    assert pages == 3


def test_a_state_rare_in_a_long_history_comes_in_bounded_requests_none_missed(api, monkeypatch):
    """A state filter reads at most LIST_QUERIES × LIST_READ_ITEMS jobs a request: with the one
    running job the oldest of 15, the first pages come back empty with a token to go on from,
    instead of one request reading the whole history."""
    monkeypatch.setattr(job_records, "LIST_QUERIES", 2)
    monkeypatch.setattr(job_records, "LIST_READ_ITEMS", 3)
    running = running_job(api)
    for _ in range(14):
        api.clock.now += 10
        submit(api)
    queries: list[str] = []
    api.store.client.meta.events.register(
        "provide-client-params.dynamodb.Query", lambda params, **_: queries.append("q")
    )

    found, token, requests = [], None, []
    while True:
        before = len(queries)
        page = api.store.list_jobs(state=JobState.RUNNING, limit=5, token=token)
        requests.append((len(page.jobs), len(queries) - before))
        found += [j.job_id for j in page.jobs]
        token = page.next_token
        if token is None:
            break

    assert found == [running]
    assert requests[:2] == [(0, 2), (0, 2)]  # 6 of the 15 jobs read each, none running
    assert all(calls <= 2 for _, calls in requests)


def test_a_filtered_page_cut_inside_a_read_goes_on_after_its_last_job(api):
    ids = []
    for _ in range(7):
        api.clock.now += 10
        ids.append(submit(api))
    seen, token = [], None
    for _ in range(3):
        page = api.store.list_jobs(state=JobState.PENDING, limit=3, token=token)
        assert len(page.jobs) <= 3
        seen += [j.job_id for j in page.jobs]
        token = page.next_token
    assert seen == list(reversed(ids))
    assert token is None  # the third page held the last job


def test_list_filters_by_state(api):
    pending = submit(api)
    running = running_job(api)
    cancelled = submit(api)
    api.jobs("POST", f"/jobs/{cancelled}/cancel")
    api.store.transition_job(
        cancelled,
        JobState.CANCELLED,
        expected=[JobState.STOPPING],
        now=api.clock.now,
        event=TimelineEvent(job_id=cancelled, at=api.clock.now, kind="stopped", message="x"),
    )

    def ids(state: str) -> list[str]:
        reply = api.jobs("GET", "/jobs", query={"state": state})
        assert reply.status == 200
        return [j["job_id"] for j in reply.body["jobs"]]

    assert ids("PENDING") == [pending]
    assert ids("running") == [running]
    assert ids("CANCELLED") == [cancelled]
    assert ids("FAILED") == []


def test_terminal_jobs_leave_the_active_index(api):
    job_id = submit(api)
    assert [j.job_id for j in api.store.list_active_jobs()] == [job_id]
    api.jobs("POST", f"/jobs/{job_id}/cancel")
    assert [j.job_id for j in api.store.list_active_jobs()] == [job_id]  # STOPPING is active
    api.store.transition_job(
        job_id,
        JobState.CANCELLED,
        expected=[JobState.STOPPING],
        now=api.clock.now,
        event=TimelineEvent(job_id=job_id, at=api.clock.now, kind="stopped", message="x"),
    )
    assert api.store.list_active_jobs() == []
    raw = api.store.client.get_item(
        TableName=api.store.table_name, Key={"pk": {"S": f"JOB#{job_id}"}, "sk": {"S": "JOB"}}
    )["Item"]
    assert "active_pk" not in raw


def test_get_shows_host_spend_checkpoint_and_timeline(api):
    job_id = running_job(api, usd_per_hour=0.4)
    from tests.integration.api.helpers import auth, heartbeat_body

    assert (
        api.heartbeat(
            "POST", "/agent/heartbeat", body=heartbeat_body(job_id), headers=auth()
        ).status
        == 200
    )
    reply = api.jobs("GET", f"/jobs/{job_id}")
    assert reply.status == 200
    job = reply.body
    assert job["state"] == "RUNNING"
    assert job["host"]["instance_id"] == 1001
    assert job["host"]["usd_per_hour"] == 0.4
    assert job["host"]["last_heartbeat"]["step"] == 120
    assert "token_hash" not in job["host"] and "credentials" not in job["host"]
    assert job["spend"] == {
        "spent_usd": 0.0,
        "budget_usd": 1.0,
        "remaining_usd": 1.0,
        "fraction_used": 0.0,
    }
    assert job["last_checkpoint"] == {"step": 100, "generation": 1, "manifest_key": "m.json"}
    assert [e["kind"] for e in job["timeline"]] == ["submitted", "running"]


def test_the_detail_shows_the_spend_as_last_measured_and_the_list_the_job_items(api):
    """The monitor keeps the exact spend on the current generation every run, the job item's
    only in steps: the detail reads the generations, the list only the job items."""
    job_id = running_job(api, usd_per_hour=0.4)
    seen = Observation(spend_usd=0.25, job_spent_usd=0.25)
    assert api.store.record_supervised(job_id, 1, seen, at=api.clock.now)

    detail = api.jobs("GET", f"/jobs/{job_id}").body
    listed = api.jobs("GET", "/jobs").body["jobs"]

    assert detail["spent_usd"] == 0.25
    assert detail["spend"] == {
        "spent_usd": 0.25,
        "budget_usd": 1.0,
        "remaining_usd": 0.75,
        "fraction_used": 0.25,
    }
    assert [j["spent_usd"] for j in listed if j["job_id"] == job_id] == [0.0]


def test_get_unknown_job_is_404(api):
    reply = api.jobs("GET", "/jobs/nope-00000000")
    assert reply.status == 404
    assert reply.body["error"] == "not_found"


def test_cancel_is_idempotent_and_starts_one_stop_transition(api):
    job_id = running_job(api)
    first = api.jobs("POST", f"/jobs/{job_id}/cancel")
    second = api.jobs("POST", f"/jobs/{job_id}/cancel")
    assert first.status == second.status == 202
    assert first.body["state"] == second.body["state"] == "STOPPING"
    assert first.body["stop_reason"] == "cancelled"
    assert [e["kind"] for e in second.body["timeline"]].count("cancel_requested") == 1
    assert f"{job_id}-stop-a1" in api.executions()
    assert api.executions().count(f"{job_id}-stop-a1") == 1


def test_cancel_of_a_finished_job_is_409_and_changes_nothing(api):
    job_id = submit(api)
    api.jobs("POST", f"/jobs/{job_id}/cancel")
    api.store.transition_job(
        job_id,
        JobState.FINISHED,
        expected=[JobState.STOPPING],
        now=api.clock.now,
        event=TimelineEvent(job_id=job_id, at=api.clock.now, kind="finished", message="done"),
    )
    before = api.items()
    reply = api.jobs("POST", f"/jobs/{job_id}/cancel")
    assert reply.status == 409
    assert reply.body["error"] == "conflict"
    assert "FINISHED" in reply.body["message"]
    assert api.items() == before


def test_cancel_of_an_unknown_job_is_404(api):
    assert api.jobs("POST", "/jobs/ghost-12345678/cancel").status == 404
