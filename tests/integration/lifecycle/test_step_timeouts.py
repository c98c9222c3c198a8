"""A lifecycle step that runs past its function's timeout (Lambda answers `Sandbox.Timedout`)
is run again, on the real definition with the local stack enforcing the timeout; one that keeps
timing out fails its attempt with the reason on the timeline. The stack here gives the lifecycle
function a 1 s timeout instead of 180 s, so a step can outlive it quickly."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest

from functions.domain.job import JobState
from functions.lifecycle import service as lifecycle_service
from functions.lifecycle.provision import RentBudget
from functions.lifecycle.steps import FinishInput, LifecycleDeps, StepOutput
from infra import names
from tests.integration.conftest import TIME_SCALE
from tests.integration.supervision_harness import (
    Supervised,
    logical_id_by_handler,
    supervised_stack,
)

TIMEOUT_S = 1
OVERRUN_S = 1.5


@pytest.fixture(scope="module")
def stack(tether_template: dict[str, Any]) -> Iterator[Supervised]:
    template = copy.deepcopy(tether_template)
    lifecycle = logical_id_by_handler(template, names.LIFECYCLE_HANDLER)
    template["Resources"][lifecycle]["Properties"]["Timeout"] = TIMEOUT_S
    yield from supervised_stack(template, TIME_SCALE)


@pytest.fixture
def sup(stack: Supervised, monkeypatch: pytest.MonkeyPatch) -> Supervised:
    stack.fresh()
    # No rent fits a 1 s invocation by the provision's own budget; the simulator answers at
    # once, so here it rents regardless.
    monkeypatch.setattr(RentBudget, "fits", lambda _self, _remaining_s: True)
    return stack


def slow_finish(monkeypatch: pytest.MonkeyPatch, times: int) -> list[float]:
    """`finish` overruns the timeout on its first `times` calls."""
    calls: list[float] = []
    real = lifecycle_service.finish

    def finish(deps: LifecycleDeps, inp: FinishInput) -> StepOutput:
        calls.append(time.monotonic())
        if len(calls) <= times:
            time.sleep(OVERRUN_S)
        return real(deps, inp)

    monkeypatch.setattr(lifecycle_service, "finish", finish)
    return calls


def test_a_step_that_times_out_once_is_run_again(
    sup: Supervised, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, _ = sup.provisioned()
    calls = slow_finish(monkeypatch, times=1)

    result = sup.run("stop", job.job_id, 1, "cancelled")

    assert result["status"] == "SUCCEEDED" and len(calls) == 2
    failures = [
        e["lambdaFunctionFailedEventDetails"]["error"]
        for e in sup.aws.execution_history(result["executionArn"])
        if e["type"] == "LambdaFunctionFailed"
    ]
    assert failures == ["Sandbox.Timedout"]
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.CANCELLED
    assert "transition_failed" not in sup.events(job.job_id)


def test_a_step_that_keeps_timing_out_fails_its_attempt_and_says_why(
    sup: Supervised, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, _ = sup.provisioned()
    calls = slow_finish(monkeypatch, times=100)

    result = sup.run("stop", job.job_id, 1, "cancelled")

    assert result["status"] == "FAILED" and len(calls) == 5  # the first run and 4 retries
    view = sup.store.get_job_view(job.job_id)
    assert view is not None and view.job.state == JobState.STOPPING
    (failed,) = [e for e in view.events if e.kind == "transition_failed"]
    assert failed.data["state"] == "Finish" and failed.data["error"] == "Sandbox.Timedout"
    assert f"Task timed out after {TIMEOUT_S:.2f} seconds" in failed.message
