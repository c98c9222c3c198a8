"""Fixtures for the Vast simulator's tests: a fake clock and a simulator on it."""

from __future__ import annotations

import pytest

from tests.unit.local.vast_sim_support import FakeClock
from tether_local.vast_sim import VastSimulator
from tether_local.vast_sim.offers import generate_offers


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sim(clock: FakeClock) -> VastSimulator:
    return VastSimulator(
        generate_offers(120, seed=11), clock=clock, startup_s=60, created_s=5, restart_s=10
    )
