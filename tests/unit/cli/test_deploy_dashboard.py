"""`tether deploy --no-dashboard`: the CloudWatch dashboard ($3 a month beyond an account's 3
free) left out, a synth-time setting that later deploys keep, like the shard count; the alarms
stay (docs/observability.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra import names
from tether_cli import deploy
from tether_cli.main import build_parser
from tether_cli.output import CliError


def flag(*argv: str) -> bool | None:
    dashboard: bool | None = build_parser().parse_args(["deploy", *argv]).dashboard
    return dashboard


def test_the_flag_parses_both_ways_and_defaults_to_unsaid() -> None:
    assert flag("--no-dashboard") is False
    assert flag("--dashboard") is True
    assert flag() is None


def test_the_dashboard_comes_from_the_flag_the_environment_or_the_deployed_stack() -> None:
    env = {"TETHER_DASHBOARD": "false"}
    deployed = {"Dashboard": "off"}
    assert deploy.dashboard_setting(True, env, deployed) == (True, "--dashboard")
    assert deploy.dashboard_setting(False, {}, {}) == (False, "--no-dashboard")
    assert deploy.dashboard_setting(None, env, {}) == (False, "TETHER_DASHBOARD")
    # A plain redeploy keeps a stack without its dashboard so: the setting is no parameter.
    assert deploy.dashboard_setting(None, {}, deployed) == (False, "the deployed stack")
    assert deploy.dashboard_setting(None, {}, {"Dashboard": "on"}) == (True, "the deployed stack")
    assert deploy.dashboard_setting(None, {}, {}) == (True, "the default")


def test_a_bad_dashboard_setting_is_a_usage_error() -> None:
    with pytest.raises(CliError, match="TETHER_DASHBOARD: 'maybe' is not true or false"):
        deploy.dashboard_setting(None, {"TETHER_DASHBOARD": "maybe"}, {})


def test_the_synth_is_told_the_dashboard(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[dict[str, str] | None] = []

    def record(_command: list[str], *, cwd: Path, env: dict[str, str] | None) -> int:
        seen.append(env)
        return 0

    monkeypatch.setattr(deploy, "run_command", record)
    deploy.synth(tmp_path, 1, None, False)
    deploy.synth(tmp_path, 1, None, True)
    assert [env and env[names.DASHBOARD_ENV] for env in seen] == ["false", "true"]
    # the stack reads the context the environment variable gives
    assert names.SYNTH_CONTEXT_ENV[names.DASHBOARD_ENV] == names.DASHBOARD_CONTEXT


@pytest.mark.parametrize(
    ("value", "wanted"),
    [(None, True), (True, True), (False, False), ("false", False), ("off", False), ("1", True)],
)
def test_the_dashboard_context(value: object, wanted: bool) -> None:
    assert names.dashboard_wanted(value) is wanted


def test_a_bad_dashboard_context_fails_the_synth_naming_it() -> None:
    with pytest.raises(ValueError, match="context dashboard='maybe'"):
        names.dashboard_wanted("maybe")
