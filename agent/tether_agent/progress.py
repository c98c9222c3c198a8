"""Training progress from what the script leaves on disk (no cooperation needed beyond a marker).

Sources: the newest marked checkpoint's step, a progress file the script rewrites with its step
(a bare integer or JSON `{"step": n}`), and Hugging Face's `trainer_state.json` `global_step`
(in the checkpoint dir or its newest checkpoint). The reported step is the highest of them:
each is evidence that training got at least that far, and a finer source (the progress file)
must not be masked by a coarser one (the last checkpoint).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

from tether_agent.checkpoints import local_step


def marked_checkpoints(checkpoint_dir: Path, marker: str) -> list[tuple[int, Path]]:
    """(step, dir) of every local checkpoint whose marker exists, oldest first."""
    found: list[tuple[int, Path]] = []
    try:
        entries = list(checkpoint_dir.iterdir())
    except OSError:
        return []
    for entry in entries:
        step = local_step(entry.name)
        if step is not None and not entry.name.startswith(".") and (entry / marker).is_file():
            found.append((step, entry))
    return sorted(found)


def misplaced_checkpoints(checkpoint_dir: Path, marker: str, limit: int) -> list[str]:
    """Checkpoints saved one level too deep, as paths relative to the checkpoint dir: `X/Y`
    where Y's name ends in a step and holds the marker or Hugging Face's `trainer_state.json`,
    and X is not a marked checkpoint itself (a Trainer whose `output_dir` is a folder below the
    checkpoint dir). The agent uploads only the checkpoint dir's own children, so these would
    never leave the host. Hidden entries are skipped, and at most 1024 entries of each folder
    are looked at, so a dataset kept in the checkpoint dir costs little."""
    found: list[str] = []
    for parent in _entries(checkpoint_dir):
        if not parent.is_dir() or (parent / marker).exists():
            continue
        for entry in _entries(parent):
            if local_step(entry.name) is None or not entry.is_dir():
                continue
            if any((entry / name).is_file() for name in (marker, "trainer_state.json")):
                found.append(f"{parent.name}/{entry.name}")
                if len(found) >= limit:
                    return found
    return found


def _entries(directory: Path) -> list[Path]:
    """At most 1024 non-hidden entries of `directory`, sorted by name (symlinks left out)."""
    try:
        with os.scandir(directory) as it:
            kept = (e for e in it if not e.name.startswith(".") and not e.is_symlink())
            return sorted(Path(e.path) for e in itertools.islice(kept, 1024))
    except OSError:
        return []


def read_progress_file(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict):
        value = value.get("step")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def read_trainer_state(checkpoint_dir: Path, newest: Path | None) -> int | None:
    for candidate in (
        checkpoint_dir / "trainer_state.json",
        *([newest / "trainer_state.json"] if newest else []),
    ):
        try:
            step = json.loads(candidate.read_text()).get("global_step")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(step, int) and step >= 0:
            return step
    return None


def current_step(checkpoint_dir: Path, marker: str, progress_file: Path | None) -> int | None:
    marked = marked_checkpoints(checkpoint_dir, marker)
    newest = marked[-1] if marked else None
    steps = [
        newest[0] if newest else None,
        read_progress_file(progress_file) if progress_file else None,
        read_trainer_state(checkpoint_dir, newest[1] if newest else None),
    ]
    known = [s for s in steps if s is not None]
    return max(known) if known else None
