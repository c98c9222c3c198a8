"""The Vast simulator refuses what Vast's OpenAPI bounds refuse on `PUT /api/v0/asks/{id}/`
(400 `invalid_args`, the message naming the field), and a request inside them still rents."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.local.vast_sim_support import cheapest_offer, raw
from tether_local.vast_sim import VastSimulator

BODY: dict[str, Any] = {
    "client_id": "me", "image": "pytorch/pytorch:latest", "disk": 20,
    "label": "tether:job-1:g1", "env": {"TETHER_JOB_ID": "job-1"}, "runtype": "args",
    "args": ["bash", "-c", "true"], "cancel_unavail": True,
}  # fmt: skip
# 130 values of 250 characters: each within 256, together 33 669 characters as -e K=V flags.
ENV_33_KB = {f"V{i:03d}": "v" * 250 for i in range(130)}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"env": {"TETHER_X": "v" * 257}}, "env.TETHER_X"),
        ({"env": ENV_33_KB}, "env"),
        ({"label": "l" * 257}, "label"),
        ({"runtype": "ssh", "args": None, "onstart": "o" * 4049}, "onstart"),
        ({"args": ["bash", "-c", "o" * 4089]}, "args+args_str+onstart"),
        ({"args_str": "a" * 2100, "onstart": "o" * 2000, "args": None}, "args+args_str+onstart"),
        ({"image": "i" * 1025}, "image"),
        ({"disk": 7}, "disk"),
        ({"price": 0}, "price"),
        ({"price": 129}, "price"),
    ],
)
def test_a_request_over_a_bound_is_refused_naming_the_field(
    sim: VastSimulator, change: dict[str, Any], field: str
) -> None:
    offer = cheapest_offer(sim)
    body = {k: v for k, v in {**BODY, **change}.items() if v is not None}
    reply = raw(sim, sim.api_key).put(f"/api/v0/asks/{offer['id']}/", json=body)
    assert reply.status_code == 400
    answer = reply.json()
    assert (answer["success"], answer["error"]) == (False, "invalid_args")
    assert answer["msg"].startswith(f"{field}: ")
    assert sim.instances() == [] and offer["id"] in {o["id"] for o in sim.offers()}


def test_a_request_at_every_bound_rents(sim: VastSimulator) -> None:
    offer = cheapest_offer(sim)
    env = {f"V{i:03d}": "v" * 250 for i in range(122)}  # with TETHER_X: 31 866 as flags
    env["TETHER_X"] = "x" * 256
    body = {
        **BODY, "image": "i" * 1024, "disk": 8, "label": "l" * 256, "env": env,
        "args": ["bash", "-c", "o" * 4088], "price": offer["min_bid"],
    }  # fmt: skip
    reply = raw(sim, sim.api_key).put(f"/api/v0/asks/{offer['id']}/", json=body)
    assert reply.status_code == 200 and reply.json()["success"] is True
    (instance,) = sim.instances()
    assert instance["label"] == "l" * 256
