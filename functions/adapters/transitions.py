"""Starts lifecycle transitions: executions of the lifecycle state machine (Step Functions),
and tells how an attempt's execution ended.

The execution name is deterministic per attempt (`functions.domain.job.execution_name`), so
starting the same attempt twice (a retried submit, overlapping monitor runs) collides with
ExecutionAlreadyExists, which is success: that attempt is already under way or done. Which
attempt to start is the monitor's repair (`functions/monitor/repair.py`).

Each start's input carries a `request_id` of its own. Step Functions answers a start whose name
AND input match a RUNNING execution with that execution, as if it had started it (StartExecution
is idempotent for standard workflows); two overlapping monitor runs that decide the same
replacement would then both believe they started it, and both record the incident and its
timeline event. With distinct inputs the second start is always ExecutionAlreadyExists.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError

from functions.domain.attempts import ExecutionStatus
from functions.domain.job import TransitionRequest

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient
else:
    SFNClient = Any


class TransitionStarter:
    def __init__(self, state_machine_arn: str, client: SFNClient | None = None) -> None:
        self.state_machine_arn = state_machine_arn
        self.client: SFNClient = client or boto3.client("stepfunctions")
        # arn:aws:states:<region>:<account>:stateMachine:<name> → …:execution:<name>:<exec>
        self._execution_prefix = state_machine_arn.replace(":stateMachine:", ":execution:", 1) + ":"

    def start(self, request: TransitionRequest) -> bool:
        """Start the transition; False when an execution of that name already exists (running
        or ended), whoever started it."""
        payload = {**request.model_dump(mode="json"), "request_id": uuid.uuid4().hex}
        try:
            self.client.start_execution(
                stateMachineArn=self.state_machine_arn,
                name=request.execution_name,
                input=json.dumps(payload),
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
                return False
            raise
        return True

    def status(self, request: TransitionRequest) -> ExecutionStatus | None:
        """How the execution of this attempt stands (RUNNING, SUCCEEDED, FAILED, …); None when
        it was never started."""
        try:
            described = self.client.describe_execution(
                executionArn=self._execution_prefix + request.execution_name
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
                return None
            raise
        status: ExecutionStatus = described["status"]
        return status
