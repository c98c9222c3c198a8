"""What /proc shows of the processes a test started, to prove none outlives what stopped it."""

from __future__ import annotations

import os
from pathlib import Path


def _stat(pid: int | str) -> list[str]:
    """/proc/<pid>/stat's fields after the command name: state, parent pid, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead and waiting to be reaped, does not)."""
    try:
        return _stat(pid)[0] != "Z"
    except OSError:
        return False


def live_processes(command_has: str, *, parent: int | None = None) -> list[int]:
    """Live processes (this one aside) whose command line contains `command_has`, and whose
    parent is `parent` when given."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = _stat(entry.name)
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if stat[0] == "Z" or command_has.encode() not in cmdline:
            continue
        if parent is None or int(stat[1]) == parent:
            found.append(int(entry.name))
    return found
