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
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tether_agent.checkpoints import local_step, sibling_marker_name
from tether_agent.protocol import MAX_STEP, ResumeReport


def marked_checkpoints(checkpoint_dir: Path, marker: str) -> list[tuple[int, Path]]:
    """(step, path) of every local checkpoint whose marker exists, oldest first: a directory
    with the marker in it, or a single file with its sibling marker next to it
    (`sibling_marker_name`). A step saved both ways counts once (the directory)."""
    found: dict[int, Path] = {}
    try:
        entries = list(checkpoint_dir.iterdir())
    except OSError:
        return []
    names = {entry.name for entry in entries}
    for entry in sorted(entries, key=lambda e: e.name):
        step = local_step(entry.name)
        if step is None or entry.name.startswith(".") or entry.is_symlink():
            continue
        if is_marked(entry, marker, names) and (step not in found or entry.is_dir()):
            found[step] = entry
    return sorted(found.items())


def is_marked(entry: Path, marker: str, siblings: set[str] | None = None) -> bool:
    """A directory holding the marker, or a file whose sibling marker exists (`siblings`: the
    names in its folder, when the caller listed them already)."""
    if entry.is_dir():
        return (entry / marker).is_file()
    if not entry.is_file():
        return False
    sibling = sibling_marker_name(entry.name, marker)
    if siblings is not None and sibling not in siblings:
        return False
    return (entry.parent / sibling).is_file()


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


# What each framework writes into a checkpoint it has finished (the last file of its save, or
# one only a whole save has): a folder with one of these looks complete even without a marker.
COMPLETE_LOOKING_FILES = (
    "trainer_state.json",  # Hugging Face Trainer, written after the weights and optimizer
    "random_states_0.pkl",  # accelerate's save_state, written after the models and optimizers
    "model.safetensors",
    "adapter_model.safetensors",
    "pytorch_model.bin",
    "optimizer.pt",
    "optimizer.bin",
)
# A single file whose name ends in a step with one of these suffixes: Lightning's
# `epoch=0-step=50.ckpt`, a `torch.save` to `step_50.pt`.
CHECKPOINT_FILE_SUFFIXES = (".ckpt", ".pt", ".pth", ".safetensors", ".bin")


# A script that marks its checkpoints writes the marker right after the save; one unchanged for
# this long with no marker is not being marked (a large save still being written is not named).
UNMARKED_SETTLED_S = 120.0


def unmarked_checkpoints(
    checkpoint_dir: Path,
    marker: str,
    limit: int,
    *,
    settled_s: float = UNMARKED_SETTLED_S,
    now: float | None = None,
) -> list[str]:
    """Checkpoints in the checkpoint dir itself that look complete but carry no marker, so the
    agent never uploads them, as names relative to it: a folder whose name ends in a step and
    holds a file of `COMPLETE_LOOKING_FILES`, or a single checkpoint file without its sibling
    marker (`sibling_marker_name`), unchanged for `settled_s`. Newest step first; at most 1024
    entries of each folder are looked at."""
    now = time.time() if now is None else now
    found: list[tuple[int, str]] = []
    for entry in _entries(checkpoint_dir):
        is_file = entry.is_file()
        step = local_step(entry.name)
        if step is None:
            continue
        if is_file:
            looks_complete = entry.suffix in CHECKPOINT_FILE_SUFFIXES and not is_marked(
                entry, marker
            )
            files = [entry]
        else:
            files = _entries(entry)
            names = {f.name for f in files}
            looks_complete = not (entry / marker).exists() and any(
                n in names for n in COMPLETE_LOOKING_FILES
            )
        if looks_complete and now - _newest_mtime(files) >= settled_s:
            found.append((step, entry.name))
    return [name for _, name in sorted(found, reverse=True)[:limit]]


def _newest_mtime(paths: list[Path]) -> float:
    newest = 0.0
    for path in paths:
        try:
            newest = max(newest, path.stat().st_mtime)
        except OSError:
            continue
    return newest


def unmarked_fix(checkpoint_dir: Path, marker: str) -> str:
    """What to do about unmarked checkpoints, in one sentence a user can act on."""
    example = sibling_marker_name("step_50.pt", marker)
    return (
        f"the agent uploads a checkpoint only once the marker file {marker!r} is in its folder, "
        f"or, for a single-file checkpoint, next to it as <file>.{marker.lstrip('.') or marker} "
        f"({example} for step_50.pt): write it under {checkpoint_dir} when the save is "
        "complete (tether_hooks: the Hugging "
        "Face callback, or checkpoint_saved(path) after your own save of a folder or a file; "
        "agent/README.md)"
    )


