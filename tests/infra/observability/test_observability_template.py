"""The dashboard, alarms and notifications in the synthesized template, and the logs route."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from functions.monitor import metrics as monitor_metrics
from infra import names
from infra.constructs import observability as obs
from infra.constructs.api import LOGS_TABLE_ACTIONS
from tests.infra.conftest import resources
from tests.infra.stack.test_template import function_by_handler, role_actions


def alarm(template: dict[str, Any], name: str) -> dict[str, Any]:
    found = [
        v["Properties"]
        for k, v in resources(template, "AWS::CloudWatch::Alarm").items()
        if k.startswith(f"{names.OBSERVABILITY_ID}{name}")
    ]
    assert len(found) == 1, name
    props: dict[str, Any] = found[0]
    return props


def alarm_topic_id(template: dict[str, Any]) -> str:
    (topic_id,) = [
        k
        for k, v in resources(template, "AWS::SNS::Topic").items()
        if v["Properties"].get("DisplayName") == "tether alarms"
    ]
    return topic_id


def metric_stats(props: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """id or metric name → MetricStat of an alarm (single metric or math expression)."""
    if "MetricName" in props:
        return {props["MetricName"]: props}
    return {
        q["Id"]: q["MetricStat"]["Metric"] | {"Stat": q["MetricStat"]["Stat"]}
        for q in props["Metrics"]
        if "MetricStat" in q
    }


def dashboard_body(template: dict[str, Any]) -> str:
    (dashboard,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    # Fn::Join of literal pieces and references: keep the literals and mark the references.
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    return "".join(p if isinstance(p, str) else "<ref>" for p in parts)


def dashboard_json(template: dict[str, Any]) -> dict[str, Any]:
    """The dashboard body parsed, each reference replaced by "ref" (inside a string: ref)."""
    body = re.sub(r"'<ref>'", "'ref'", dashboard_body(template))
    parsed: dict[str, Any] = json.loads(re.sub(r'"<ref>"|<ref>', '"ref"', body))
    return parsed


def widget_metrics(template: dict[str, Any]) -> dict[str, set[str]]:
    """Widget title → the metric names it plots."""
    body = dashboard_json(template)
    found: dict[str, set[str]] = {}
    for widget in body["widgets"]:
        props = widget["properties"]
        title = props.get("title", "")
        for metric in props.get("metrics", []):
            found.setdefault(title, set()).update(
                m for m in metric if isinstance(m, str) and not m.startswith(("AWS/", "Tether"))
            )
    return found


def test_every_alarm_notifies_the_alarm_topic(template) -> None:
    topic = alarm_topic_id(template)
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    assert len(alarms) == 6
    for props in (a["Properties"] for a in alarms.values()):
        assert props["AlarmActions"] == [{"Ref": topic}]


@pytest.mark.parametrize(
    ("name", "operator", "threshold", "missing"),
    [
        ("MonitorNotRunning", "LessThanThreshold", 1, "breaching"),
        ("LifecycleFailing", "GreaterThanOrEqualToThreshold", 1, "notBreaching"),
        ("SpendNearBudget", "GreaterThanOrEqualToThreshold", 0.8, "notBreaching"),
        ("MonitorFinding", "GreaterThanOrEqualToThreshold", 1, "notBreaching"),
        ("JobFailed", "GreaterThanOrEqualToThreshold", 1, "notBreaching"),
        ("JobsUnsupervised", "GreaterThanOrEqualToThreshold", 1, "notBreaching"),
    ],
)
def test_alarm_thresholds(template, name: str, operator: str, threshold: float, missing: str):
    props = alarm(template, name)
    assert props["ComparisonOperator"] == operator
    assert props["Threshold"] == threshold
    assert props["TreatMissingData"] == missing


def test_alarms_watch_the_right_metrics(template) -> None:
    # One shard: the Minimum of Errors (0 when some run succeeded, missing when none ran).
    monitor = metric_stats(alarm(template, "MonitorNotRunning"))
    assert [(m["MetricName"], m["Stat"]) for m in monitor.values()] == [("Errors", "Minimum")]
    assert all(m["Namespace"] == "AWS/Lambda" for m in monitor.values())
    (monitor_fn, _) = function_by_handler(template, names.MONITOR_HANDLER)
    for m in monitor.values():
        assert m["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": monitor_fn}}]
    assert alarm(template, "MonitorNotRunning")["OKActions"]  # "running again" is news too

    lifecycle = metric_stats(alarm(template, "LifecycleFailing"))
    assert {m["MetricName"] for m in lifecycle.values()} == {
        "ExecutionsFailed",
        "ExecutionsTimedOut",
    }
    for name, metric in (
        ("SpendNearBudget", obs.BUDGET_FRACTION_METRIC),
        ("MonitorFinding", "MonitorFindings"),
        ("JobFailed", obs.JOBS_FAILED_METRIC),
        ("JobsUnsupervised", obs.UNSUPERVISED_METRIC),
    ):
        (stat,) = metric_stats(alarm(template, name)).values()
        assert stat["Namespace"] == names.METRICS_NAMESPACE
        assert stat["MetricName"] == metric
        assert stat["Dimensions"] == [{"Name": "service", "Value": names.SERVICE_NAME}]


def test_correlated_loss_alarms_on_one_held_verdict_and_unsupervised_jobs_on_ten_minutes(
    template,
) -> None:
    """One run that held a dead verdict is news at once (every host may be about to stop
    itself); a job left unsupervised is news once it lasted two periods (every run of ten
    minutes: the Minimum), not for one failed write."""
    held = alarm(template, "MonitorFinding")  # a held verdict counts 1 finding
    ((query,),) = [held["Metrics"]]
    assert (query["MetricStat"]["Stat"], query["MetricStat"]["Period"]) == ("Maximum", 300)
    assert held["EvaluationPeriods"] == 1
    unsupervised = alarm(template, "JobsUnsupervised")
    ((query,),) = [unsupervised["Metrics"]]
    assert (query["MetricStat"]["Stat"], query["MetricStat"]["Period"]) == ("Minimum", 300)
    assert unsupervised["EvaluationPeriods"] == 2
    assert {obs.MONITOR_FINDINGS_METRIC, obs.UNSUPERVISED_METRIC} <= emitted_metric_names()


def test_dashboard_widgets_plot_the_metrics_the_code_emits(template) -> None:
    widgets = widget_metrics(template)
    expected = {
        "Spend of active jobs (USD)": {obs.SPEND_METRIC},
        "Budget used, highest job": {obs.BUDGET_FRACTION_METRIC},
        "Active jobs and instances": {obs.JOBS_METRIC, obs.INSTANCES_METRIC},
        "Heartbeat age, oldest live job (s)": {obs.HEARTBEAT_AGE_METRIC},
        "Recoveries and jobs": {
            obs.RECOVERIES_METRIC,
            obs.HOSTS_BLAMED_METRIC,
            obs.JOBS_SUBMITTED_METRIC,
            obs.JOBS_FAILED_METRIC,
            obs.RENTS_REFUSED_METRIC,
        },
        "Detection → training resumed (s)": {obs.RECOVERY_TIME_METRIC},
        "Checkpoint upload lag (s)": {obs.CHECKPOINT_LAG_METRIC},
        "Work lost per incident (s of training)": {obs.WORK_LOST_METRIC},
        "Lifecycle failures": {"ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted"},
        "Monitor": {
            obs.UNSUPERVISED_METRIC,
            obs.HELD_METRIC,
            obs.ORPHANS_METRIC,
            "TransitionsExhausted",
        },
        "API 4xx / 5xx": {"4xx", "5xx", "Errors"},
    }
    for title, metrics in expected.items():
        assert metrics <= widgets.get(title, set()), title
    assert '"type":"alarm"' in dashboard_body(template)


def test_every_graphed_alarm_has_its_line_on_the_dashboard(template) -> None:
    """The alarm table says which alarms are graphed and under which label; the dashboard's
    layout places each line, and none may be forgotten."""
    graphed = {rule.name: rule.graph_label for rule in obs.ALARM_RULES if rule.graph_label}
    assert graphed == {
        "MonitorNotRunning": "monitor runs that succeeded",
        "LifecycleFailing": "lifecycle executions failed or timed out",
        "SpendNearBudget": "spent / budget",
        "OrphanFound": "orphans destroyed",
        "HeartbeatsLostTogether": "dead verdicts held",
        "JobsUnsupervised": "jobs unsupervised",
        "JobFailed": "jobs failed",
        "RentRefused": "rents refused",
        "TransitionGaveUp": "stops past their last attempt",
    }
    labels = {
        part["label"]
        for widget in dashboard_json(template)["widgets"]
        for metric in widget["properties"].get("metrics", [])
        for part in metric
        if isinstance(part, dict) and "label" in part
    }
    assert set(graphed.values()) <= labels


def test_custom_metrics_have_only_the_service_dimension(template) -> None:
    body = dashboard_body(template)
    for match in re.finditer(r'\["Tether","[^"]+"(?:,"([^"]+)","([^"]+)")?', body):
        assert match.groups() == ("service", names.SERVICE_NAME), match.group(0)


def test_email_subscriptions_are_optional_and_cover_both_topics(template) -> None:
    parameter = template["Parameters"][obs.ALARM_EMAIL_PARAMETER]
    assert parameter["Default"] == ""
    subscriptions = resources(template, "AWS::SNS::Subscription")
    assert len(subscriptions) == 2
    conditions = {s["Condition"] for s in subscriptions.values()}
    assert len(conditions) == 1
    (condition,) = conditions
    assert template["Conditions"][condition] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": obs.ALARM_EMAIL_PARAMETER}, ""]}]
    }
    topics = {s["Properties"]["TopicArn"]["Ref"] for s in subscriptions.values()}
    assert alarm_topic_id(template) in topics and len(topics) == 2
    for s in subscriptions.values():
        assert s["Properties"]["Protocol"] == "email"
        assert s["Properties"]["Endpoint"] == {"Ref": obs.ALARM_EMAIL_PARAMETER}


def test_logs_route_is_iam_authorized_and_its_function_reads_only_what_it_needs(template):
    routes = {
        r["Properties"]["RouteKey"]: r["Properties"]
        for r in resources(template, "AWS::ApiGatewayV2::Route").values()
    }
    method, path = names.LOGS_ROUTE
    assert routes[f"{method} {path}"]["AuthorizationType"] == "AWS_IAM"
    _, logs_fn = function_by_handler(template, names.LOGS_HANDLER)
    actions = role_actions(template, logs_fn)
    assert {a for a in actions if a.startswith("dynamodb:")} == set(LOGS_TABLE_ACTIONS)
    assert "ssm:GetParameter" in actions
    env = logs_fn["Properties"]["Environment"]["Variables"]
    assert names.CLOUDFLARE_SECRET_ARN_ENV in env and names.VAST_SECRET_ARN_ENV not in env
    # The heartbeat function does not get the Cloudflare secret (the jobs function does, for
    # code archives: tests/infra/api/test_code_grants.py).
    _, heartbeat_fn = function_by_handler(template, names.HEARTBEAT_HANDLER)
    assert "ssm:GetParameter" not in role_actions(template, heartbeat_fn)


def emitted_metric_names() -> set[str]:
    """Every custom metric name the functions can emit: each emitter driven with everything
    non-zero (Powertools keeps the run's metrics in `metric_set` until flushed)."""
    from functions.api import metrics as api_metrics
    from functions.domain import measures
    from functions.lifecycle import metrics as lifecycle_metrics
    from functions.lifecycle.steps import StepOutput
    from functions.monitor.report import MonitorReport
    from functions.observability import metrics

    metrics.clear_metrics()
    monitor_metrics.emit(
        MonitorReport(
            jobs=2, unsupervised=1, instances=None, held=1, transitions_started=1,
            transitions_retried=1, transitions_exhausted=1, credentials_renewed=1,
            hosts_blamed=1, orphans_destroyed=1, errors=1, spend_usd=1.0, tether_instances=1,
            budget_used_max_fraction=0.5, heartbeat_age_max_s=3.0, work_lost_s=[1.0],
            vast_records_skipped=1, vast_fields_dropped=1,
            verdicts={cause: 1 for cause in measures.RECOVERY_CAUSES},
        )
    )  # fmt: skip
    lifecycle_metrics.step_done(StepOutput(outcome="failed", state="FAILED"))
    lifecycle_metrics.step_done(StepOutput(outcome="rent_refused", state="PROVISIONING"))
    api_metrics.job_submitted(created=True)
    api_metrics.cancel_requested()
    names_ = set(metrics.metric_set)
    metrics.clear_metrics()
    # The heartbeat's measures: tests/integration/api/test_job_events_and_measures.py
    return names_ | {measures.RECOVERY_TIME_METRIC, measures.CHECKPOINT_LAG_METRIC}


def test_alarms_and_dashboard_read_only_metrics_the_functions_emit(template) -> None:
    """A renamed or folded metric leaves no alarm or widget watching a name nobody sends."""
    emitted = emitted_metric_names()
    read: set[str] = set()
    for props in (a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()):
        read |= {
            m["MetricName"]
            for m in metric_stats(props).values()
            if m["Namespace"] == names.METRICS_NAMESPACE
        }
    body = dashboard_json(template)
    for widget in body["widgets"]:
        for metric in widget["properties"].get("metrics", []):
            if metric and metric[0] == names.METRICS_NAMESPACE:
                read.add(metric[1])
    assert read and read <= emitted, read - emitted
    assert not any(n.startswith(("Verdict_", "Lifecycle_")) for n in emitted)


def test_per_cause_and_per_outcome_counts_come_from_the_log_lines(template) -> None:
    """The folded families: recoveries per cause from the monitor run's `verdicts`, lifecycle
    outcomes from the lifecycle step's `outcome`, queried on those functions' log groups."""
    from functions.domain import measures

    body = dashboard_json(template)
    queries = {
        w["properties"]["title"]: w["properties"]["query"]
        for w in body["widgets"]
        if w["type"] == "log"
    }
    causes = queries[obs.REPLACES_BY_CAUSE]
    assert f'message = "{measures.MONITOR_RUN_MESSAGE}"' in causes
    for cause in measures.RECOVERY_CAUSES:
        assert f"sum(verdicts.{cause})" in causes
    # moves to a cheaper host: replaces that are not recoveries, no metric of their own
    assert "sum(verdicts.overpriced) as moves" in causes
    outcomes = queries["Lifecycle outcomes (hosts rented, destroyed, …)"]
    assert f'message = "{measures.LIFECYCLE_STEP_MESSAGE}"' in outcomes
    assert all(f'"{o}"' in outcomes for o in measures.LIFECYCLE_OUTCOMES)
    assert all(q.startswith("SOURCE 'ref' | ") for q in queries.values())
    # the references: the monitor's and the lifecycle function's log groups
    (dashboard,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    refs = [
        p for p in dashboard["Properties"]["DashboardBody"]["Fn::Join"][1] if isinstance(p, dict)
    ]
    for handler in (names.MONITOR_HANDLER, names.LIFECYCLE_HANDLER):
        _, function = function_by_handler(template, handler)
        assert function["Properties"]["LoggingConfig"]["LogGroup"] in refs, handler


def test_every_concern_without_an_alarm_names_the_alarm_that_catches_it(template) -> None:
    """A row folded into another alarm (to bill fewer alarm metrics) must name one that exists,
    and that alarm must read what the folded row's failure sends."""
    caught = {rule.name: rule.caught_by for rule in obs.ALARM_RULES if rule.caught_by}
    assert caught == {
        "OrphanFound": "MonitorFinding",
        "HeartbeatsLostTogether": "MonitorFinding",
        "TransitionGaveUp": "MonitorFinding",
        "RentRefused": "JobFailed",
    }
    for name, by in caught.items():
        alarm(template, by)
        assert not any(
            k.startswith(f"{names.OBSERVABILITY_ID}{name}")
            for k in resources(template, "AWS::CloudWatch::Alarm")
        ), name


def test_the_alarms_read_seven_metrics_at_one_shard(template) -> None:
    """$0.10 a month each at list price: with the idle monitor's $0.22 the idle month stays
    under $1 (bench/control_plane_cost.py)."""
    from bench.lib import cost

    assert cost.alarm_metrics(template) == 7


def test_no_dashboard_leaves_the_dashboard_out_and_keeps_every_alarm(
    template, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infra.synth import synth_template

    monkeypatch.setenv(names.DASHBOARD_ENV, "false")
    bare = synth_template(bundle=False)
    assert resources(bare, "AWS::CloudWatch::Dashboard") == {}
    assert resources(template, "AWS::CloudWatch::Dashboard")
    assert resources(bare, "AWS::CloudWatch::Alarm") == resources(
        template, "AWS::CloudWatch::Alarm"
    )
    assert bare["Outputs"][names.OUTPUT_DASHBOARD]["Value"] == "off"
    assert template["Outputs"][names.OUTPUT_DASHBOARD]["Value"] == "on"
