"""The HTTP API's throttles on the synthesized template (docs/architecture.md#bounded-input): every
route has its own token bucket, the heartbeat route one sized for the fleet, all four numbers are
stack parameters a user can raise, and the stage is created after the routes it names."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.conftest import resources

USER_ROUTE_KEYS = {
    "POST /jobs",
    "GET /jobs",
    "GET /jobs/{id}",
    "POST /jobs/{id}/cancel",
    "GET /jobs/{id}/logs",
    "GET /jobs/{id}/files",
}
HEARTBEAT_KEY = "POST /agent/heartbeat"


def stage(template: dict[str, Any]) -> dict[str, Any]:
    (found,) = resources(template, "AWS::ApiGatewayV2::Stage").values()
    return found


def route_settings(template: dict[str, Any]) -> dict[str, Any]:
    settings: dict[str, Any] = stage(template)["Properties"]["RouteSettings"]
    return settings


def test_the_heartbeat_route_has_its_own_bucket_from_its_parameters(template):
    assert route_settings(template)[HEARTBEAT_KEY] == {
        "ThrottlingRateLimit": {"Ref": "HeartbeatRateLimit"},
        "ThrottlingBurstLimit": {"Ref": "HeartbeatBurstLimit"},
    }


@pytest.mark.parametrize("key", sorted(USER_ROUTE_KEYS))
def test_each_user_route_has_the_user_bucket(template, key):
    assert route_settings(template)[key] == {
        "ThrottlingRateLimit": {"Ref": "UserRateLimit"},
        "ThrottlingBurstLimit": {"Ref": "UserBurstLimit"},
    }


def test_every_route_but_default_has_settings_and_default_gets_the_user_bucket(template):
    keys = {
        r["Properties"]["RouteKey"]
        for r in resources(template, "AWS::ApiGatewayV2::Route").values()
    }
    assert set(route_settings(template)) == keys - {"$default"}
    assert stage(template)["Properties"]["DefaultRouteSettings"] == {
        "ThrottlingRateLimit": {"Ref": "UserRateLimit"},
        "ThrottlingBurstLimit": {"Ref": "UserBurstLimit"},
    }


@pytest.mark.parametrize(
    ("name", "default", "maximum"),
    [
        # 50/s carries 750 agents heartbeating every 15 s; sized for 75 with 10x headroom
        ("HeartbeatRateLimit", 50, 10_000),
        ("HeartbeatBurstLimit", 100, 5_000),
        ("UserRateLimit", 10, 10_000),
        ("UserBurstLimit", 20, 5_000),
    ],
)
def test_throttles_are_number_parameters_within_the_account_quota(template, name, default, maximum):
    parameter = template["Parameters"][name]
    assert parameter["Type"] == "Number"
    assert parameter["Default"] == default
    assert parameter["MinValue"] == 1
    assert parameter["MaxValue"] == maximum  # API Gateway's default account quota per Region
    assert "docs/deploy.md" in parameter["Description"]


def test_the_heartbeat_bucket_is_not_the_user_bucket(template):
    """A flood of junk heartbeats spends the heartbeat bucket, never the user routes' one."""
    defaults = {k: v["Default"] for k, v in template["Parameters"].items()}
    assert defaults["HeartbeatRateLimit"] > defaults["UserRateLimit"]
    assert route_settings(template)[HEARTBEAT_KEY] != route_settings(template)["POST /jobs"]


def test_the_stage_is_created_after_every_route_it_names(template):
    """API Gateway refuses RouteSettings for a route key that does not exist yet."""
    named = set(route_settings(template))
    routes = resources(template, "AWS::ApiGatewayV2::Route")
    depends = set(stage(template).get("DependsOn", []))
    for logical_id, route in routes.items():
        if route["Properties"]["RouteKey"] in named:
            assert logical_id in depends, route["Properties"]["RouteKey"]
