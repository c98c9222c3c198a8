"""Host blame (functions/domain/blame.py): scoped to the job, decaying for everyone else."""

from __future__ import annotations

import pytest

from functions.domain.blame import avoided_by_all, avoided_until, blame_weight, blamed_again
from functions.domain.job import HostReputation

NOW = 1_800_000_000.0
HOUR = 3600.0


def rep(blame: float, hours_ago: float = 0.0) -> HostReputation:
    return HostReputation(machine_id=7, blame=blame, blame_at=NOW - hours_ago * HOUR)


@pytest.mark.parametrize(
    ("case", "reputation", "weight", "avoided"),
    [
        ("never blamed", rep(0.0), 0.0, False),
        ("one job's blame, now: never banned for everyone", rep(1.0), 1.0, False),
        ("two jobs' blames, now", rep(2.0), 2.0, True),
        ("two jobs' blames, a day ago: halved", rep(2.0, 24), 1.0, False),
        ("three blames, a day ago: exactly at the threshold", rep(3.0, 24), 1.5, True),
        ("three blames, two days ago", rep(3.0, 48), 0.75, False),
        ("a clock that went backwards decays nothing", rep(2.0, -5), 2.0, True),
    ],
)
def test_blame_halves_every_day_and_bans_at_one_and_a_half(
    case: str, reputation: HostReputation, weight: float, avoided: bool
) -> None:
    assert blame_weight(reputation, NOW) == pytest.approx(weight), case
    assert avoided_by_all(reputation, NOW) is avoided, case


def test_each_blame_adds_one_to_the_decayed_weight() -> None:
    assert blamed_again(None, NOW) == 1.0
    assert blamed_again(rep(1.0), NOW) == 2.0
    assert blamed_again(rep(1.0, 24), NOW) == pytest.approx(1.5)


def test_two_blames_at_once_keep_a_host_away_for_about_ten_hours() -> None:
    assert avoided_until(rep(2.0)) == pytest.approx(NOW + 24 * HOUR * 0.415037, rel=1e-4)
    assert avoided_until(rep(1.0)) == NOW  # never reached the threshold
