"""The monitor handler turns its run's report into the EMF metrics the dashboard and the
SpendNearBudget and MonitorFinding alarms read: names, units and the one `service` dimension as
they query them."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from functions.domain.measures import MONITOR_RUN_MESSAGE
from functions.monitor import handler as monitor_handler
from functions.monitor import service as monitor_service
from functions.monitor.service import MonitorReport
from infra import names
from infra.constructs import observability as obs
from tether_local.aws.apigw import LocalLambdaContext


@pytest.fixture(autouse=True)
def whole_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler reads its shard count from the settings (one shard unless a test says)."""
    monkeypatch.setattr(
        monitor_handler, "monitor_settings", lambda: SimpleNamespace(monitor_shards=1)
    )


def run_handler(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    report: MonitorReport,
    *,
    event: dict[str, Any] | None = None,
    shards: int = 1,
    dimensions: dict[str, list[str]] | None = None,
) -> dict[str, tuple[list[Any], str]]:
    """Metric name → (values, unit) the handler printed for one run returning `report`
    (`dimensions`, if given, gets each metric's dimension names)."""
    monkeypatch.setattr(monitor_handler, "dependencies", lambda: None)
    monkeypatch.setattr(
        monitor_handler, "monitor_settings", lambda: SimpleNamespace(monitor_shards=shards)
    )
    monkeypatch.setattr(monitor_service, "run_monitor", lambda _deps, **_: report)
    capsys.readouterr()
    monitor_handler.handler(event or {}, LocalLambdaContext())
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
            if dimensions is None:
                assert directive["Dimensions"] == [["service"]]
            assert document["service"] == names.SERVICE_NAME
            for metric in directive["Metrics"]:
                if dimensions is not None:
                    dimensions[metric["Name"]] = directive["Dimensions"][0]
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
    assert "VastRecordsSkipped" not in run_handler(monkeypatch, capsys, MonitorReport())


def test_unsupervised_jobs_and_held_verdicts_reach_the_alarms(monkeypatch, capsys) -> None:
    """The metrics the dashboard's held-verdicts line and the JobsUnsupervised alarm read, by
    the names the stack queries."""
    report = MonitorReport(jobs=5, supervised=3, unsupervised=2, held=4)
    emitted = run_handler(monkeypatch, capsys, report)
    assert emitted[obs.UNSUPERVISED_METRIC] == ([2], "Count")
    assert emitted[obs.HELD_METRIC] == ([4], "Count")
    quiet = run_handler(monkeypatch, capsys, MonitorReport(jobs=1, supervised=1))
    # the alarm takes the Minimum over every run of ten minutes: the zeros count while jobs run
    assert quiet[obs.UNSUPERVISED_METRIC] == ([0], "Count")
    assert obs.HELD_METRIC not in quiet  # a counter: only when non-zero (missing = OK)


def test_the_handler_budgets_the_run_by_the_invocations_remaining_time(monkeypatch) -> None:
    """The run gets the context's remaining time, read when asked (not once at the start)."""
    seen: list[float] = []

    def run(_deps: object, *, remaining_s: Callable[[], float], **_: object) -> MonitorReport:
        seen.append(remaining_s())
        return MonitorReport()

    class Context(LocalLambdaContext):
        def get_remaining_time_in_millis(self) -> int:
            return 42_000

    monkeypatch.setattr(monitor_handler, "dependencies", lambda: None)
    monkeypatch.setattr(monitor_service, "run_monitor", run)
    monitor_handler.handler({}, Context())
    assert seen == [42.0]


def test_later_attempts_and_a_stop_past_its_last_attempt_are_counted(monkeypatch, capsys) -> None:
    report = MonitorReport(jobs=3, transitions_started=1, transitions_retried=2,
                           transitions_exhausted=1)  # fmt: skip
    emitted = run_handler(monkeypatch, capsys, report)
    assert emitted["TransitionsStarted"] == ([1], "Count")
    assert emitted["TransitionsRetried"] == ([2], "Count")
    assert emitted[obs.TRANSITIONS_EXHAUSTED_METRIC] == ([1], "Count")  # a line


def test_an_idle_run_emits_no_metric_at_all(monkeypatch, capsys) -> None:
    """No job, Vast read, no labelled instance, nothing went wrong: every custom metric is
    billed for each hour it gets a datapoint, so an idle deployment sends none."""
    idle = MonitorReport(instances=0, tether_instances=0)
    assert run_handler(monkeypatch, capsys, idle) == {}


