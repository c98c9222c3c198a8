"""What the control plane bills, as pure arithmetic: usage per event, scaled to production rates
and priced with `bench.lib.prices`. `bench/control_plane_cost.py` measures the usage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from bench.lib import prices

# Assumed round trips from Lambda (as in bench/monitor_scale.py): the local stand-ins answer in
# their own time, so billed duration = the handler's own time + these per remote call.
AWS_CALL_S = 0.010
PROVIDER_CALL_S = {"vast": 0.5, "cloudflare": 0.3}
R2_CLASS_A_OPS = frozenset(
    {"PutObject", "CopyObject", "ListObjects", "ListObjectsV2", "CreateMultipartUpload",
     "UploadPart", "CompleteMultipartUpload", "ListMultipartUploads", "ListParts"}
)  # fmt: skip
R2_FREE_OPS = frozenset({"DeleteObject", "DeleteObjects", "AbortMultipartUpload"})


@dataclass(frozen=True)
class Usage:
    """Billable quantities of one event (or a sum or multiple of events)."""

    lambda_requests: float = 0.0
    lambda_gb_s: float = 0.0
    dynamodb_read_units: float = 0.0
    dynamodb_write_units: float = 0.0
    http_api_requests: float = 0.0
    sfn_transitions: float = 0.0
    scheduler_invocations: float = 0.0
    secrets_calls: float = 0.0
    kms_requests: float = 0.0  # SSM SecureString reads (decrypted with aws/ssm)
    xray_traces: float = 0.0
    sns_publishes: float = 0.0
    log_gb: float = 0.0
    r2_class_a: float = 0.0
    r2_class_b: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def __sub__(self, other: Usage) -> Usage:
        return self + other * -1

    def __mul__(self, factor: float) -> Usage:
        return Usage(**{f.name: getattr(self, f.name) * factor for f in fields(self)})

    def floor_zero(self) -> Usage:
        """No negative quantities (a difference of two noisy measurements)."""
        return Usage(**{f.name: max(0.0, getattr(self, f.name)) for f in fields(self)})

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def total(usages: Iterable[Usage]) -> Usage:
    result = Usage()
    for usage in usages:
        result = result + usage
    return result


def mean(usages: Iterable[Usage]) -> Usage:
    items = list(usages)
    if not items:
        raise ValueError("no usage to average")
    return total(items) * (1 / len(items))


def invocation_usage(
    memory_mb: int,
    billed_s: float,
    aws_calls: Mapping[str, int],
    *,
    read_units: float,
    write_units: float,
    log_bytes: int,
    via_http_api: bool,
    traced: bool = False,
) -> Usage:
    """One Lambda invocation and what it called."""

    def calls(
        service: str, ops: frozenset[str] | None = None, exclude: frozenset[str] = frozenset()
    ) -> float:
        return float(
            sum(
                n
                for name, n in aws_calls.items()
                if name.startswith(service + ".")
                and (ops is None or name.split(".", 1)[1] in ops)
                and name.split(".", 1)[1] not in exclude
            )
        )

    r2_a = calls("s3", R2_CLASS_A_OPS)
    return Usage(
        lambda_requests=1,
        lambda_gb_s=memory_mb / 1024 * billed_s,
        dynamodb_read_units=read_units,
        dynamodb_write_units=write_units,
        http_api_requests=1 if via_http_api else 0,
        secrets_calls=calls("secretsmanager"),
        kms_requests=calls("ssm", frozenset({"GetParameter", "GetParameters"})),
        # Lambda samples the first request each second: at the control plane's rates (a run a
        # minute, a heartbeat per job every 15 s) nearly every traced invocation is a trace.
        xray_traces=1 if traced else 0,
        sns_publishes=calls("sns", frozenset({"Publish", "PublishBatch"})),
        log_gb=log_bytes / 1e9,
        r2_class_a=r2_a,
        r2_class_b=calls("s3", exclude=R2_CLASS_A_OPS | R2_FREE_OPS),
    )


PRICED: dict[str, prices.Price] = {
    "lambda_requests": prices.LAMBDA_REQUEST,
    "lambda_gb_s": prices.LAMBDA_ARM_GB_S,
    "dynamodb_read_units": prices.DYNAMODB_READ_UNIT,
    "dynamodb_write_units": prices.DYNAMODB_WRITE_UNIT,
    "http_api_requests": prices.HTTP_API_REQUEST,
    "sfn_transitions": prices.SFN_STANDARD_TRANSITION,
    "scheduler_invocations": prices.SCHEDULER_INVOCATION,
    "secrets_calls": prices.SECRETS_API_CALL,
    "kms_requests": prices.KMS_REQUEST,
    "xray_traces": prices.XRAY_TRACE,
    "sns_publishes": prices.SNS_PUBLISH,
    "log_gb": prices.CLOUDWATCH_LOGS_GB,
    "r2_class_a": prices.R2_CLASS_A,
    "r2_class_b": prices.R2_CLASS_B,
}


def priced(usage: Usage, *, free_used: Usage | None = None) -> dict[str, float]:
    """Dollars per item at list price; with `free_used`, the monthly free tier applies to
    `usage` after `free_used` of it was already spent (pass `Usage()` for a whole month)."""
    dollars: dict[str, float] = {}
    for name, quantity in usage.as_dict().items():
        price = PRICED[name]
        billable = quantity
        if free_used is not None:
            left = max(0.0, price.free_per_month - getattr(free_used, name))
            billable = max(0.0, quantity - left)
        dollars[name] = billable * price.usd
    return dollars


def metric_usd_per_month(metrics: int, *, free: bool) -> float:
    """Custom metrics emitted all month (each name+dimensions combination is one metric)."""
    billable = max(0, metrics - prices.CLOUDWATCH_FREE_METRICS) if free else metrics
    return billable * prices.CLOUDWATCH_METRIC_MONTH.usd


def alarm_metrics(template: Mapping[str, Any]) -> int:
    """Billed alarm metrics: one per single-metric alarm, one per metric a math alarm reads."""
    count = 0
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == "AWS::CloudWatch::Alarm":
            props = resource.get("Properties", {})
            queries = props.get("Metrics", [])
            count += 1 if "MetricName" in props else sum(1 for q in queries if "MetricStat" in q)
    return count


def dashboards(template: Mapping[str, Any]) -> int:
    resources = template.get("Resources", {}).values()
    return sum(1 for r in resources if r.get("Type") == "AWS::CloudWatch::Dashboard")


def observability_usd_per_month(template: Mapping[str, Any], *, free: bool) -> dict[str, float]:
    """The alarms and dashboards a deployment bills every month, idle or not."""
    out: dict[str, float] = {}
    for name, n, price in (
        ("alarms", alarm_metrics(template), prices.CLOUDWATCH_ALARM_METRIC_MONTH),
        ("dashboard", dashboards(template), prices.CLOUDWATCH_DASHBOARD_MONTH),
    ):
        billable = max(0.0, n - price.free_per_month) if free else n
        out[name] = billable * price.usd
    return out


def metric_usd_per_hour(metrics: int) -> float:
    """Metrics emitted only during some hours are billed pro rata by the hour."""
    return metrics * prices.CLOUDWATCH_METRIC_MONTH.usd / prices.HOURS_PER_MONTH


@dataclass(frozen=True)
class Rates:
    """Production rates the per-event usage is scaled by (the local stack runs faster)."""

    heartbeat_interval_s: float = 15.0  # the job spec's default
    monitor_runs_per_hour: float = 60.0  # the schedule's rate(1 minute)
    job_hours: float = 3.0  # one job's length: provision and stop amortise over it
    incidents_per_job_hour: float = 0.25  # dead or hung hosts, each one replace execution
    user_calls_per_job_hour: float = 4.0  # `tether status` and friends
    monitor_runs_per_cold_start: float = 60.0  # a warm container serves about an hour of runs
    # A checkpoint every 10 minutes: more often than the examples save (qlora-7b: 100 of its 800
    # steps, ~22 min on its reference GPU), and the planner's recommended interval is longer.
    checkpoints_per_job_hour: float = 6.0

    @property
    def heartbeats_per_job_hour(self) -> float:
        return 3600 / self.heartbeat_interval_s

    @property
    def generations_per_job_hour(self) -> float:
        """Hosts a job-hour starts: the job's first (over its length) and each replacement's."""
        return 1 / self.job_hours + self.incidents_per_job_hour

    @property
    def monitor_runs_per_month(self) -> float:
        return self.monitor_runs_per_hour * prices.HOURS_PER_MONTH


@dataclass(frozen=True)
class PerEvent:
    """Measured usage of each kind of event."""

    heartbeat: Usage  # a steady one: it writes its heartbeat item alone
    monitor_idle: Usage  # one monitor run with no job
    monitor_per_job: Usage  # what one running job adds to a monitor run
    job_start_and_end: Usage  # submit + provision execution + the finishing stop execution
    replace: Usage  # one replace execution (dead or hung host)
    user_call: Usage
    # What a heartbeat that records a checkpoint costs beyond a steady one.
    checkpoint: Usage = field(default_factory=Usage)
    # What a host's start-up heartbeats (its first, the GPU's first probe, the restore and
    # resume reports, the exit) cost beyond steady ones, per host.
    generation_heartbeats: Usage = field(default_factory=Usage)


def per_job_hour(events: PerEvent, rates: Rates) -> dict[str, Usage]:
    """Each line of a job-hour's usage, scaled to production rates."""
    return {
        "heartbeats": events.heartbeat * rates.heartbeats_per_job_hour,
        "checkpoints": events.checkpoint * rates.checkpoints_per_job_hour,
        "host_start_heartbeats": events.generation_heartbeats * rates.generations_per_job_hour,
        "monitor": events.monitor_per_job * rates.monitor_runs_per_hour,
        "start_and_end": events.job_start_and_end * (1 / rates.job_hours),
        "replacements": events.replace * rates.incidents_per_job_hour,
        "user_calls": events.user_call * rates.user_calls_per_job_hour,
    }


def idle_month(events: PerEvent, rates: Rates) -> Usage:
    runs = rates.monitor_runs_per_month
    return events.monitor_idle * runs + Usage(scheduler_invocations=runs)


def dominant(dollars: Mapping[str, float]) -> tuple[str, float]:
    name = max(dollars, key=lambda k: dollars[k])
    return name, dollars[name]


def with_rates(rates: Rates, **changes: float) -> Rates:
    return replace(rates, **changes)
