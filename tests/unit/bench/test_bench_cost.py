"""The control-plane cost arithmetic (bench/lib/cost.py) and the recovery breakdown
(bench/lib/recovery.py): pure, no stack."""

from __future__ import annotations

import pytest

from bench.lib import cost, prices
from bench.lib.cost import PerEvent, Rates, Usage
from bench.lib.local_run import emf_metrics
from bench.lib.recovery import Milestones, breakdown


def test_invocation_usage_counts_gb_seconds_and_calls() -> None:
    usage = cost.invocation_usage(
        512,
        0.2,
        {"secretsmanager.GetSecretValue": 2, "s3.PutObject": 1, "s3.GetObject": 3,
         "s3.DeleteObject": 4, "sns.Publish": 1, "dynamodb.Query": 5},
        read_units=1.5,
        write_units=3,
        log_bytes=2_000,
        via_http_api=True,
    )  # fmt: skip
    assert usage.lambda_requests == 1
    assert usage.lambda_gb_s == pytest.approx(0.1)
    assert usage.http_api_requests == 1
    assert usage.secrets_calls == 2
    assert (usage.r2_class_a, usage.r2_class_b) == (1, 3)  # deletes are free
    assert usage.sns_publishes == 1
    assert usage.log_gb == pytest.approx(2e-6)
    assert (usage.dynamodb_read_units, usage.dynamodb_write_units) == (1.5, 3)


def test_usage_arithmetic() -> None:
    a = Usage(lambda_requests=2, dynamodb_write_units=4)
    b = Usage(lambda_requests=1, dynamodb_write_units=6)
    assert (a + b).dynamodb_write_units == 10
    assert (a * 3).lambda_requests == 6
    assert (a - b).floor_zero() == Usage(lambda_requests=1)
    assert cost.mean([a, b]).dynamodb_write_units == 5
    with pytest.raises(ValueError):
        cost.mean([])


def test_priced_at_list_price_and_within_the_free_tier() -> None:
    month = Usage(lambda_requests=1_500_000, dynamodb_write_units=1e6)
    listed = cost.priced(month)
    assert listed["lambda_requests"] == pytest.approx(0.30)
    assert listed["dynamodb_write_units"] == pytest.approx(0.625)  # no free tier on demand
    free = cost.priced(month, free_used=Usage())
    assert free["lambda_requests"] == pytest.approx(0.10)  # 1M free
    assert free["dynamodb_write_units"] == pytest.approx(0.625)
    # The idle month already used the free requests: a job-hour pays for all of its own.
    spent = cost.priced(Usage(lambda_requests=10), free_used=Usage(lambda_requests=2e6))
    assert spent["lambda_requests"] == pytest.approx(10 * prices.LAMBDA_REQUEST.usd)


def test_metrics_are_billed_per_month_and_pro_rata_per_hour() -> None:
    assert cost.metric_usd_per_month(12, free=False) == pytest.approx(3.60)
    assert cost.metric_usd_per_month(12, free=True) == pytest.approx(0.60)  # 10 free
    assert cost.metric_usd_per_month(3, free=True) == 0
    assert cost.metric_usd_per_hour(730) == pytest.approx(0.30)


def test_scaling_to_production_rates() -> None:
    one = Usage(lambda_requests=1)
    events = PerEvent(
        heartbeat=one,
        monitor_idle=Usage(lambda_requests=1, dynamodb_read_units=0.5),
        monitor_per_job=Usage(dynamodb_write_units=2),
        job_start_and_end=Usage(sfn_transitions=15),
        replace=Usage(sfn_transitions=9),
        user_call=one,
        checkpoint=Usage(dynamodb_write_units=20),
        generation_heartbeats=Usage(dynamodb_write_units=12),
    )
    rates = Rates(
        heartbeat_interval_s=15, monitor_runs_per_hour=60, job_hours=3,
        incidents_per_job_hour=0.5, user_calls_per_job_hour=4, checkpoints_per_job_hour=6,
    )  # fmt: skip
    lines = cost.per_job_hour(events, rates)
    assert lines["heartbeats"].lambda_requests == 240
    assert lines["checkpoints"].dynamodb_write_units == 120
    # hosts started per job-hour: the first over the job's 3 h, and 0.5 replacements
    assert lines["host_start_heartbeats"].dynamodb_write_units == pytest.approx(12 * (1 / 3 + 0.5))
    assert lines["monitor"].dynamodb_write_units == 120
    assert lines["start_and_end"].sfn_transitions == 5
    assert lines["replacements"].sfn_transitions == 4.5
    assert lines["user_calls"].lambda_requests == 4
    idle = cost.idle_month(events, rates)
    assert idle.lambda_requests == 43_800
    assert idle.scheduler_invocations == 43_800
    assert idle.dynamodb_read_units == 21_900


