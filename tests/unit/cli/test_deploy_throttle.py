"""`tether deploy --heartbeat-rate/--heartbeat-burst`: the heartbeat route's throttle as stack
parameters (docs/deploy.md#throttles), within API Gateway's account quota."""

from __future__ import annotations

import pytest

from tether_cli import deploy
from tether_cli.main import build_parser, main


def parameters(*argv: str) -> list[str]:
    return deploy.deploy_parameters(build_parser().parse_args(["deploy", *argv]))


def test_the_heartbeat_throttle_is_passed_as_stack_parameters() -> None:
    assert parameters("--heartbeat-rate", "200", "--heartbeat-burst", "400") == [
        "--parameters", "HeartbeatRateLimit=200",
        "--parameters", "HeartbeatBurstLimit=400",
    ]  # fmt: skip


def test_nothing_given_passes_nothing_and_the_stack_keeps_its_values() -> None:
    assert parameters() == []
    assert parameters("--email", "me@example.com") == ["--parameters", "AlarmEmail=me@example.com"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--heartbeat-rate", "0"],
        ["--heartbeat-rate", "10001"],  # past the account's 10,000 a second
        ["--heartbeat-rate", "1e3"],
        ["--heartbeat-burst", "5001"],  # past the account's burst of 5,000
        ["--heartbeat-burst", "-1"],
    ],
)
def test_a_throttle_outside_the_account_quota_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main(["deploy", *argv]) == 2
    assert "must be a whole number from 1 to" in capsys.readouterr().err
