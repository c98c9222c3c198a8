"""Vast's create-instance bounds (its OpenAPI's `x-input-validation` for `PUT /asks/{id}/`), each
at its boundary and one past it, and the job env they leave room for."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.vast_limits import (
    LimitBreach,
    create_instance_breaches,
    env_flag_string,
)

BODY: dict[str, Any] = {
    "client_id": "me", "image": "pytorch/pytorch:latest", "disk": 20, "label": "tether:j:g1",
    "env": {"TETHER_JOB_ID": "j"}, "runtype": "args", "args": ["bash", "-c", "true"],
}  # fmt: skip


def env_of_flag_chars(chars: int) -> dict[str, str]:
    """An env whose `-e K=V …` string is exactly `chars` long, every value within 256."""
    env: dict[str, str] = {}
    left = chars
    index = 0
    while left > 0:
        name = f"V{index:04d}"
        room = left - (0 if not env else 1) - len(f"-e {name}=")
        env[name] = "v" * min(256, room)
        left -= (0 if len(env) == 1 else 1) + len(f"-e {name}=") + len(env[name])
        index += 1
    assert len(env_flag_string(env)) == chars
    return env


def fields(body_change: dict[str, Any]) -> list[str]:
    return [b.field for b in create_instance_breaches({**BODY, **body_change})]


def test_a_plain_request_breaks_nothing() -> None:
    assert create_instance_breaches(BODY) == []


@pytest.mark.parametrize(
    ("within", "over", "field"),
    [
        ({"env": {"TETHER_X": "v" * 256}}, {"env": {"TETHER_X": "v" * 257}}, "env.TETHER_X"),
        ({"env": env_of_flag_chars(32_000)}, {"env": env_of_flag_chars(32_001)}, "env"),
        ({"label": "l" * 256}, {"label": "l" * 257}, "label"),
        (
            {"onstart": "o" * 4048, "args": None},
            {"onstart": "o" * 4049, "args": None},
            "onstart",
        ),
        # `bash -c <script>`: 8 characters before the script
        ({"args": ["bash", "-c", "o" * 4088]}, {"args": ["bash", "-c", "o" * 4089]},
         "args+args_str+onstart"),
        (
            {"args": None, "onstart": "o" * 2000, "args_str": "a" * 2096},
            {"args": None, "onstart": "o" * 2000, "args_str": "a" * 2097},
            "args+args_str+onstart",
        ),
        ({"image": "i" * 1024}, {"image": "i" * 1025}, "image"),
        ({"disk": 8}, {"disk": 7.99}, "disk"),
        ({"price": 0.001}, {"price": 0.0009}, "price"),
        ({"price": 128}, {"price": 128.001}, "price"),
    ],
)  # fmt: skip
def test_each_bound_holds_at_its_limit_and_breaks_one_past_it(
    within: dict[str, Any], over: dict[str, Any], field: str
) -> None:
    assert fields(within) == []
    assert fields(over) == [field]


def test_a_breach_names_the_field_the_bound_and_the_size() -> None:
    (breach,) = create_instance_breaches({**BODY, "env": {"TETHER_RUN": "r" * 300}})
    assert breach == LimitBreach("env.TETHER_RUN", "at most", 256, 300, "characters")
    assert breach.describe() == (
        "env.TETHER_RUN: 300 characters, but Vast's limit is at most 256 characters"
    )
    (price,) = create_instance_breaches({**BODY, "price": 0})
    assert price.describe() == "price: 0 $/h, but Vast's limit is at least 0.001 $/h"


def test_a_price_that_is_no_number_breaks_the_price_bound() -> None:
    assert fields({"price": float("nan")}) == ["price"]
    assert fields({"price": float("inf")}) == ["price"]
    assert fields({"disk": float("nan")}) == ["disk"]


def test_every_breach_is_named_in_field_order() -> None:
    assert fields({"label": "l" * 300, "env": {"A": "a" * 300}, "disk": 1}) == [
        "disk", "label", "env.A",
    ]  # fmt: skip


def test_the_env_total_is_the_docker_flag_string() -> None:
    assert env_flag_string({"A": "1", "BB": "two"}) == "-e A=1 -e BB=two"
    assert env_flag_string({}) == ""
