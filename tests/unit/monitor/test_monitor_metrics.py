"""The monitor handler turns its run's report into the EMF metrics the dashboard and the
SpendNearBudget alarm read: names, units and the one `service` dimension as they query them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.monitor import handler as monitor_handler
from functions.monitor import service as monitor_service
from functions.monitor.service import MonitorReport
from infra import names
from infra.constructs import observability as obs
from tether_local.apigw import LocalLambdaContext


def run_handler(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], report: MonitorReport
) -> dict[str, tuple[list[Any], str]]:
    """Metric name → (values, unit) the handler printed for one run returning `report`."""
    monkeypatch.setattr(monitor_handler, "dependencies", lambda: None)
    monkeypatch.setattr(monitor_service, "run_monitor", lambda _deps: report)
    capsys.readouterr()
    monitor_handler.handler({}, LocalLambdaContext())
    found: dict[str, tuple[list[Any], str]] = {}
    for line in capsys.readouterr().out.splitlines():
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if not isinstance(document, dict) or "_aws" not in document:
            continue
        for directive in document["_aws"]["CloudWatchMetrics"]:
            assert directive["Namespace"] == names.METRICS_NAMESPACE
            assert directive["Dimensions"] == [["service"]]
            assert document["service"] == names.SERVICE_NAME
            for metric in directive["Metrics"]:
                value = document[metric["Name"]]
                found[metric["Name"]] = (
                    value if isinstance(value, list) else [value],
                    metric["Unit"],
                )
    return found


def test_a_run_with_jobs_emits_every_measure_the_dashboard_plots(monkeypatch, capsys) -> None:
    report = MonitorReport(
        jobs=2,
        instances=3,
        tether_instances=2,
        budget_used_max_fraction=0.85,
        heartbeat_age_max_s=42.0,
        work_lost_s=[200.0, 15.5],
    )
    emitted = run_handler(monkeypatch, capsys, report)

    assert emitted[obs.BUDGET_FRACTION_METRIC] == ([0.85], "None")
    assert emitted[obs.INSTANCES_METRIC] == ([2], "Count")
    assert emitted[obs.HEARTBEAT_AGE_METRIC] == ([42.0], "Seconds")
    assert emitted[obs.WORK_LOST_METRIC] == ([200.0, 15.5], "Seconds")
    assert emitted[obs.JOBS_METRIC] == ([2], "Count")
    # at or above the alarm's threshold: SpendNearBudget fires on this datapoint
    assert emitted[obs.BUDGET_FRACTION_METRIC][0][0] >= obs.SPEND_ALARM_FRACTION


def test_an_idle_run_emits_no_measure_it_cannot_take(monkeypatch, capsys) -> None:
    emitted = run_handler(monkeypatch, capsys, MonitorReport(instances=None))
    for name in (
        obs.BUDGET_FRACTION_METRIC,
        obs.INSTANCES_METRIC,  # Vast could not be read: no count rather than a false 0
        obs.HEARTBEAT_AGE_METRIC,
        obs.WORK_LOST_METRIC,
    ):
        assert name not in emitted
    assert emitted["VastListFailed"] == ([1], "Count")


def test_records_vast_sent_that_could_not_be_read_are_counted(monkeypatch, capsys) -> None:
    report = MonitorReport(jobs=1, instances=4, vast_records_skipped=2, vast_fields_dropped=1)
    emitted = run_handler(monkeypatch, capsys, report)
    assert emitted["VastRecordsSkipped"] == ([2], "Count")
    assert emitted["VastFieldsDropped"] == ([1], "Count")
    assert run_handler(monkeypatch, capsys, MonitorReport())["VastRecordsSkipped"] == ([0], "Count")


def test_later_attempts_and_a_stop_past_its_last_attempt_are_counted(monkeypatch, capsys) -> None:
    report = MonitorReport(jobs=3, transitions_started=1, transitions_retried=2,
                           transitions_exhausted=1)  # fmt: skip
    emitted = run_handler(monkeypatch, capsys, report)
    assert emitted["TransitionsStarted"] == ([1], "Count")
    assert emitted["TransitionsRetried"] == ([2], "Count")
    assert emitted[obs.TRANSITIONS_EXHAUSTED_METRIC] == ([1], "Count")  # TransitionGaveUp
