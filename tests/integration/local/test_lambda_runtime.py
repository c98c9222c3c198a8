"""The local Lambda runtime's limits: timeouts (the invocation, the state machine's Retry and
Catch, the sandbox killed), separate execution environments that run at once, API Gateway's
integration timeout, and the execution's TimeoutSeconds on the scaled clock."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from tests.integration.conftest import TIME_SCALE
from tests.integration.local import sample_stack as stack
from tether_local.aws.deployed import HttpRoute
from tether_local.aws.lambda_runtime import TIMEOUT_ERROR_TYPE, RuntimeKind
from tether_local.aws.local_aws import Deployed, LambdaInvocationError, LocalAws
from tether_local.http import API_GATEWAY_TIMEOUT_S, ApiFront, LoopbackServer


def _deployed(runtime: RuntimeKind, template: dict[str, Any], **kwargs: Any) -> Iterator[Any]:
    with LocalAws(time_scale=TIME_SCALE, runtime=runtime, **kwargs) as aws:
        yield aws, aws.deploy(template, stack_name="Sample")


@pytest.fixture(params=["process", "in_process"])
def either(
    request: pytest.FixtureRequest, sample_template: dict[str, Any]
) -> Iterator[tuple[LocalAws, Deployed]]:
    yield from _deployed(request.param, sample_template)


@pytest.fixture
def processes(
    sample_template: dict[str, Any], tmp_path: Path
) -> Iterator[tuple[LocalAws, Deployed]]:
    yield from _deployed("process", sample_template, log_dir=tmp_path / "logs")


def _done(deployed: Deployed, slow_id: str) -> bool:
    table = boto3.resource("dynamodb").Table(deployed.table_name(stack.TABLE_ID))
    return "Item" in table.get_item(Key={"pk": f"slow#{slow_id}", "sk": "done"})


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


# --- timeouts -------------------------------------------------------------------------------


def test_an_invocation_past_its_timeout_fails_with_sandbox_timedout_and_stops_working(
    either: tuple[LocalAws, Deployed],
) -> None:
    aws, deployed = either
    slow = deployed.function_name(stack.SLOW_FN_ID)
    started = time.monotonic()

    with pytest.raises(LambdaInvocationError) as raised:
        aws.invoke(slow, {"id": "late", "sleep_s": 2.5})

    assert raised.value.error_type == TIMEOUT_ERROR_TYPE == "Sandbox.Timedout"
    assert f"Task timed out after {stack.SLOW_TIMEOUT_S:.2f} seconds" in raised.value.message
    # Past the moment the handler would have finished its work, the work is still not done:
    # the sandbox was discarded. A quick invocation afterwards does its work (the check can see).
    time.sleep(max(0.0, started + 3.5 - time.monotonic()))
    assert aws.invoke(slow, {"id": "quick", "sleep_s": 0}) == {"slept_s": 0}
    assert _done(deployed, "quick")
    assert not _done(deployed, "late")


def test_the_state_machine_retries_a_timed_out_task_then_catches_it(
    processes: tuple[LocalAws, Deployed],
) -> None:
    aws, deployed = processes
    arn = aws.start_execution(
        deployed.state_machine_arn(stack.SLOW_MACHINE_ID), {"id": "flow", "sleep_s": 5}
    )

    execution = aws.wait_execution(arn, timeout_s=60)

    assert execution["status"] == "SUCCEEDED"
    assert execution["output_json"]["error"]["Error"] == "Sandbox.Timedout"
    failures = [
        e["lambdaFunctionFailedEventDetails"]["error"]
        for e in aws.execution_history(arn)
        if e["type"] == "LambdaFunctionFailed"
    ]
    assert failures == ["Sandbox.Timedout", "Sandbox.Timedout"]  # the attempt and its retry
    states = [e["stateEnteredEventDetails"]["name"] for e in aws.execution_history(arn)
              if e["type"] == "PassStateEntered"]  # fmt: skip
    assert states == ["TimedOut"]


def test_a_timeout_is_logged_where_the_function_logs(
    processes: tuple[LocalAws, Deployed], tmp_path: Path
) -> None:
    aws, deployed = processes
    slow = deployed.function_name(stack.SLOW_FN_ID)
    with pytest.raises(LambdaInvocationError):
        aws.invoke(slow, {"id": "logged", "sleep_s": 3})

    log = (tmp_path / "logs" / f"{slow}.log").read_text()
    assert f"START RequestId: {raised_request_id(log)}" in log
    assert "Task timed out after 1.00 seconds" in log


def raised_request_id(log: str) -> str:
    """The request id of the log's timed-out invocation."""
    line = next(line for line in log.splitlines() if "Task timed out" in line)
    return line.split()[1]


