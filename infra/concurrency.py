"""Reserved concurrency (docs/deploy.md#reserved-concurrency): how much of the account's Lambda
concurrency each function holds or may take.

Without a reservation every function draws from one pool per account and Region (1,000
concurrent executions by default). The heartbeat route needs no authorizer and `$default` none
either, so a flood on them could hold the whole pool, and a monitor that cannot run stops no
over-budget job. So:

- the monitor and the lifecycle *reserve* their share: nothing else can take it;
- the heartbeat function and the jobs function (behind `$default`) are *capped*: a flood past
  the cap is throttled (API Gateway answers it 500; the agent and the CLI retry) and leaves the
  pool to the others. A reservation is both at once, a cap and a share, so these two reserve too.

AWS keeps at least 100 of the account's concurrency unreserved, so the four together must leave
that: checked here against the default account limit, at synth. Each number is a CDK context
(`-c lifecycleConcurrency=40`) or, for `make synth` and `tether deploy`, an environment variable
(`TETHER_LIFECYCLE_CONCURRENCY=40`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infra import names

# Lambda's default concurrency quota per account and Region, and what AWS keeps unreserved.
ACCOUNT_CONCURRENCY_LIMIT = 1000
UNRESERVED_MINIMUM = 100
RESERVABLE = ACCOUNT_CONCURRENCY_LIMIT - UNRESERVED_MINIMUM

# The monitor: Scheduler runs it once a minute per shard, for at most 55 s; two per shard leave
# room for a run that starts late and overlaps the next (a throttled one is not lost either:
# Lambda's async queue retries it, and the next minute's run is the retry anyway).
MONITOR_RUNS_PER_SHARD = 2
# The lifecycle: each execution runs its steps one after another (no Parallel or Map state),
# so it runs at most one invocation per transition under way. A monitor run starts the
# transitions it decides APPLY_WORKERS (16) jobs at a time (functions/monitor/service.py);
# 20 carries such a wave plus the jobs function's provisions at once. Past it a step is
# throttled and retried with back-off (Lambda.TooManyRequestsException is among the lifecycle's
# TRANSIENT_ERRORS), so a larger wave is delayed, never dropped.
LIFECYCLE_CONCURRENCY = 20
# The heartbeat: its route passes at most 50 requests a second (HEARTBEAT_RATE_LIMIT); a warm
# heartbeat takes tens of milliseconds, a cold one about a second, so 50 carries the route's
# whole rate even through cold starts. A slow table cannot make it hold more than 50.
HEARTBEAT_CONCURRENCY = 50
# The jobs function: a person and the CLI on the user routes and `$default` (10 requests a
# second per route, burst 20: USER_BURST_LIMIT). 20 serves a whole burst at once.
JOBS_CONCURRENCY = 20

ContextReader = Callable[[str], object]


@dataclass(frozen=True)
class ReservedConcurrency:
    monitor: int
    lifecycle: int
    heartbeat: int
    jobs: int

    @property
    def total(self) -> int:
        return self.monitor + self.lifecycle + self.heartbeat + self.jobs


def reserved_concurrency(context: ContextReader, *, shards: int) -> ReservedConcurrency:
    """The four numbers from the CDK context (defaults above), checked: a bad value, or four that
    would leave the default account fewer than 100 unreserved, fails the synth naming it."""
    reserved = ReservedConcurrency(
        monitor=_setting(
            context, names.MONITOR_CONCURRENCY_CONTEXT, MONITOR_RUNS_PER_SHARD * shards,
            at_least=shards, why=f"one run for each of the {shards} monitor shard(s)",
        ),
        lifecycle=_setting(context, names.LIFECYCLE_CONCURRENCY_CONTEXT, LIFECYCLE_CONCURRENCY),
        heartbeat=_setting(context, names.HEARTBEAT_CONCURRENCY_CONTEXT, HEARTBEAT_CONCURRENCY),
        jobs=_setting(context, names.JOBS_CONCURRENCY_CONTEXT, JOBS_CONCURRENCY),
    )  # fmt: skip
    if reserved.total > RESERVABLE:
        raise ValueError(
            f"reserved concurrency {reserved.total} in all ({reserved}) would leave fewer than "
            f"{UNRESERVED_MINIMUM} of the default account limit of {ACCOUNT_CONCURRENCY_LIMIT} "
            f"unreserved: lower {names.LIFECYCLE_CONCURRENCY_CONTEXT}, "
            f"{names.HEARTBEAT_CONCURRENCY_CONTEXT} or {names.JOBS_CONCURRENCY_CONTEXT}"
        )
    return reserved


def _setting(
    context: ContextReader, key: str, default: int, *, at_least: int = 1, why: str = ""
) -> int:
    value = context(key)
    if value is None:
        return default
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if not at_least <= number <= RESERVABLE:
        floor = f" ({why})" if why else ""
        raise ValueError(
            f"context {key}={value!r}: give a whole number of concurrent executions from "
            f"{at_least}{floor} to {RESERVABLE} (e.g. -c {key}={default})"
        )
    return number
