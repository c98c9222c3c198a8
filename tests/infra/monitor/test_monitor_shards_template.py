"""A sharded deployment (CDK context `monitorShards`, or TETHER_MONITOR_SHARDS for `tether
deploy`): one schedule per shard naming its shard, the function told the count, and the alarms
that must see one failing shard through the others' good runs."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from functions.domain.measures import SHARD_DIMENSION, UNSUPERVISED_METRIC
from infra import names
from infra.constructs.observability import RUNS_PER_PERIOD
from infra.stack import monitor_shards
from infra.synth import synth_template
from tests.infra.conftest import resources
from tests.infra.observability.test_observability_template import alarm, metric_stats
from tests.infra.stack.test_template import function_by_handler

SHARDS = 4


@pytest.fixture(scope="module")
def sharded() -> Iterator[dict[str, Any]]:
    before = os.environ.get(names.MONITOR_SHARDS_ENV)
    os.environ[names.MONITOR_SHARDS_ENV] = str(SHARDS)
    try:
        yield synth_template(bundle=False)
    finally:
        if before is None:
            os.environ.pop(names.MONITOR_SHARDS_ENV, None)
        else:
            os.environ[names.MONITOR_SHARDS_ENV] = before


def test_each_shard_has_its_own_schedule_naming_it(sharded: dict[str, Any]) -> None:
    monitor_id, monitor = function_by_handler(sharded, names.MONITOR_HANDLER)
    schedules = [s["Properties"] for s in resources(sharded, "AWS::Scheduler::Schedule").values()]
    assert sorted(json.loads(s["Target"]["Input"])["shard"] for s in schedules) == [0, 1, 2, 3]
    for schedule in schedules:
        assert schedule["ScheduleExpression"] == names.MONITOR_SCHEDULE_EXPRESSION
        assert schedule["Target"]["Arn"] == {"Fn::GetAtt": [monitor_id, "Arn"]}
    env = monitor["Properties"]["Environment"]["Variables"]
    assert env[names.MONITOR_SHARDS_ENV] == str(SHARDS)


def test_one_failing_shard_is_not_hidden_by_the_others(sharded: dict[str, Any]) -> None:
    unsupervised = alarm(sharded, "JobsUnsupervised")
    (expression,) = [q["Expression"] for q in unsupervised["Metrics"] if "Expression" in q]
    assert expression.startswith("MAX(")
    stats = metric_stats(unsupervised)
    assert len(stats) == SHARDS
    for stat in stats.values():
        assert stat["MetricName"] == UNSUPERVISED_METRIC and stat["Stat"] == "Minimum"
    shards = {
        d["Value"] for s in stats.values() for d in s["Dimensions"] if d["Name"] == SHARD_DIMENSION
    }
    assert shards == {str(k) for k in range(SHARDS)}
    # Fewer good runs than every shard but one makes: one shard's runs all failed.
    assert alarm(sharded, "MonitorNotRunning")["Threshold"] == (SHARDS - 1) * RUNS_PER_PERIOD + 1
    counted = metric_stats(alarm(sharded, "MonitorNotRunning"))
    assert sorted(m["MetricName"] for m in counted.values()) == ["Errors", "Invocations"]


@pytest.mark.parametrize("value", ["0", "17", "four", "2.5"])
def test_a_bad_shard_count_fails_the_synth_naming_the_context(value: str) -> None:
    with pytest.raises(ValueError, match=names.MONITOR_SHARDS_CONTEXT):
        monitor_shards(value)


def test_the_dashboards_fleet_gauges_add_the_shards_up(sharded: dict[str, Any]) -> None:
    """Each shard sends its part of the active jobs, instances and spend: the dashboard shows
    their sum per run, not the largest shard's."""
    (dashboard,) = resources(sharded, "AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    text = "".join(p for p in parts if isinstance(p, str))
    sums = re.findall(rf'"expression":"(\w+) / {RUNS_PER_PERIOD}"', text)
    assert sorted(sums) == ["activeinstances", "activespendusd", "jobssupervised"]