# --- separate execution environments --------------------------------------------------------


def test_concurrent_invocations_run_in_separate_environments(
    processes: tuple[LocalAws, Deployed],
) -> None:
    aws, deployed = processes
    count = deployed.function_name(stack.COUNT_FN_ID)
    barrier = uuid.uuid4().hex

    def invoke(mark: str) -> dict[str, Any]:
        event = {"id": barrier, "together": 2, "wait_s": 30, "mark": mark}
        result: dict[str, Any] = aws.invoke(count, event)
        return result

    with ThreadPoolExecutor(max_workers=2) as pool:
        first, second = pool.map(invoke, ["a", "b"])

    assert first["together"] and second["together"], "both were in flight at once"
    assert first["pid"] != second["pid"]
    # Each environment counted only its own invocation and kept its own os.environ.
    assert (first["invocations"], first["mark"]) == (1, "a")
    assert (second["invocations"], second["mark"]) == (1, "b")
    # An environment is reused afterwards, module state and all (a warm start).
    again = aws.invoke(count, {"id": uuid.uuid4().hex, "mark": "c"})
    assert again["invocations"] == 2
    assert again["pid"] in (first["pid"], second["pid"])
    assert "SAMPLE_MARK" not in os.environ  # nothing of any environment reached this process


def test_environments_get_only_the_function_and_runtime_environment(
    processes: tuple[LocalAws, Deployed], monkeypatch: pytest.MonkeyPatch
) -> None:
    aws, deployed = processes
    monkeypatch.setenv("TETHER_TEST_ONLY_IN_THE_HARNESS", "1")
    seen = aws.invoke(deployed.function_name(stack.CLASSIFY_FN_ID), {"kind": "gpu"})
    assert seen["color"] == "blue"
    assert seen["function_name"] == seen["env_function_name"]
    assert seen["remaining_ms_positive"] is True
    assert "TETHER_TEST_ONLY_IN_THE_HARNESS" not in seen["variables"]
    assert {"AWS_ENDPOINT_URL", "AWS_LAMBDA_FUNCTION_NAME", "TABLE_NAME"} <= set(seen["variables"])


def test_closing_kills_every_environment_busy_or_idle(
    sample_template: dict[str, Any], tmp_path: Path
) -> None:
    answers: list[Any] = []
    with LocalAws(time_scale=TIME_SCALE, log_dir=tmp_path) as aws:
        deployed = aws.deploy(sample_template, stack_name="Sample")
        count = deployed.function_name(stack.COUNT_FN_ID)
        pair = {"id": "pair", "together": 2, "wait_s": 30}
        with ThreadPoolExecutor(max_workers=2) as pool:  # two environments, then both idle
            assert all(r["together"] for r in pool.map(lambda _: aws.invoke(count, pair), [1, 2]))

        def busy() -> None:  # waits for a partner that never comes: busy until killed
            try:
                answers.append(aws.invoke(count, {"id": "busy", "together": 2, "wait_s": 600}))
            except Exception as exc:
                answers.append(exc)

        caller = threading.Thread(target=busy)
        caller.start()
        pids = aws.lambda_pids()
        assert len(pids) == 2
    caller.join(timeout=30)

    assert not caller.is_alive() and len(answers) == 1  # the in-flight invocation ended
    assert [pid for pid in pids if _alive(pid)] == []


# --- API Gateway's integration timeout ------------------------------------------------------