def test_counters_are_emitted_only_when_non_zero(monkeypatch, capsys) -> None:
    report = MonitorReport(jobs=1, instances=1, tether_instances=1, orphans_destroyed=1)
    emitted = run_handler(monkeypatch, capsys, report)
    assert emitted[obs.ORPHANS_METRIC] == ([1], "Count")
    assert emitted[obs.INSTANCES_METRIC] == ([1], "Count")
    for zero in ("TransitionsStarted", "CredentialsRenewed", obs.MONITOR_ERRORS_METRIC,
                 obs.HOSTS_BLAMED_METRIC, "VastListFailed", obs.RECOVERIES_METRIC):  # fmt: skip
        assert zero not in emitted, zero
    # the gauges the dashboard and the alarms read while a job is active
    assert emitted[obs.JOBS_METRIC] == ([1], "Count")
    assert emitted[obs.SPEND_METRIC] == ([0.0], "None")


def test_verdicts_are_one_metric_their_causes_stay_in_the_log_line(
    monkeypatch, capsys, caplog
) -> None:
    """`Verdict{cause=…}` would be billed as one metric per cause, like `Verdict_<cause>`: one
    `Recoveries` count instead, the causes in the run's log line (the dashboard queries it)."""
    report = MonitorReport(jobs=3, instances=3, tether_instances=3,
                           verdicts={"dead": 2, "hung": 1, "finished": 1})  # fmt: skip
    monkeypatch.setattr(monitor_handler, "dependencies", lambda: None)
    monkeypatch.setattr(monitor_service, "run_monitor", lambda _deps, **_: report)
    capsys.readouterr()
    monitor_handler.handler({}, LocalLambdaContext())
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    metric_names = {
        m["Name"]
        for line in lines
        if "_aws" in line
        for d in line["_aws"]["CloudWatchMetrics"]
        for m in d["Metrics"]
    }
    assert not {n for n in metric_names if n.startswith("Verdict")}
    (recoveries,) = [line[obs.RECOVERIES_METRIC] for line in lines if "_aws" in line]
    assert recoveries == [3.0]  # dead and hung; a finished job is no recovery
    (run_line,) = [r for r in caplog.records if r.getMessage() == MONITOR_RUN_MESSAGE]
    assert run_line.verdicts == {"dead": 2, "hung": 1, "finished": 1}


def test_a_shard_sends_its_unsupervised_jobs_under_its_own_dimension(monkeypatch, capsys) -> None:
    """The JobsUnsupervised alarm takes each shard's Minimum (infra: MAX over the shards), so one
    shard's zeros never hide another's failures; the other metrics add up as they are."""
    seen: dict[str, list[str]] = {}
    report = MonitorReport(jobs=3, supervised=1, unsupervised=2, instances=3)
    emitted = run_handler(
        monkeypatch, capsys, report, event={"shard": 2}, shards=4, dimensions=seen
    )
    assert emitted["JobsUnsupervised"][0] == [2.0]
    assert seen["JobsUnsupervised"] == ["service", "shard"]
    assert seen["JobsSupervised"] == ["service"]


@pytest.mark.parametrize("event", [{}, {"shard": 4}, {"shard": "1"}, {"shard": True}])
def test_a_sharded_deployment_refuses_an_event_that_names_no_shard_of_it(
    monkeypatch, capsys, event: dict[str, Any]
) -> None:
    """A schedule that does not match the deployment must not judge (and renew) other shards'
    jobs: the invocation fails, and the alarms see the error."""
    with pytest.raises(ValueError, match="shard"):
        run_handler(monkeypatch, capsys, MonitorReport(), event=event, shards=4)


@pytest.mark.parametrize(
    ("report", "findings"),
    [
        (MonitorReport(jobs=1, orphans_destroyed=2), 2),
        (MonitorReport(jobs=5, held=3), 3),
        (MonitorReport(jobs=1, transitions_exhausted=1), 1),
        (MonitorReport(jobs=4, orphans_destroyed=1, held=3, transitions_exhausted=1), 5),
    ],
)
def test_orphans_held_verdicts_and_stops_given_up_reach_the_one_finding_alarm(
    monkeypatch, capsys, report: MonitorReport, findings: int
) -> None:
    """The MonitorFinding alarm reads one metric for the three (one alarm metric billed, not
    three); each keeps its own counter for the dashboard."""
    emitted = run_handler(monkeypatch, capsys, report)
    assert emitted["MonitorFindings"] == ([findings], "Count")


def test_a_run_with_nothing_to_report_sends_no_finding(monkeypatch, capsys) -> None:
    report = MonitorReport(jobs=3, supervised=3, unsupervised=0, budget_used_max_fraction=0.95)
    assert "MonitorFindings" not in run_handler(monkeypatch, capsys, report)