class MisplacedReporter:
    """Says each newly found misplaced or unmarked checkpoint once (`say`), and lists them."""

    def __init__(self, checkpoint_dir: Path, marker: str, say: Callable[[str], None]) -> None:
        self.checkpoint_dir, self.marker, self.say = checkpoint_dir, marker, say
        self._said: set[str] = set()
        self._said_unmarked: set[str] = set()

    def unmarked(self, limit: int) -> list[str]:
        found = unmarked_checkpoints(self.checkpoint_dir, self.marker, limit=limit)
        new = [name for name in found if name not in self._said_unmarked]
        if new:
            self._said_unmarked.update(new)
            self.say(
                f"checkpoints that look complete but are not marked, never uploaded: "
                f"{', '.join(new)}; {unmarked_fix(self.checkpoint_dir, self.marker)}"
            )
        return found

    def found(self, limit: int) -> list[str]:
        found = misplaced_checkpoints(self.checkpoint_dir, self.marker, limit=limit)
        new = [path for path in found if path not in self._said]
        if new:
            self._said.update(new)
            self.say(
                f"checkpoints found below the checkpoint dir, never uploaded: {', '.join(new)}; "
                f"save each checkpoint directly in {self.checkpoint_dir} (Hugging Face: "
                f"output_dir={self.checkpoint_dir})"
            )
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


def _whole_steps(value: object) -> int | None:
    """A step count the heartbeat carries: a whole number from 1 to `MAX_STEP`, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_STEP:
        return value
    return None


def total_steps(checkpoint_dir: Path, marker: str, progress_file: Path | None) -> int | None:
    """The steps the script will train in all, as it says on disk: `total_steps` in a JSON
    progress file (`{"step": n, "total_steps": m}`), else Hugging Face's `max_steps` in
    `trainer_state.json` (in the checkpoint dir or its newest marked checkpoint); None when
    neither says. `tether status` counts step N of M with it when the spec gives no
    `total_steps`."""
    if progress_file is not None:
        try:
            value = json.loads(progress_file.read_text())
        except (OSError, ValueError):
            value = None
        if isinstance(value, dict) and _whole_steps(value.get("total_steps")) is not None:
            return _whole_steps(value.get("total_steps"))
    marked = marked_checkpoints(checkpoint_dir, marker)
    newest = marked[-1][1] if marked else None
    for candidate in (
        checkpoint_dir / "trainer_state.json",
        *([newest / "trainer_state.json"] if newest else []),
    ):
        try:
            found = _whole_steps(json.loads(candidate.read_text()).get("max_steps"))
        except (OSError, ValueError, AttributeError):
            continue
        if found is not None:
            return found
    return None


class ResumeWatch:
    """Where training resumed on this host and when its first step after that completed (the
    `resumed` heartbeat field): recovery ends at the first step, not at the process start,
    which may be minutes of imports and model loading earlier.

    `started(step, baseline)` when the training process starts: `step` is the restored
    checkpoint's step (0 fresh), `baseline` what `current_step` said then (what is on disk before
    the script ran: a stale progress file must not count as a step). `observe(step)` with each
    `current_step` reading: the first one past `step` that differs from the baseline is the
    first step; its time is when it was seen (the agent polls ten times a second until then, so
    it is at most that late, never early).
    Thread-safe: the training loop and the heartbeat thread both observe."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._report: ResumeReport | None = None
        self._baseline: int | None = None

    def started(self, step: int, baseline: int | None) -> None:
        with self._lock:
            self._report = ResumeReport(step=step, started_at=self._clock())
            self._baseline = baseline

    def observe(self, step: int | None) -> None:
        with self._lock:
            report = self._report
            if report is None or report.first_step_at is not None or step is None:
                return
            if step > report.step and step != self._baseline:
                at = max(self._clock(), report.started_at)
                self._report = report.model_copy(update={"first_step_at": at})

    def waiting(self) -> bool:
        """Training started and its first step not seen yet."""
        with self._lock:
            return self._report is not None and self._report.first_step_at is None

    def report(self) -> ResumeReport | None:
        with self._lock:
            return self._report
