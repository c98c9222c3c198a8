"""`tether deploy --heartbeat-rate/--heartbeat-burst`: the heartbeat route's throttle as stack
parameters (docs/deploy.md#throttles), within API Gateway's account quota; and
`--monitor-shards` and the `--*-concurrency` reservations, synth-time settings that later
deploys keep."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether_cli import deploy
from tether_cli.main import build_parser, main
from tether_cli.output import CliError


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


# --- monitor shards (a synth-time setting, docs/deploy.md#monitor-shards-large-fleets) ---------


def test_monitor_shards_come_from_the_flag_the_environment_or_the_deployed_stack() -> None:
    env = {"TETHER_MONITOR_SHARDS": "2"}
    deployed = {"MonitorShards": "4"}
    assert deploy.monitor_shards(8, env, deployed) == (8, "--monitor-shards")
    assert deploy.monitor_shards(None, env, deployed) == (2, "TETHER_MONITOR_SHARDS")
    # A plain redeploy keeps a sharded fleet sharded: the count is not a stack parameter.
    assert deploy.monitor_shards(None, {}, deployed) == (4, "the deployed stack")
    assert deploy.monitor_shards(None, {}, {}) == (1, "the default")


@pytest.mark.parametrize("value", ["0", "17", "four"])
def test_a_bad_monitor_shard_count_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    assert main(["deploy", "--monitor-shards", value]) == 2
    assert "--monitor-shards" in capsys.readouterr().err
    with pytest.raises(CliError, match="TETHER_MONITOR_SHARDS"):
        deploy.monitor_shards(None, {"TETHER_MONITOR_SHARDS": value}, {})


def test_the_synth_is_told_the_shard_count(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[dict[str, str] | None] = []

    def record(command: object, cwd: object = None, env: dict[str, str] | None = None) -> int:
        seen.append(env)
        return 0

    monkeypatch.setattr(deploy, "run_command", record)
    deploy.synth(tmp_path, 4)
    deploy.synth(tmp_path)
    assert seen[0] is not None and seen[0]["TETHER_MONITOR_SHARDS"] == "4"
    assert seen[1] is None


def concurrency(
    argv: tuple[str, ...] = (),
    environ: dict[str, str] | None = None,
    deployed: dict[str, str] | None = None,
) -> dict[str, int]:
    args = build_parser().parse_args(["deploy", *argv])
    return deploy.reserved_concurrency(args, environ or {}, deployed or {})[0]


def test_reservations_come_from_the_flag_the_environment_or_the_deployed_stack() -> None:
    deployed = {"LifecycleConcurrency": "40", "JobsConcurrency": "20", "MonitorShards": "1"}
    assert (
        concurrency(("--lifecycle-concurrency", "60"), deployed=deployed)[
            "TETHER_LIFECYCLE_CONCURRENCY"
        ]
        == 60
    )
    assert (
        concurrency((), {"TETHER_LIFECYCLE_CONCURRENCY": "50"}, deployed=deployed)[
            "TETHER_LIFECYCLE_CONCURRENCY"
        ]
        == 50
    )
    kept = concurrency((), deployed=deployed)
    assert kept["TETHER_LIFECYCLE_CONCURRENCY"] == 40  # a plain redeploy keeps it raised
    assert kept["TETHER_JOBS_CONCURRENCY"] == 20
    assert "TETHER_HEARTBEAT_CONCURRENCY" not in kept  # nothing said: infra's default
    assert concurrency(()) == {}


def test_the_deployed_monitor_default_follows_a_new_shard_count() -> None:
    # 8 was the default for 4 shards: not a choice to keep once the shard count changes.
    assert "TETHER_MONITOR_CONCURRENCY" not in concurrency(
        (), deployed={"MonitorConcurrency": "8", "MonitorShards": "4"}
    )
    # 12 with 4 shards was chosen: kept.
    assert concurrency((), deployed={"MonitorConcurrency": "12", "MonitorShards": "4"}) == {
        "TETHER_MONITOR_CONCURRENCY": 12
    }


@pytest.mark.parametrize("value", ["0", "901", "lots"])
def test_a_bad_reservation_is_a_usage_error(capsys: pytest.CaptureFixture[str], value: str) -> None:
    assert main(["deploy", "--jobs-concurrency", value]) == 2
    assert "--jobs-concurrency" in capsys.readouterr().err
    with pytest.raises(CliError, match="TETHER_JOBS_CONCURRENCY"):
        concurrency((), {"TETHER_JOBS_CONCURRENCY": value})


def test_the_synth_is_told_the_reservations(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[dict[str, str] | None] = []

    def record(command: object, cwd: object = None, env: dict[str, str] | None = None) -> int:
        seen.append(env)
        return 0

    monkeypatch.setattr(deploy, "run_command", record)
    deploy.synth(tmp_path, 2, {"TETHER_LIFECYCLE_CONCURRENCY": 40})
    assert seen[0] is not None
    assert seen[0]["TETHER_LIFECYCLE_CONCURRENCY"] == "40"
    assert seen[0]["TETHER_MONITOR_SHARDS"] == "2"
