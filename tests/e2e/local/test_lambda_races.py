"""Races the local stack now allows because each Lambda execution environment is a process of
its own: two monitor runs in flight at once, as EventBridge Scheduler starts one every interval
whether or not the last one has ended."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from functions.adapters.store import JobStore
from functions.domain.job import JobState
from tests.e2e.conftest import api, tiny_spec, wait_for
from tether_local.stack import LocalStack

pytestmark = pytest.mark.slow

HOLD = "sleep 600"  # a training command that just runs


class ListingGate:
    """Wraps the Vast simulator: holds each instance listing until `parties` of them are in
    flight at once (then lets every one through), so overlapping monitor runs provably
    overlap. `patience_s` bounds the wait for a broken run; it is not a timing assertion."""

    def __init__(self, handle: Callable[[httpx.Request], httpx.Response], parties: int = 2) -> None:
        self._handle = handle
        self.parties = parties
        self.patience_s = 30.0
        self.in_flight = 0
        self.most_at_once = 0
        self._opened = False
        self._changed = threading.Condition()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method != "GET" or not request.url.path.startswith("/api/v1/instances"):
            return self._handle(request)
        with self._changed:
            self.in_flight += 1
            self.most_at_once = max(self.most_at_once, self.in_flight)
            if self.in_flight >= self.parties:
                self._opened = True
            self._changed.notify_all()
            self._changed.wait_for(lambda: self._opened, timeout=self.patience_s)
        try:
            return self._handle(request)
        finally:
            with self._changed:
                self.in_flight -= 1


def test_overlapping_monitor_runs_overlap_and_rent_once(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = api(stack, "POST", "/jobs", json=tiny_spec(name="overlap", run=HOLD))
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    store = JobStore(stack.table_name())
    assert stack.hosts is not None
    hosts = stack.hosts

    def running() -> Any:
        job = store.get_job(job_id)
        return job is not None and job.state == JobState.RUNNING and hosts.for_job(job_id)

    wait_for("generation 1 running on a host", running, timeout_s=60)
    hosts.destroy(hosts.for_job(job_id)[0].instance_id)  # Vast: offline, the monitor: dead
    gate = ListingGate(stack.vast.handle)
    monkeypatch.setattr(stack.vast, "handle", gate)
    (monitor,) = [s.target_arn for s in stack.schedules()]

    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(lambda _: stack.aws.invoke(monitor, {}), range(2)))

    assert gate.most_at_once == 2, "both monitor runs were listing Vast at once"
    assert [r["verdicts"].get("dead") for r in runs] == [1, 1], runs
    wait_for(
        "generation 2 rented",
        lambda: any(h.generation == 2 for h in hosts.for_job(job_id)),
        timeout_s=60,
    )
    # Invariant 7: one rent per generation, however many runs decided to replace.
    wait_for(
        "no lifecycle execution running",
        lambda: (
            not stack.aws.client("stepfunctions").list_executions(
                stateMachineArn=stack.state_machine_arn(), statusFilter="RUNNING"
            )["executions"]
        ),
        timeout_s=60,
    )
    rents = Counter(h.generation for h in hosts.for_job(job_id))
    assert rents == {1: 1, 2: 1}
    # One replacement, so one incident on the timeline, whichever run started it.
    assert sum(r["transitions_started"] for r in runs) == 1, runs
    view = store.get_job_view(job_id, max_events=1000)
    assert view is not None
    assert [e.kind for e in view.events].count("dead") == 1
    for host in hosts.for_job(job_id):
        hosts.destroy(host.instance_id)
