"""Helpers for the Vast simulator's tests: a settable clock, clients on the simulator (the real
adapter, or raw HTTP where the adapter would refuse to send the request) and a rent."""

from __future__ import annotations

import random
from typing import Any

import httpx

from functions.adapters.vast import VastClient
from tether_local.vast_sim import VastSimulator

T0 = 1_790_000_000.0


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def client_for(sim: VastSimulator, key: str | None = None, **kwargs: Any) -> VastClient:
    return VastClient(
        key or sim.api_key,
        base_url="http://vast.sim",
        client=httpx.Client(transport=httpx.MockTransport(sim.handle)),
        sleep=kwargs.pop("sleep", lambda _s: None),
        rng=random.Random(0),
        **kwargs,
    )


def raw(sim: VastSimulator, key: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(
        transport=httpx.MockTransport(sim.handle), base_url="http://vast.sim", headers=headers
    )


def rent_one(vast: VastClient, offer_id: int, label: str = "tether:job-1:g1") -> int:
    return vast.rent(
        offer_id,
        image="pytorch/pytorch:latest",
        disk_gb=20,
        label=label,
        env={"TETHER_JOB_ID": "job-1"},
        onstart="echo start",
    ).instance_id


def cheapest_offer(sim: VastSimulator) -> dict[str, Any]:
    return min(
        (o for o in sim.offers() if o["disk_space"] >= 20), key=lambda o: float(o["dph_base"])
    )
