"""Reserved concurrency: supervision (the monitor, the lifecycle) holds its own share of the
account's Lambda concurrency, and the functions a stranger can reach (the heartbeat, the jobs
function behind `$default`) are capped, so a flood is throttled at their cap instead of taking
the account's pool (docs/deploy.md#reserved-concurrency)."""

from __future__ import annotations

from typing import Any

import pytest

from infra import names
from infra.concurrency import reserved_concurrency
from infra.synth import build_app
from tests.infra.stack.test_template import function_by_handler


@pytest.mark.parametrize(
    ("handler", "reserved"),
    [
        (names.MONITOR_HANDLER, 2),  # one run per shard (1 by default), and one overlapping it
        (names.LIFECYCLE_HANDLER, 20),
        (names.HEARTBEAT_HANDLER, 50),
        (names.JOBS_HANDLER, 20),
    ],
)
def test_each_function_reserves_or_is_capped_at_its_share(
    template: dict[str, Any], handler: str, reserved: int
) -> None:
    _, function = function_by_handler(template, handler)
    assert function["Properties"]["ReservedConcurrentExecutions"] == reserved


def test_the_logs_function_behind_iam_routes_only_draws_from_the_pool(
    template: dict[str, Any],
) -> None:
    _, function = function_by_handler(template, names.LOGS_HANDLER)
    assert "ReservedConcurrentExecutions" not in function["Properties"]


def test_the_reservations_leave_the_account_its_unreserved_hundred(
    template: dict[str, Any],
) -> None:
    total = sum(
        function_by_handler(template, handler)[1]["Properties"]["ReservedConcurrentExecutions"]
        for handler in (
            names.MONITOR_HANDLER,
            names.LIFECYCLE_HANDLER,
            names.HEARTBEAT_HANDLER,
            names.JOBS_HANDLER,
        )
    )
    assert total <= 1000 - 100


def test_the_settings_come_from_the_context() -> None:
    context = {
        names.LIFECYCLE_CONCURRENCY_CONTEXT: "40",
        names.HEARTBEAT_CONCURRENCY_CONTEXT: 10,
        names.JOBS_CONCURRENCY_CONTEXT: "5",
        names.MONITOR_CONCURRENCY_CONTEXT: "9",
    }
    got = reserved_concurrency(context.get, shards=4)
    assert (got.monitor, got.lifecycle, got.heartbeat, got.jobs) == (9, 40, 10, 5)


def test_the_monitor_reserves_two_per_shard_by_default() -> None:
    none: dict[str, object] = {}
    assert reserved_concurrency(none.get, shards=4).monitor == 8


@pytest.mark.parametrize(
    ("context", "named"),
    [
        (names.LIFECYCLE_CONCURRENCY_CONTEXT, "0"),
        (names.HEARTBEAT_CONCURRENCY_CONTEXT, "-3"),
        (names.JOBS_CONCURRENCY_CONTEXT, "lots"),
        (names.LIFECYCLE_CONCURRENCY_CONTEXT, "2.5"),
        (names.HEARTBEAT_CONCURRENCY_CONTEXT, "901"),
        (names.MONITOR_CONCURRENCY_CONTEXT, "3"),  # fewer than the 4 shards' runs
    ],
)
def test_a_bad_value_fails_the_synth_naming_the_setting(context: str, named: str) -> None:
    with pytest.raises(ValueError, match=f"context {context}="):
        reserved_concurrency({context: named}.get, shards=4)


def test_reservations_that_leave_under_a_hundred_unreserved_fail_the_synth() -> None:
    context = {
        names.LIFECYCLE_CONCURRENCY_CONTEXT: "400",
        names.HEARTBEAT_CONCURRENCY_CONTEXT: "400",
        names.JOBS_CONCURRENCY_CONTEXT: "100",
    }
    with pytest.raises(ValueError, match="unreserved"):
        reserved_concurrency(context.get, shards=1)


def test_a_bad_environment_value_fails_the_synth_naming_the_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`tether deploy` and `make synth` pass the settings as environment variables."""
    monkeypatch.setenv("TETHER_HEARTBEAT_CONCURRENCY", "0")
    with pytest.raises(ValueError, match=f"context {names.HEARTBEAT_CONCURRENCY_CONTEXT}='0'"):
        build_app(bundle=False, nag=False)


def test_the_stack_outputs_its_reservations_for_the_next_deploy(
    template: dict[str, Any],
) -> None:
    """`tether deploy` reads these back, so a plain redeploy keeps a raised reservation."""
    outputs = template["Outputs"]
    assert {
        name: outputs[name]["Value"]
        for name in (
            names.OUTPUT_MONITOR_CONCURRENCY,
            names.OUTPUT_LIFECYCLE_CONCURRENCY,
            names.OUTPUT_HEARTBEAT_CONCURRENCY,
            names.OUTPUT_JOBS_CONCURRENCY,
        )
    } == {
        names.OUTPUT_MONITOR_CONCURRENCY: "2",
        names.OUTPUT_LIFECYCLE_CONCURRENCY: "20",
        names.OUTPUT_HEARTBEAT_CONCURRENCY: "50",
        names.OUTPUT_JOBS_CONCURRENCY: "20",
    }
