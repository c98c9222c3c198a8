"""A lifecycle execution that fails is recorded and retried as a new attempt, on the real
synthesized state machine: the job never stays stuck in a transition, and overlapping monitor
runs start each attempt exactly once.

Reproduction: a begin that failed after moving the job RUNNING → REPLACING, with the
host's agent dead, left the job REPLACING for 10 h while its instance billed ($0.70 of $0.20).
"""

from __future__ import annotations

import threading

import pytest

from functions.adapters.store import JobStore
from functions.adapters.transitions import TransitionStarter
from functions.domain.attempts import ExecutionStatus
from functions.domain.job import JobState, TransitionRequest
from functions.lifecycle import service as lifecycle_service
from functions.monitor import repair
from tests.integration.supervision_harness import Supervised

INTERVAL_S = 60
BUDGET_USD = 0.2
HEARTBEAT_TIMEOUT_S = 180  # the job spec's default


def test_a_begin_that_fails_after_replacing_began_is_retried_and_the_dead_host_destroyed(
    sup: Supervised, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, first = sup.provisioned(budget_usd=BUDGET_USD)
    old = first.instance_id or 0
    sup.heartbeat(job.job_id, 1, step=5)
    sup.clock.advance(HEARTBEAT_TIMEOUT_S + INTERVAL_S)  # the agent died: no heartbeat since

    def unavailable(*_args: object, **_kwargs: object) -> bool:
        raise RuntimeError("DynamoDB: internal server error")

    monkeypatch.setattr(JobStore, "supersede_generation", unavailable)
    report = sup.monitor()
    attempt = sup.wait_for(f"{job.job_id}-replace-g2-a1")

    assert report["verdicts"] == {"dead": 1} and attempt["status"] == "FAILED"
    view = sup.store.get_job_view(job.job_id)
    assert view is not None and view.job.state == JobState.REPLACING
    (failed,) = [e for e in view.events if e.kind == "transition_failed"]
    assert failed.message == (
        f"{job.job_id}-replace-g2-a1 failed in Begin: RuntimeError: DynamoDB: internal server error"
    )
    assert sup.vast.ledger(old).closed_at is None  # the dead host bills on

    monkeypatch.undo()
    failed_at = sup.clock()
    sup.clock.advance(INTERVAL_S)
    report = sup.monitor()
    sup.settle(job.job_id)

    assert report["transitions_retried"] == 1 and report["transitions_started"] == 0
    assert sup.executions(job.job_id) == {
        f"{job.job_id}-provision-g1-a1": "SUCCEEDED",
        f"{job.job_id}-replace-g2-a1": "FAILED",
        f"{job.job_id}-replace-g2-a2": "SUCCEEDED",
    }
    closed_at = sup.vast.ledger(old).closed_at
    assert closed_at is not None and closed_at - failed_at <= INTERVAL_S
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.RUNNING
    assert found.current_generation == 2 and found.restarts == 0
    replaced = sup.store.get_generation(job.job_id, 1)
    assert replaced is not None and replaced.host_blamed and replaced.status == "superseded"
    second = sup.store.get_generation(job.job_id, 2)
    assert second is not None and sup.vast.gpu_billing_instances() == [second.instance_id]
    assert sup.rents() == 2
    spent = sum(sup.vast.ledger(i).total_usd for i in (old, second.instance_id or 0))
    assert spent < BUDGET_USD


def test_every_failed_step_is_recorded_and_the_execution_fails(
    sup: Supervised, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finish, the last step of a stop, fails: the timeline names it; the job stays STOPPING
    for the next attempt (its host already destroyed by DestroyAll)."""
    job, generation = sup.provisioned()

    def broken(*_args: object) -> None:
        raise ValueError("finish broken")

    monkeypatch.setattr(lifecycle_service, "finish", broken)
    result = sup.run("stop", job.job_id, 1, "cancelled")

    assert result["status"] == "FAILED"
    assert result.get("error") == "TransitionFailed"
    found = sup.store.get_job_view(job.job_id)
    assert found is not None and found.job.state == JobState.STOPPING
    (failed,) = [e for e in found.events if e.kind == "transition_failed"]
    assert failed.data == {
        "execution": f"{job.job_id}-stop-a1",
        "state": "Finish",
        "error": "ValueError",
    }
    assert sup.vast.instance(generation.instance_id or 0) is None


def test_overlapping_monitor_runs_start_the_next_attempt_exactly_once(sup: Supervised) -> None:
    """Two runs read attempt 1 FAILED and attempt 2 absent at the same time, then both start
    attempt 2 against the real Step Functions: one start wins, the other is refused."""
    job = sup.submit(resources={"gpu_names": ["NoSuchGPU"]})
    request = TransitionRequest(action="provision", job_id=job.job_id, generation=1, reason="x")
    sup.aws.start_execution(
        sup.state_machine_arn, {"action": "provision"}, name=request.execution_name
    )  # an input without a job id: attempt 1 fails at once (States.Runtime, never caught)
    assert sup.wait_for(request.execution_name)["status"] == "FAILED"
    both_looked = threading.Barrier(2, timeout=30)

    class Overlapping(TransitionStarter):
        def status(self, request: TransitionRequest) -> ExecutionStatus | None:
            found = super().status(request)
            if request.attempt == 2:
                both_looked.wait()  # neither has started attempt 2 yet
            return found

    outcomes: list[repair.RepairOutcome] = []

    def monitor_run() -> None:
        starter = Overlapping(sup.state_machine_arn, client=sup.aws.client("stepfunctions"))
        outcomes.append(repair.advance(starter, sup.store, request, now=sup.clock()))

    runs = [threading.Thread(target=monitor_run) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(timeout=60)

    assert sorted(o.status for o in outcomes) == ["already_started", "started"]
    assert {o.request.execution_name for o in outcomes} == {f"{job.job_id}-provision-g1-a2"}
    executions = sup.settle(job.job_id)
    assert sorted(executions) == [
        f"{job.job_id}-provision-g1-a1",
        f"{job.job_id}-provision-g1-a2",
    ]
    assert sup.events(job.job_id).count("transition_retried") == 1
