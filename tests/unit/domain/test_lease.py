"""The lease (the dead-man switch): `min(lease window, remaining budget / $ per hour)`."""

from __future__ import annotations

import pytest

from functions.domain.lease import lease_expires_at, lease_s


@pytest.mark.parametrize(
    ("window", "budget", "spent", "rate", "expected"),
    [
        (10_800, 100, 0, 1.0, 10_800),  # plenty of money: the window
        (10_800, 10, 9, 2.0, 1800),  # $1 left at $2/h: half an hour
        (10_800, 10, 7, 1.0, 10_800),  # exactly 3 h of money: the window
        (10_800, 10, 10, 1.0, 0),  # nothing left
        (10_800, 10, 12, 1.0, 0),  # past the cap
        (10_800, 10, 0, 0.0, 10_800),  # a free host
        (10_800, 10, 10, 0.0, 0),  # a free host, but nothing left: stop now
        (10_800, 1, 0.9, 0.2, 1800),  # a cheap host: $0.10 left at $0.20/h is half an hour
        (10_800, 1, 0, 0.25, 10_800),  # a cheap host with 4 h of money: the window
        (600, 1, 0.99, 0.05, 600),  # 12 min of money, a 10 min window: the window
    ],
)
def test_lease(window: float, budget: float, spent: float, rate: float, expected: float) -> None:
    assert lease_s(
        lease_window_s=window, budget_usd=budget, spent_usd=spent, usd_per_hour=rate
    ) == pytest.approx(expected)


def test_lease_bounds_overspend_with_a_dead_supervisor() -> None:
    # Running the whole lease at the current price never passes the budget (invariant 4).
    for spent in (0.0, 3.3, 9.99):
        lease = lease_s(lease_window_s=10_800, budget_usd=10, spent_usd=spent, usd_per_hour=7.5)
        assert spent + 7.5 * lease / 3600 <= 10 + 1e-9


def test_lease_expires_at_is_now_plus_lease() -> None:
    assert (
        lease_expires_at(1000.0, lease_window_s=600, budget_usd=10, spent_usd=0, usd_per_hour=1)
        == 1600.0
    )
