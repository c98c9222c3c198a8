"""Every AWS and Cloudflare R2 price the benchmarks use, with its date and source, in one place.

Region us-east-1, on-demand, no savings plans. Prices are the vendors' list prices as published
in late 2026, from the public pricing pages named in each `source`; the EC2 figures for the
always-on comparison VM are marked as such. Check them before quoting a figure to a customer.

Only the benchmarks read this module: the deployed functions never price AWS calls at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

SHEET = "list price, late 2026"
AS_OF = "2026-late (price sheet date); us-east-1"
HOURS_PER_MONTH = 730.0  # AWS bills a month as 730 hours


@dataclass(frozen=True)
class Price:
    usd: float  # dollars per `unit`
    unit: str
    source: str
    free_per_month: float = 0.0  # units in the monthly free tier (0 = none)


LAMBDA_REQUEST = Price(
    0.20 / 1e6, "request", f"{SHEET}; aws.amazon.com/lambda/pricing", free_per_month=1e6
)
LAMBDA_ARM_GB_S = Price(
    0.0000133334, "GB-second (arm64)", f"{SHEET}; aws.amazon.com/lambda/pricing", 400_000
)
SFN_STANDARD_TRANSITION = Price(
    0.025 / 1000, "state transition", f"{SHEET}; aws.amazon.com/step-functions/pricing", 4000
)
DYNAMODB_WRITE_UNIT = Price(
    0.625 / 1e6, "write request unit (on demand)", f"{SHEET}; aws.amazon.com/dynamodb/pricing"
)
DYNAMODB_READ_UNIT = Price(
    0.125 / 1e6, "read request unit (on demand)", f"{SHEET}; aws.amazon.com/dynamodb/pricing"
)
HTTP_API_REQUEST = Price(
    1.00 / 1e6, "HTTP API request (first 300M)", f"{SHEET}; aws.amazon.com/api-gateway/pricing"
)
SCHEDULER_INVOCATION = Price(
    1.00 / 1e6,
    "EventBridge Scheduler invocation",
    f"{SHEET}; aws.amazon.com/eventbridge/pricing",
    free_per_month=14e6,
)
CLOUDWATCH_METRIC_MONTH = Price(
    0.30, "custom metric-month", f"{SHEET}; aws.amazon.com/cloudwatch/pricing"
)
SECRET_MONTH = Price(0.40, "secret-month", f"{SHEET}; aws.amazon.com/secrets-manager/pricing")
SECRETS_API_CALL = Price(
    0.05 / 10_000, "Secrets Manager API call", f"{SHEET}; aws.amazon.com/secrets-manager/pricing"
)
# Not on the sheet: what the functions' log lines (EMF metric lines included) and notifications
# cost, from aws.amazon.com/cloudwatch/pricing and /sns/pricing (2024–2026 list prices).
CLOUDWATCH_LOGS_GB = Price(
    0.50, "GB of logs ingested", "aws.amazon.com/cloudwatch/pricing (not on the sheet)", 5.0
)
SNS_PUBLISH = Price(
    0.50 / 1e6, "SNS publish (64 KB)", "aws.amazon.com/sns/pricing (not on the sheet)", 1e6
)
# Not on the sheet either (aws.amazon.com/xray/pricing, /kms/pricing, /systems-manager/pricing,
# 2024–2026 list prices): X-Ray traces recorded (Lambda's active tracing samples the first
# request of each second, so a minutely function records every run), KMS requests (the SSM
# SecureString provider keys are decrypted with the AWS-managed aws/ssm key: no monthly fee,
# requests billed), and SSM standard parameters (free at rest and at standard throughput).
XRAY_TRACE = Price(
    5.00 / 1e6, "X-Ray trace recorded", "aws.amazon.com/xray/pricing (not on the sheet)", 100_000
)
KMS_REQUEST = Price(
    0.03 / 10_000, "KMS request", "aws.amazon.com/kms/pricing (not on the sheet)", 20_000
)
SSM_STANDARD_PARAMETER_MONTH = Price(
    0.0, "SSM standard parameter-month", "aws.amazon.com/systems-manager/pricing (not on sheet)"
)
# The stack's alarms and dashboard bill every month, idle or not (aws.amazon.com/cloudwatch/
# pricing, not on the sheet): $0.10 per standard-resolution alarm metric (a metric-math alarm
# counts each metric it reads; 10 free), $3 per dashboard (3 free, up to 50 metrics each).
CLOUDWATCH_ALARM_METRIC_MONTH = Price(
    0.10, "alarm metric-month", "aws.amazon.com/cloudwatch/pricing (not on the sheet)", 10
)
CLOUDWATCH_DASHBOARD_MONTH = Price(
    3.00, "dashboard-month", "aws.amazon.com/cloudwatch/pricing (not on the sheet)", 3
)
# The always-free custom metrics (CloudWatch free tier; the sheet quotes only the price).
CLOUDWATCH_FREE_METRICS = 10

R2_STORAGE_GB_MONTH = Price(0.015, "GB-month", f"{SHEET}; developers.cloudflare.com/r2/pricing")
R2_CLASS_A = Price(4.50 / 1e6, "class A op (put, part, list)", R2_STORAGE_GB_MONTH.source)
R2_CLASS_B = Price(0.36 / 1e6, "class B op (get, head)", R2_STORAGE_GB_MONTH.source)

# The peers' control planes (their own docs and pricing pages, late 2026).
SKYPILOT_CONTROLLER_HOUR = Price(
    0.25, "controller VM hour (m6i.xlarge) while jobs run", f"{SHEET}; peers.md"
)
# Not on the sheet: the smallest VM that meets dstack's "1 CPU / 1 GB, always on" (t4g.micro,
# 2 vCPU / 1 GiB), its 8 GB gp3 root disk and the public IPv4 address its clients reach it on,
# from aws.amazon.com/ec2/pricing/on-demand, /ebs/pricing and /vpc/pricing (2024–2026 list prices).
DSTACK_VM_HOUR = Price(0.0084, "t4g.micro hour", "aws.amazon.com/ec2/pricing (not on the sheet)")
DSTACK_DISK_MONTH = Price(0.08 * 8, "8 GB gp3 month", "aws.amazon.com/ebs/pricing (not on sheet)")
DSTACK_IPV4_HOUR = Price(0.005, "public IPv4 hour", "aws.amazon.com/vpc/pricing (not on sheet)")


def dstack_server_usd_per_month() -> float:
    """The always-on server a self-hosted dstack needs, per month."""
    hourly = DSTACK_VM_HOUR.usd + DSTACK_IPV4_HOUR.usd
    return hourly * HOURS_PER_MONTH + DSTACK_DISK_MONTH.usd


ALL: dict[str, Price] = {
    "lambda_request": LAMBDA_REQUEST,
    "lambda_arm_gb_s": LAMBDA_ARM_GB_S,
    "sfn_standard_transition": SFN_STANDARD_TRANSITION,
    "dynamodb_write_unit": DYNAMODB_WRITE_UNIT,
    "dynamodb_read_unit": DYNAMODB_READ_UNIT,
    "http_api_request": HTTP_API_REQUEST,
    "scheduler_invocation": SCHEDULER_INVOCATION,
    "cloudwatch_metric_month": CLOUDWATCH_METRIC_MONTH,
    "secret_month": SECRET_MONTH,
    "secrets_api_call": SECRETS_API_CALL,
    "xray_trace": XRAY_TRACE,
    "cloudwatch_alarm_metric_month": CLOUDWATCH_ALARM_METRIC_MONTH,
    "cloudwatch_dashboard_month": CLOUDWATCH_DASHBOARD_MONTH,
    "kms_request": KMS_REQUEST,
    "ssm_standard_parameter_month": SSM_STANDARD_PARAMETER_MONTH,
    "cloudwatch_logs_gb": CLOUDWATCH_LOGS_GB,
    "sns_publish": SNS_PUBLISH,
    "r2_storage_gb_month": R2_STORAGE_GB_MONTH,
    "r2_class_a": R2_CLASS_A,
    "r2_class_b": R2_CLASS_B,
    "skypilot_controller_hour": SKYPILOT_CONTROLLER_HOUR,
    "dstack_vm_hour": DSTACK_VM_HOUR,
    "dstack_disk_month": DSTACK_DISK_MONTH,
    "dstack_ipv4_hour": DSTACK_IPV4_HOUR,
}


def as_json() -> dict[str, object]:
    """The sheet as benchmarks record it beside their results."""
    return {
        "as_of": AS_OF,
        "prices": {
            name: {"usd": p.usd, "unit": p.unit, "source": p.source, "free": p.free_per_month}
            for name, p in ALL.items()
        },
    }
