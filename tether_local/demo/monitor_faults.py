"""The `monitor-crash` scenario: the monitor keeps running, and fails after its first step.

A deploy points the monitor at a Vast key parameter that SSM cannot find (the same happens
when its role loses the grant, or SSM is down): every run reads the job list and
then fails, for as long as the fault lasts. Before leases rested on `supervised_at`, such a run had
already written the supervisor's pulse, so heartbeats kept renewing leases while nobody judged
health or spend. Now no run completes the job's evaluation, so its `supervised_at` stops moving, no
heartbeat renews the lease, and the agent stops the job and its machine within the lease. Then the
deploy is fixed: the monitor finds the host stopped, replaces it, and the job finishes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from functions import settings as function_settings
from functions.adapters.store import JobView
from infra import names
from tether_local.demo.job import MONITOR_INTERVAL_S
from tether_local.demo.run import DemoError, DemoRun
from tether_local.stack import LocalStack

# A well-formed ARN of a parameter that does not exist: GetParameter answers ParameterNotFound.
MISSING_SECRET_ARN = "arn:aws:ssm:us-east-1:123456789012:parameter/tether/account/gone"  # noqa: S105 (an ARN)


def monitor_function(stack: LocalStack) -> str:
    """The deployed monitor function's name."""
    assert stack.deployed is not None
    client = stack.aws.client("lambda")
    for resource in stack.deployed.resources.values():
        if resource.type != "AWS::Lambda::Function":
            continue
        config = client.get_function_configuration(FunctionName=resource.physical_id)
        if config.get("Handler") == names.MONITOR_HANDLER:
            return str(resource.physical_id)
    raise DemoError("no monitor function in the stack")


@contextmanager
def vast_secret_missing(stack: LocalStack) -> Iterator[None]:
    """The monitor's Vast secret cannot be read while inside; a new configuration means new
    Lambda environments, so the cached key of the old ones goes with them."""
    client = stack.aws.client("lambda")
    name = monitor_function(stack)
    config = client.get_function_configuration(FunctionName=name)
    variables = dict(config.get("Environment", {}).get("Variables", {}))
    broken = {**variables, function_settings.VAST_SECRET_ARN_ENV: MISSING_SECRET_ARN}
    client.update_function_configuration(FunctionName=name, Environment={"Variables": broken})
    try:
        yield
    finally:
        client.update_function_configuration(
            FunctionName=name, Environment={"Variables": variables}
        )


def monitor_crash(run: DemoRun) -> None:
    g = run.wait_step(1, 50, checkpoint=50)
    instance = run.instance(g)
    errors_before = len(run.stack.tick_errors)

    def stopped_itself(_view: JobView) -> bool:
        record = run.stack.vast.instance(instance)
        return record is not None and record["intended_status"] == "stopped"

    with vast_secret_missing(run.stack):
        fault = run.fault("monitor-crash", g, lambda: None)
        run.say("monitor: its Vast secret cannot be read; every run fails after its first step")
        run.wait("the host to stop itself (its lease ran out)", stopped_itself, timeout_s=40)
        stopped_at = time.time()
        run.say(
            f"the agent stopped its own instance {instance} after {stopped_at - fault.at:.1f} s"
        )
        time.sleep(2 * MONITOR_INTERVAL_S)  # nothing bills GPU time while nobody supervises
        view = run.poll()
        failed_runs = len(run.stack.tick_errors) - errors_before
    current = run.generation(view, 1)
    supervised_at = current.supervised_at if current is not None else None
    run.checks["monitor_failed_while_broken"] = failed_runs >= 2
    run.checks["no_evaluation_completed_while_broken"] = (
        supervised_at is not None and supervised_at <= fault.at
    )
    run.checks["host_stopped_itself"] = True
    run.checks["no_gpu_billing_after_stop"] = not [
        s
        for s in run.samples
        if s.at > stopped_at + run.stack.config.stop_grace_s and s.instance_ids
    ]
    run.say(f"monitor fixed after {failed_runs} failed runs; the job resumes on a new host")
    run.supervisor_dead_s = time.time() - fault.at
    run.faults[-1] = fault.model_copy(update={"detected_at": stopped_at})


__all__ = ["MISSING_SECRET_ARN", "monitor_crash", "monitor_function", "vast_secret_missing"]