def test_emf_metrics_are_distinct_name_and_dimension_combinations() -> None:
    line = (
        '{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"Tether","Dimensions":'
        '[["service"]],"Metrics":[{"Name":"Heartbeats","Unit":"Count"},{"Name":"Lag"}]}]},'
        '"service":"tether","Heartbeats":[1.0],"Lag":[0.0]}'
    )
    found, size = emf_metrics(f"not json\n{line}\n{line}\n" + '{"level": "INFO"}\n')
    assert found == {"Tether/Heartbeats/service=tether", "Tether/Lag/service=tether"}
    assert size == 2 * (len(line) + 1)


def test_recovery_breakdown_and_goals() -> None:
    m = Milestones(
        kind="frozen", fault_at=100.0, detected_at=106.5, execution_start=106.6,
        execution_stop=107.5, rent_at=107.2, first_heartbeat_at=108.7, restoring_at=108.8,
        training_at=109.4, first_step_at=111.9,
    )  # fmt: skip
    i = breakdown(m, threshold_s=6, monitor_interval_s=1)
    assert i.detection_s == pytest.approx(6.5)
    assert i.excess_over_interval == pytest.approx(0.5)
    assert i.detection_within_goal and i.rent_within_execution
    assert i.to_rent_s == pytest.approx(0.7)
    assert i.startup_s == pytest.approx(1.5)
    assert i.restore_s == pytest.approx(0.6)
    assert i.first_step_s == pytest.approx(2.5)
    assert i.total_s == pytest.approx(11.9)  # to the first step, not to the process start
    late = breakdown(m, threshold_s=5, monitor_interval_s=1)
    assert not late.detection_within_goal
    outside = Milestones(**{**m.__dict__, "rent_at": 108.0})
    assert not breakdown(outside, threshold_s=6, monitor_interval_s=1).rent_within_execution


def test_recovery_breakdown_of_an_incident_never_detected() -> None:
    m = Milestones("dead", 10.0, None, None, None, None, None, None, None, None)
    i = breakdown(m, threshold_s=0, monitor_interval_s=1)
    assert i.detection_s is None and i.total_s is None
    assert not i.detection_within_goal and not i.rent_within_execution


def test_traced_invocations_and_secure_string_reads_are_priced() -> None:
    """A traced invocation is an X-Ray trace; an SSM SecureString read a KMS request (aws/ssm)."""
    usage = cost.invocation_usage(
        256, 0.1, {"ssm.GetParameter": 2}, read_units=0, write_units=0, log_bytes=0,
        via_http_api=False, traced=True,
    )  # fmt: skip
    assert (usage.xray_traces, usage.kms_requests, usage.secrets_calls) == (1, 2, 0)
    listed = cost.priced(usage * 43_800)
    assert listed["xray_traces"] == pytest.approx(0.219)  # a minutely traced function
    assert cost.priced(usage * 43_800, free_used=Usage())["xray_traces"] == 0  # 100k free
    untraced = cost.invocation_usage(
        256, 0.1, {}, read_units=0, write_units=0, log_bytes=0, via_http_api=False
    )
    assert untraced.xray_traces == 0


def test_alarms_and_dashboards_are_counted_from_the_template() -> None:
    """A math alarm bills each metric it reads; the dashboard $3 beyond the 3 free."""
    template = {
        "Resources": {
            "A": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "X"}},
            "B": {
                "Type": "AWS::CloudWatch::Alarm",
                "Properties": {
                    "Metrics": [
                        {"Id": "e", "Expression": "a+b"},
                        {"MetricStat": {}},
                        {"MetricStat": {}},
                    ]
                },
            },
            "D": {"Type": "AWS::CloudWatch::Dashboard", "Properties": {}},
        }
    }
    assert (cost.alarm_metrics(template), cost.dashboards(template)) == (3, 1)
    assert cost.observability_usd_per_month(template, free=False) == pytest.approx(
        {"alarms": 0.30, "dashboard": 3.00}
    )
    assert cost.observability_usd_per_month(template, free=True) == {"alarms": 0, "dashboard": 0}


def test_heartbeats_are_told_apart_by_what_they_wrote() -> None:
    """Steady heartbeats are scaled by the heartbeat rate, a checkpoint's by the checkpoint
    rate, a host's start-up ones per host (bench/control_plane_cost.py)."""
    from bench.control_plane_cost import heartbeat_kind
    from bench.lib.local_run import Invocation

    def beat(**calls: int) -> Invocation:
        invocation = Invocation(function="heartbeat", memory_mb=256, started_at=0.0)
        invocation.aws_calls.update({f"dynamodb.{k}": n for k, n in calls.items()})
        return invocation

    assert heartbeat_kind(beat(BatchGetItem=1, UpdateItem=1)) == "steady"
    assert heartbeat_kind(beat(BatchGetItem=1, UpdateItem=2)) == "host_start"
    assert heartbeat_kind(beat(BatchGetItem=1, UpdateItem=2, PutItem=1)) == "host_start"
    assert heartbeat_kind(beat(BatchGetItem=1, UpdateItem=2, TransactWriteItems=1)) == "checkpoint"
    assert heartbeat_kind(beat(BatchGetItem=1)) == "wrote_nothing"
    assert heartbeat_kind(beat()) == "wrote_nothing"
