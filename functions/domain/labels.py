"""Vast instance labels (DESIGN §3): how the monitor knows whose host an instance is. Pure."""

from __future__ import annotations

import re

LABEL_PREFIX = "tether"
_LABEL = re.compile(r"^tether:(?P<job>[A-Za-z0-9_-]{1,64}):g(?P<gen>[0-9]{1,6})$")


def instance_label(job_id: str, generation: int) -> str:
    """`tether:<job_id>:g<generation>`."""
    return f"{LABEL_PREFIX}:{job_id}:g{generation}"


def parse_label(label: str | None) -> tuple[str, int] | None:
    """(job id, generation) of a tether label; None for anything else (not ours)."""
    match = _LABEL.match(label or "")
    return (match["job"], int(match["gen"])) if match else None
