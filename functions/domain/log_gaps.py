"""Why a generation has no training log (pure): `tether logs` names each generation it cannot
show, so a missing log is never silent.

Each generation's agent uploads its log in segments under its own prefix
(`tether_agent/logs.py`): a partial segment every few seconds, the rest when it stops. A
generation over (replaced, or the job ended) with no segment at all never had one uploaded;
its record says how far its host got.
"""

from __future__ import annotations

from functions.domain.job import Generation


def missing_log_reason(generation: Generation | None) -> str:
    """Why the generation, which is over, has no log segment, from its record (None: the job
    names the generation but no record of it was found)."""
    if generation is None:
        return "no record of its host was found"
    if generation.heartbeat is None:
        return "its host was destroyed before its agent reported"
    if generation.replaced_for == "dead" or generation.host_blamed:
        return "its host stopped answering before the first upload"
    return "its host was destroyed before the first upload"
