"""What a user watches: one CloudWatch dashboard (optional), the alarms, and where they notify.

Metrics are Powertools EMF metrics in the `Tether` namespace with the service as their only
dimension (bounded: every name × dimension combination is a billed custom metric), plus the
services' own metrics (Lambda, Step Functions, API Gateway), which cost nothing extra.

Alarms go to an own `Alarms` SNS topic: CloudWatch cannot publish to a topic encrypted with the
AWS-managed `aws/sns` key (its key policy cannot grant CloudWatch), and a customer-managed key
costs $1 a month, idle or not. Job notifications (rented, ended, failed) go to the lifecycle's
topic. The `AlarmEmail` stack parameter, when set, subscribes an address to both.

Each concern is a row of `ALARM_RULES` (metric, statistic, threshold, periods, description, its
line on the dashboard), as the health rules are a table (`functions/domain/health.py`): the
construct builds the alarms, their notifications and their dashboard lines from the rows.

What they cost, idle or not, at list price (aws.amazon.com/cloudwatch/pricing; the bench's
`bench/lib/prices.py`): $0.10 a month per metric an alarm reads (a metric-math alarm pays for
each metric in its expression, so folding alarms into math saves nothing; a composite alarm
costs $0.50 on top of its children), and $3 a month for the dashboard beyond an account's 3 free
ones. So one alarm per concern: a row whose failure another alarm already reports names that
alarm in `caught_by` and keeps only its dashboard line (the monitor sends one `MonitorFindings`
count for the findings a person should know of; a refused rent fails its job), and an alarm
reads fewer metrics than its line where it can (`alarm_signals`). One shard: 7 alarm metrics,
$0.70 a month. The dashboard is left out with `tether deploy --no-dashboard`
(CDK context `dashboard=false`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from aws_cdk import CfnCondition, CfnParameter, Duration, Fn, Stack
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from functions.domain import measures
from infra import names
from infra.constructs.nag import acknowledge

ALARM_EMAIL_PARAMETER = "AlarmEmail"
ALARMS_TOPIC_ID = "Alarms"
DASHBOARD_ID = "Dashboard"
PERIOD = Duration.minutes(5)
RUNS_PER_PERIOD = PERIOD.to_seconds() // names.MONITOR_INTERVAL_S
SPEND_ALARM_FRACTION = 0.8

# Custom metrics the dashboard and alarms read (names in functions/domain/measures.py; the
# emitters send counters only when non-zero, so an idle deployment sends none):
SPEND_METRIC = measures.SPEND_METRIC  # monitor: spend of all active jobs, USD
JOBS_METRIC = measures.JOBS_METRIC  # monitor: active jobs this run
ORPHANS_METRIC = measures.ORPHANS_METRIC  # monitor
MONITOR_ERRORS_METRIC = measures.MONITOR_ERRORS_METRIC  # monitor: jobs whose handling raised
UNSUPERVISED_METRIC = measures.UNSUPERVISED_METRIC  # monitor: evaluations not completed
SHARD_DIMENSION = measures.SHARD_DIMENSION  # JobsUnsupervised per shard, when sharded
HELD_METRIC = measures.HELD_METRIC  # monitor: dead verdicts held (heartbeats lost together)
HOSTS_BLAMED_METRIC = measures.HOSTS_BLAMED_METRIC  # monitor: a host judged dead or hung
# monitor: a stop past its last attempt (functions/domain/attempts.py), every run it stays so
TRANSITIONS_EXHAUSTED_METRIC = measures.TRANSITIONS_EXHAUSTED_METRIC
RECOVERIES_METRIC = measures.RECOVERIES_METRIC  # monitor: dead, hung or crashed verdicts
RECOVERY_CAUSES = measures.RECOVERY_CAUSES  # per cause: the monitor run's log line
REPLACES_BY_CAUSE = "Replaces by cause (recoveries, moves)"
JOBS_FAILED_METRIC = measures.JOBS_FAILED_METRIC  # lifecycle: a job failed for good
RENTS_REFUSED_METRIC = measures.RENTS_REFUSED_METRIC  # lifecycle: a rent's arguments refused
JOBS_SUBMITTED_METRIC = measures.JOBS_SUBMITTED_METRIC  # jobs API
MONITOR_FINDINGS_METRIC = measures.MONITOR_FINDINGS_METRIC  # monitor: the MonitorFinding alarm
# Measures (definitions in functions/domain/measures.py, the one spelling of their names):
BUDGET_FRACTION_METRIC = measures.BUDGET_FRACTION_METRIC  # monitor: max spent/budget, active jobs
INSTANCES_METRIC = measures.INSTANCES_METRIC  # monitor: labelled instances on Vast (all bill)
HEARTBEAT_AGE_METRIC = measures.HEARTBEAT_AGE_METRIC  # monitor: oldest heartbeat, running jobs
RECOVERY_TIME_METRIC = measures.RECOVERY_TIME_METRIC  # heartbeat: replace started → training
CHECKPOINT_LAG_METRIC = measures.CHECKPOINT_LAG_METRIC  # heartbeat: training past a new upload
WORK_LOST_METRIC = measures.WORK_LOST_METRIC  # monitor: training lost per replace


def recovery_causes_query() -> str:
    """Logs Insights over the monitor's log group: replaces per cause, the recoveries' and the
    moves to a cheaper host, from the run's log line (one metric with a `cause` dimension would
    be billed as one metric per cause)."""
    sums = ", ".join(f"sum(verdicts.{cause}) as {cause}" for cause in RECOVERY_CAUSES)
    sums += f", sum(verdicts.{measures.MOVE_CAUSE}) as moves"
    return f'filter message = "{measures.MONITOR_RUN_MESSAGE}" | stats {sums} by bin(5m)'


def lifecycle_outcomes_query() -> str:
    """Logs Insights over the lifecycle's log group: the step outcomes that matter (hosts
    rented, races lost, no capacity, hosts destroyed, jobs failed), counted per outcome."""
    outcomes = ", ".join(f'"{o}"' for o in measures.LIFECYCLE_OUTCOMES)
    return (
        f'filter message = "{measures.LIFECYCLE_STEP_MESSAGE}" and outcome in [{outcomes}]'
        " | stats count(*) as steps by outcome"
    )


def tether_metric(name: str, statistic: str = "Sum", label: str | None = None) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=names.METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": names.SERVICE_NAME},
        statistic=statistic,
        period=PERIOD,
        label=label or name,
    )


def fleet_gauge(name: str, label: str, shards: int) -> cloudwatch.IMetric:
    """A gauge each monitor run sends for its jobs: the highest a period saw; sharded, each
    shard sends its part, so the fleet's figure is the period's sum over its runs per shard."""
    if shards == 1:
        return tether_metric(name, "Maximum", label)
    key = name.lower()  # ids must differ between the gauges of one graph
    return cloudwatch.MathExpression(
        expression=f"{key} / {RUNS_PER_PERIOD}",
        using_metrics={key: tether_metric(name, "Sum")},
        period=PERIOD,
        label=label,
    )


def highest_of_shards(
    name: str, statistic: str, shards: int, label: str | None = None
) -> cloudwatch.IMetric:
    """A metric each shard sends with a `shard` dimension (`functions/monitor/metrics.py`), read
    as the highest of the shards' own figures, so that one shard's zeros do not hide another's
    failures under a Minimum. Unsharded: the metric itself."""
    if shards == 1:
        return tether_metric(name, statistic, label)
    per_shard = {
        f"u{k}": cloudwatch.Metric(
            namespace=names.METRICS_NAMESPACE,
            metric_name=name,
            dimensions_map={"service": names.SERVICE_NAME, SHARD_DIMENSION: str(k)},
            statistic=statistic,
            period=PERIOD,
        )
        for k in range(shards)
    }
    return cloudwatch.MathExpression(
        expression=f"MAX([{','.join(per_shard)}])",
        using_metrics=per_shard,
        period=PERIOD,
        label=label or name,
    )


Statistic = Literal["Sum", "Maximum", "Minimum", "Average"]
AT_LEAST = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
BELOW = cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD


class Signal(StrEnum):
    """What an alarm reads that is no Tether metric: math over the services' own metrics, which
    the construct builds (it needs the function and the state machine). The value is its label."""

    MONITOR_RUNS_SUCCEEDED = "monitor runs that succeeded"
    # Not ABORTED: tether never stops an execution (an abort is a person's act); the monitor
    # starts the next attempt after an aborted one as after a failed one, and a transition past
    # its last attempt is a finding (stop) or a failed job (provision, replace) all the same.
    LIFECYCLE_FAILURES = "lifecycle executions failed or timed out"


@dataclass(frozen=True)
class AlarmRule:
    """One alarm, and how its line reads on the dashboard.

    It reads `metric` (a Tether metric, `functions/domain/measures.py`, or a `Signal`) at
    `statistic` over PERIOD and goes off after `periods` periods in a row that compare true with
    the threshold: `threshold`, plus `threshold_per_extra_shard` for each monitor shard past the
    first. `per_shard`: sharded, the highest of the shards' own figures (`highest_of_shards`).
    `graph_label` (None: not graphed, only in the alarms' status widget): its line's label on
    the dashboard, read at `graph_statistic` (default: the alarm's); the dashboard's layout
    places the line (`Observability.lines`). `caught_by`: the name of the alarm that already
    reports this failure (then the row has no alarm of its own, only its line).
    """

    name: str  # the construct id, so the start of the alarm's logical id
    description: str
    metric: str
    threshold: float
    statistic: Statistic = "Sum"
    comparison: cloudwatch.ComparisonOperator = AT_LEAST
    periods: int = 1
    missing_data: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING
    threshold_per_extra_shard: float = 0
    per_shard: bool = False
    notify_ok: bool = False  # also notify its return to OK
    graph_label: str | None = None
    graph_statistic: Statistic | None = None
    caught_by: str | None = None

    def threshold_for(self, shards: int) -> float:
        return self.threshold + (shards - 1) * self.threshold_per_extra_shard


# In the order of the alarms' status widget.
ALARM_RULES: tuple[AlarmRule, ...] = (
    AlarmRule(
        "MonitorNotRunning",
        "The monitor has not completed a run for 10 minutes: nobody replaces dead hosts or "
        "checks spend (agents stop themselves after their lease). Sharded: fewer runs "
        "completed than all shards but one would make.",
        Signal.MONITOR_RUNS_SUCCEEDED,
        threshold=1,
        comparison=BELOW,
        periods=2,
        missing_data=cloudwatch.TreatMissingData.BREACHING,
        # Every run of one shard missing is as many as a period holds.
        threshold_per_extra_shard=RUNS_PER_PERIOD,
        # "Back to normal" matters for the monitor: it says the supervisor is running again.
        notify_ok=True,
        graph_label=Signal.MONITOR_RUNS_SUCCEEDED,
    ),
    AlarmRule(
        "LifecycleFailing",
        "A lifecycle execution failed or timed out: the job's timeline says which "
        "step and why; the monitor starts the transition's next attempt, and destroys a stuck "
        "stop's or replace's hosts.",
        Signal.LIFECYCLE_FAILURES,
        threshold=1,
        graph_label=Signal.LIFECYCLE_FAILURES,
    ),
    AlarmRule(
        "SpendNearBudget",
        f"A job has spent {SPEND_ALARM_FRACTION:.0%} of its budget (it is stopped at 100 %). "
        "`tether jobs` shows which.",
        BUDGET_FRACTION_METRIC,
        threshold=SPEND_ALARM_FRACTION,
        statistic="Maximum",
        graph_label="spent / budget",
    ),
    AlarmRule(
        "OrphanFound",
        "The monitor destroyed a labelled Vast instance that belonged to no live job "
        "generation (it was billing for nothing).",
        ORPHANS_METRIC,
        threshold=1,
        graph_label="orphans destroyed",
        caught_by="MonitorFinding",
    ),
    AlarmRule(
        "HeartbeatsLostTogether",
        "Many jobs stopped heartbeating at once while Vast says their hosts run: the fault is "
        "ours or the network's (the API, its throttle, DNS), so the monitor holds their dead "
        "verdicts instead of replacing every host. Each host stops itself when its lease runs "
        "out unless heartbeats come back.",
        HELD_METRIC,
        threshold=1,
        statistic="Maximum",
        graph_label="dead verdicts held",
        caught_by="MonitorFinding",
    ),
    AlarmRule(
        "TransitionGaveUp",
        "A job's stop failed on every attempt: it stays STOPPING (the monitor keeps destroying "
        "its hosts). Its timeline says why each attempt failed.",
        TRANSITIONS_EXHAUSTED_METRIC,
        threshold=1,
        statistic="Maximum",
        graph_label="stops past their last attempt",
        caught_by="MonitorFinding",
    ),
    AlarmRule(
        "MonitorFinding",
        "The monitor found what a person should know of (each has its line on the dashboard, "
        "and the monitor's 'monitor run' log line counts it): an orphan destroyed "
        "(orphans_destroyed: a labelled instance of no live job generation, billing for "
        "nothing), dead verdicts held because heartbeats were lost together (held: the API, "
        "its throttle or the network; hosts stop themselves when their lease runs out), or a "
        "stop past its last attempt (transitions_exhausted: the job stays STOPPING, the monitor "
        "keeps destroying its hosts).",
        MONITOR_FINDINGS_METRIC,
        threshold=1,
        statistic="Maximum",
    ),
    AlarmRule(
        "JobsUnsupervised",
        "The monitor could not complete some job's evaluation for 10 minutes (an item it "
        "cannot read, a failing write or transition): that job's lease is not renewed, so its "
        "host stops itself within the lease. The monitor's log names the job.",
        UNSUPERVISED_METRIC,
        threshold=1,
        statistic="Minimum",  # every run of the two periods
        periods=2,
        per_shard=True,
        graph_label="jobs unsupervised",
        graph_statistic="Maximum",
    ),
    AlarmRule(
        "JobFailed",
        "A job failed for good (no host could be rented, Vast refused the rent's arguments, or "
        "provisioning kept failing). `tether status JOB` shows why.",
        JOBS_FAILED_METRIC,
        threshold=1,
        graph_label="jobs failed",
    ),
    AlarmRule(
        "RentRefused",
        "Vast refuses (or would refuse) a create-instance request for its arguments: over one "
        "of its documented bounds (an env value, the whole env, the label, the onstart "
        "script, …) or answered 400 invalid_args. The job failed without renting; every job "
        "sending that request shape will, until tether or its settings change. The job's "
        "timeline names the field and the bound (docs/vast.md, 'Create-instance limits').",
        RENTS_REFUSED_METRIC,
        threshold=1,
        graph_label="rents refused",
        caught_by="JobFailed",  # the state machine's Fail step fails the job: JobsFailed
    ),
)


class Observability(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        job_topic: sns.ITopic,
        http_api: apigwv2.HttpApi,
        state_machine: sfn.StateMachine,
        monitor_function: lambda_.IFunction,
        api_functions: Mapping[str, lambda_.IFunction],
        monitor_logs: logs.ILogGroup,
        lifecycle_logs: logs.ILogGroup,
        monitor_shards: int = 1,
        dashboard: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        self.alarm_topic = sns.Topic(
            self, ALARMS_TOPIC_ID, display_name="tether alarms", enforce_ssl=True
        )
        acknowledge(
            self.alarm_topic,
            "AwsSolutions-SNS2",
            "CloudWatch alarms cannot publish to a topic encrypted with the AWS-managed aws/sns "
            "key, and a customer-managed key costs $1/month idle; alarm messages carry metric "
            "names and thresholds only, no job data or secrets.",
        )
        self._email_subscriptions(job_topic)

        signals: dict[str, cloudwatch.IMetric] = {
            Signal.MONITOR_RUNS_SUCCEEDED: cloudwatch.MathExpression(
                expression="FILL(invocations, 0) - FILL(errors, 0)",
                using_metrics={
                    "invocations": monitor_function.metric_invocations(period=PERIOD),
                    "errors": monitor_function.metric_errors(period=PERIOD),
                },
                period=PERIOD,
                label=Signal.MONITOR_RUNS_SUCCEEDED.value,
            ),
            Signal.LIFECYCLE_FAILURES: cloudwatch.MathExpression(
                expression="FILL(failed, 0) + FILL(timedout, 0)",
                using_metrics={
                    "failed": state_machine.metric_failed(period=PERIOD),
                    "timedout": state_machine.metric_timed_out(period=PERIOD),
                },
                period=PERIOD,
                label=Signal.LIFECYCLE_FAILURES.value,
            ),
        }

        # What the alarm reads where it can read fewer metrics than the line graphs (each metric
        # an alarm reads is billed). One shard: Lambda sends `Errors` with every invocation, 1 or
        # 0 (invocation metrics are "binary indicators of the outcome", AWS Lambda's metrics
        # docs), so its Minimum over a period is 0 when some run succeeded, 1 when every run
        # failed, and missing when none ran (breaching). Sharded, the alarm counts runs.
        alarm_signals = dict(signals)
        if monitor_shards == 1:
            alarm_signals[Signal.MONITOR_RUNS_SUCCEEDED] = cloudwatch.MathExpression(
                expression="1 - errors",
                using_metrics={
                    "errors": monitor_function.metric_errors(period=PERIOD, statistic="Minimum")
                },
                period=PERIOD,
                label="a monitor run succeeded (1) or none did (0)",
            )

        def reading(
            rule: AlarmRule, statistic: str, label: str | None, *, alarm: bool = False
        ) -> cloudwatch.IMetric:
            if rule.metric in signals:
                return (alarm_signals if alarm else signals)[rule.metric]
            if rule.per_shard:
                return highest_of_shards(rule.metric, statistic, monitor_shards, label)
            return tether_metric(rule.metric, statistic, label)

        action = cw_actions.SnsAction(self.alarm_topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self.lines: dict[str, cloudwatch.IMetric] = {}  # alarm name → its dashboard line
        for rule in ALARM_RULES:
            if rule.graph_label is not None:
                statistic = rule.graph_statistic or rule.statistic
                self.lines[rule.name] = reading(rule, statistic, rule.graph_label)
            if rule.caught_by is not None:
                continue
            alarm = cloudwatch.Alarm(
                self,
                rule.name,
                alarm_description=rule.description,
                metric=reading(rule, rule.statistic, None, alarm=True),
                threshold=rule.threshold_for(monitor_shards),
                comparison_operator=rule.comparison,
                evaluation_periods=rule.periods,
                treat_missing_data=rule.missing_data,
            )
            alarm.add_alarm_action(action)
            if rule.notify_ok:
                alarm.add_ok_action(action)
            self.alarms[rule.name] = alarm

        self.dashboard: cloudwatch.Dashboard | None = None
        if dashboard:
            self.dashboard = self._dashboard(
                http_api, state_machine, monitor_function, api_functions, monitor_logs,
                lifecycle_logs, monitor_shards,
            )  # fmt: skip

    def _dashboard(
        self,
        http_api: apigwv2.HttpApi,
        state_machine: sfn.StateMachine,
        monitor_function: lambda_.IFunction,
        api_functions: Mapping[str, lambda_.IFunction],
        monitor_logs: logs.ILogGroup,
        lifecycle_logs: logs.ILogGroup,
        monitor_shards: int,
    ) -> cloudwatch.Dashboard:
        dashboard = cloudwatch.Dashboard(
            self,
            DASHBOARD_ID,
            dashboard_name=f"{Stack.of(self).stack_name}-tether",
            default_interval=Duration.hours(24),
        )
        dashboard.add_widgets(
            *self._spend_row(monitor_shards), *self._health_row(monitor_logs, lifecycle_logs),
            *self._recovery_row(),
        )  # fmt: skip
        dashboard.add_widgets(
            *self._control_plane_row(http_api, state_machine, monitor_function, api_functions)
        )
        dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(
                title="Alarms", alarms=list(self.alarms.values()), width=24, height=3
            )
        )
        return dashboard

    # --- notifications ----------------------------------------------------------------------

    def _email_subscriptions(self, job_topic: sns.ITopic) -> None:
        email = CfnParameter(
            self,
            ALARM_EMAIL_PARAMETER,
            type="String",
            default="",
            allowed_pattern=r"^$|^[^@\s]+@[^@\s]+\.[^@\s]+$",
            constraint_description="an e-mail address, or empty for none",
            description="E-mail address for tether alarms and job notifications (optional; "
            "confirm the subscription from the first message).",
        )
        email.override_logical_id(ALARM_EMAIL_PARAMETER)  # `--parameters AlarmEmail=…`
        has_email = CfnCondition(
            self,
            "HasAlarmEmail",
            expression=Fn.condition_not(Fn.condition_equals(email.value_as_string, "")),
        )
        for topic_id, topic in (("AlarmsEmail", self.alarm_topic), ("JobsEmail", job_topic)):
            subscription = sns.CfnSubscription(
                self,
                topic_id,
                protocol="email",
                endpoint=email.value_as_string,
                topic_arn=topic.topic_arn,
            )
            subscription.cfn_options.condition = has_email

    # --- dashboard rows ---------------------------------------------------------------------

    def _spend_row(self, shards: int) -> list[cloudwatch.IWidget]:
        spend = cloudwatch.GraphWidget(
            title="Spend of active jobs (USD)",
            left=[fleet_gauge(SPEND_METRIC, "total spend, active jobs", shards)],
            width=8,
        )
        budget = cloudwatch.GraphWidget(
            title="Budget used, highest job",
            left=[self.lines["SpendNearBudget"]],
            left_y_axis=cloudwatch.YAxisProps(min=0, max=1.1),
            left_annotations=[
                cloudwatch.HorizontalAnnotation(value=SPEND_ALARM_FRACTION, label="alarm"),
                cloudwatch.HorizontalAnnotation(value=1.0, label="stopped"),
            ],
            width=8,
        )
        active = cloudwatch.GraphWidget(
            title="Active jobs and instances",
            left=[
                fleet_gauge(JOBS_METRIC, "active jobs", shards),
                fleet_gauge(INSTANCES_METRIC, "billing instances", shards),
            ],
            width=8,
        )
        return [spend, budget, active]

    def _health_row(
        self, monitor_logs: logs.ILogGroup, lifecycle_logs: logs.ILogGroup
    ) -> list[cloudwatch.IWidget]:
        heartbeat = cloudwatch.GraphWidget(
            title="Heartbeat age, oldest live job (s)",
            left=[tether_metric(HEARTBEAT_AGE_METRIC, "Maximum", "heartbeat age")],
            width=8,
        )
        recoveries = cloudwatch.GraphWidget(
            title="Recoveries and jobs",
            left=[
                tether_metric(RECOVERIES_METRIC, "Sum", "recoveries"),
                tether_metric(HOSTS_BLAMED_METRIC, "Sum", "hosts blamed"),
            ],
            right=[
                tether_metric(JOBS_SUBMITTED_METRIC, "Sum", "jobs submitted"),
                self.lines["JobFailed"],
                self.lines["RentRefused"],
            ],
            width=8,
        )
        # Per cause and per lifecycle outcome from the log lines (Logs Insights, billed per GB
        # scanned when the dashboard is viewed), not from a billed metric per value.
        causes = cloudwatch.LogQueryWidget(
            title=REPLACES_BY_CAUSE,
            log_group_names=[monitor_logs.log_group_name],
            query_string=recovery_causes_query(),
            view=cloudwatch.LogQueryVisualizationType.STACKEDAREA,
            width=4,
        )
        outcomes = cloudwatch.LogQueryWidget(
            title="Lifecycle outcomes (hosts rented, destroyed, …)",
            log_group_names=[lifecycle_logs.log_group_name],
            query_string=lifecycle_outcomes_query(),
            view=cloudwatch.LogQueryVisualizationType.TABLE,
            width=4,
        )
        return [heartbeat, recoveries, causes, outcomes]

    @staticmethod
    def _recovery_row() -> list[cloudwatch.IWidget]:
        def average_and_worst(title: str, metric: str) -> cloudwatch.IWidget:
            return cloudwatch.GraphWidget(
                title=title,
                left=[
                    tether_metric(metric, "Average", "average"),
                    tether_metric(metric, "Maximum", "worst"),
                ],
                width=8,
            )

        return [
            average_and_worst("Detection → training resumed (s)", RECOVERY_TIME_METRIC),
            average_and_worst("Checkpoint upload lag (s)", CHECKPOINT_LAG_METRIC),
            average_and_worst("Work lost per incident (s of training)", WORK_LOST_METRIC),
        ]

    def _control_plane_row(
        self,
        http_api: apigwv2.HttpApi,
        state_machine: sfn.StateMachine,
        monitor_function: lambda_.IFunction,
        api_functions: Mapping[str, lambda_.IFunction],
    ) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.GraphWidget(
                title="Monitor",
                left=[self.lines["MonitorNotRunning"]],
                right=[
                    tether_metric(MONITOR_ERRORS_METRIC, "Sum", "job errors"),
                    self.lines["JobsUnsupervised"],
                    self.lines["HeartbeatsLostTogether"],
                    self.lines["OrphanFound"],
                    self.lines["TransitionGaveUp"],
                ],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Lifecycle failures",
                left=[
                    self.lines["LifecycleFailing"],
                    state_machine.metric_aborted(period=PERIOD, label="executions aborted"),
                ],
                right=[monitor_function.metric_throttles(period=PERIOD, label="monitor throttles")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="API 4xx / 5xx",
                left=[
                    http_api.metric_client_error(period=PERIOD, label="4xx"),
                    http_api.metric_server_error(period=PERIOD, label="5xx"),
                ],
                right=[
                    fn.metric_errors(period=PERIOD, label=f"{name} function errors")
                    for name, fn in api_functions.items()
                ],
                width=8,
            ),
        ]
