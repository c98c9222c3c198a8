"""Host blame: scoped to the job, and decaying everywhere else (docs/architecture.md#host-blame).
Pure.

A host that dies or hangs under a job is blamed. The blame has two scopes:

- **The job itself** never rents that machine again (its generations say `host_blamed`): the
  cheapest way to lose the same work twice is to go back to the host that lost it.
- **Every other job** avoids the machine only while its blame weight is at least
  `AVOID_THRESHOLD`. Each blame adds `1.0`; the weight halves every `HALF_LIFE_S`. One job's
  blame (1.0) never bans a host for everyone: a job whose own script hangs, or whose image
  crashes the container, moves from host to host and blames each once, and none of them is
  banned for the others. Two jobs failing on the same machine within a day are a pattern:
  two blames at once (2.0) keep it avoided for about 10 h, three (3.0) for a day, and it comes
  back by itself when the weight has decayed.

Crashes (the training command exited non-zero), failed image pulls and held verdicts (a
correlated loss of heartbeats, `functions/domain/reconcile.py`) blame nobody.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from functions.domain.job import Generation, HostReputation

HALF_LIFE_S = 24 * 3600.0
AVOID_THRESHOLD = 1.5
BLAME_PER_FAILURE = 1.0


def decayed(weight: float, since: float, now: float, half_life_s: float = HALF_LIFE_S) -> float:
    """`weight` as it was at `since`, decayed to `now` (never grows back: a clock that went
    backwards decays nothing)."""
    if weight <= 0:
        return 0.0
    elapsed = max(0.0, now - since)
    return weight * math.pow(0.5, elapsed / half_life_s)


def blame_weight(reputation: HostReputation, now: float) -> float:
    """The machine's blame now."""
    return decayed(reputation.blame, reputation.blame_at, now)


def blamed_again(reputation: HostReputation | None, now: float) -> float:
    """The weight after one more blame at `now` (what the store writes)."""
    before = blame_weight(reputation, now) if reputation is not None else 0.0
    return before + BLAME_PER_FAILURE


def avoided_by_all(reputation: HostReputation, now: float) -> bool:
    return blame_weight(reputation, now) >= AVOID_THRESHOLD


def avoided_until(reputation: HostReputation) -> float:
    """When the machine's blame decays below the threshold (its `blame_at` when it never
    reached it): for a timeline line or a status, not for a rule."""
    if reputation.blame < AVOID_THRESHOLD:
        return reputation.blame_at
    return reputation.blame_at + HALF_LIFE_S * math.log2(reputation.blame / AVOID_THRESHOLD)


def blocklist(
    generations: Iterable[Generation],
    reputations: Mapping[int, HostReputation],
    *,
    now: float,
) -> set[int]:
    """Machines the planner must skip for this job: those this job died or hung on, and any
    machine whose decayed blame is still at the threshold."""
    blocked = {g.machine_id for g in generations if g.host_blamed and g.machine_id is not None}
    blocked |= {m for m, rep in reputations.items() if avoided_by_all(rep, now)}
    return blocked