def test_the_front_answers_503_past_the_integration_timeout_whatever_the_function_timeout(
    processes: tuple[LocalAws, Deployed],
) -> None:
    aws, deployed = processes
    count = deployed.function_arn(stack.COUNT_FN_ID)

    def invoke(arn: str, event: dict[str, Any]) -> Any:  # waits 5 s for a partner that never comes
        return aws.run_function(arn, {**event, "id": uuid.uuid4().hex, "together": 2, "wait_s": 5})

    assert API_GATEWAY_TIMEOUT_S == 30.0
    # The count function's own timeout is 30 s; this front waits 1 s where API Gateway waits 30.
    front = ApiFront(
        [HttpRoute("GET /wait", count, "NONE", "2.0")], invoke=invoke, integration_timeout_s=1.0
    )
    with LoopbackServer(front.handle) as server:
        waited = httpx.get(f"{server.url}/wait", timeout=30)

    assert waited.status_code == 503
    assert waited.json() == {"message": "Service Unavailable"}


def test_a_function_timeout_within_the_integration_timeout_is_a_500(
    processes: tuple[LocalAws, Deployed],
) -> None:
    aws, deployed = processes
    slow = deployed.function_arn(stack.SLOW_FN_ID)

    def invoke(arn: str, event: dict[str, Any]) -> Any:
        return aws.run_function(arn, {**event, "id": "api", "sleep_s": 3})

    front = ApiFront([HttpRoute("GET /slow", slow, "NONE", "2.0")], invoke=invoke)
    with LoopbackServer(front.handle) as server:
        reply = httpx.get(f"{server.url}/slow", timeout=60)

    assert reply.status_code == 500
    assert reply.json() == {"message": "Internal Server Error"}


# --- the execution's TimeoutSeconds ---------------------------------------------------------


def _waiting_machine(timeout_s: int, wait_s: int) -> dict[str, Any]:
    definition = {
        "TimeoutSeconds": timeout_s,
        "StartAt": "Wait",
        "States": {"Wait": {"Type": "Wait", "Seconds": wait_s, "End": True}},
    }
    return {
        "Resources": {
            "Machine": {
                "Type": "AWS::StepFunctions::StateMachine",
                "Properties": {
                    "RoleArn": {"Fn::GetAtt": ["Role", "Arn"]},
                    "DefinitionString": json.dumps(definition),
                },
            },
            "Role": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {}}},
        }
    }


@pytest.mark.parametrize(
    ("timeout_s", "wait_s", "status"),
    [
        (60, 3600, "TIMED_OUT"),  # an hour's Wait (0.36 s scaled) outlives a minute's timeout
        (7200, 3600, "SUCCEEDED"),  # and fits in two hours
    ],
)
def test_the_execution_timeout_counts_on_the_scaled_clock(
    local_aws: LocalAws, timeout_s: int, wait_s: int, status: str
) -> None:
    deployed = local_aws.deploy(_waiting_machine(timeout_s, wait_s), stack_name="Timeouts")
    arn = local_aws.start_execution(deployed.state_machine_arn("Machine"), {})

    execution = local_aws.wait_execution(arn, timeout_s=30)

    assert execution["status"] == status
    timed_out = [e for e in local_aws.execution_history(arn) if e["type"] == "ExecutionTimedOut"]
    assert len(timed_out) == (status == "TIMED_OUT")


# --- environments that cannot serve ---------------------------------------------------------


def _functions_only(**handlers: str) -> dict[str, Any]:
    return {
        "Resources": {
            name: {"Type": "AWS::Lambda::Function", "Properties": {"Handler": handler}}
            for name, handler in handlers.items()
        }
    }


def test_an_import_error_or_a_dead_environment_is_lambdas_error(tmp_path: Path) -> None:
    template = _functions_only(
        Missing="tests.integration.local.no_such_module.handler",
        Crash=f"{stack.HANDLERS}.crash",
    )
    with LocalAws(time_scale=TIME_SCALE, log_dir=tmp_path) as aws:
        deployed = aws.deploy(template, stack_name="Broken")

        with pytest.raises(LambdaInvocationError) as missing:
            aws.invoke(deployed.function_name("Missing"), {})
        with pytest.raises(LambdaInvocationError) as crashed:
            aws.invoke(deployed.function_name("Crash"), {"crash": True})
        again = aws.invoke(deployed.function_name("Crash"), {})  # a new environment

    assert missing.value.error_type == "Runtime.ImportModuleError"
    assert "no_such_module" in missing.value.message
    assert crashed.value.error_type == "Runtime.ExitError"
    assert again == {"alive": True}
