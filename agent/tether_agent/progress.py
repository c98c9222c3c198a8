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
import re
import stat
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
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
# Below the top, only the suffixes of `torch.save` and Lightning, and a `.pt`/`.pth` only when
# its name says checkpoint (`step_50.pt`, `ckpt_50.pt`, `model_epoch3.pth`): numbered `.bin`,
# `.safetensors` or `tokens_0001.pt` files there are more often a dataset than checkpoints.
NESTED_CHECKPOINT_FILE_SUFFIXES = (".ckpt", ".pt", ".pth")
_CHECKPOINT_WORD = re.compile(r"ckpt|checkpoint|step|epoch|iter", re.IGNORECASE)
# One part of a sharded save (DeepSpeed's `mp_rank_00_model_states.pt`, Hugging Face's
# `model-00001-of-00004.safetensors`): its number is a rank or a shard, not a step.
_SHARD_PART = re.compile(r"rank|\d-of-\d", re.IGNORECASE)

# A script that marks its checkpoints writes the marker right after the save; one unchanged for
# this long with no marker is not being marked (a large save still being written is not named).
UNMARKED_SETTLED_S = 120.0
# The walk below the checkpoint dir is bounded, so a dataset kept there costs little at each
# heartbeat: folders read at most this deep (`lightning_logs/version_0/checkpoints/` is three
# deep; a checkpoint folder one deeper is still found, by looking its files up), this many
# directory entries read or looked up in all, and at most `FOLDER_MAX_ENTRIES` of any one folder.
SCAN_MAX_DEPTH = 6
SCAN_MAX_ENTRIES = 4096
FOLDER_MAX_ENTRIES = 1024


@dataclass(frozen=True)
class NeverUploaded:
    """Checkpoints the agent will never upload, as paths relative to the checkpoint dir:
    `unmarked`, in the checkpoint dir itself, complete-looking with no marker (newest step
    first); `misplaced`, anywhere below it, marked or complete-looking (shallowest first, by
    name), since only the checkpoint dir's own entries are uploaded."""

    unmarked: list[str]
    misplaced: list[str]


def never_uploaded_checkpoints(
    checkpoint_dir: Path,
    marker: str,
    limit: int,
    *,
    settled_s: float = UNMARKED_SETTLED_S,
    now: float | None = None,
    max_depth: int = SCAN_MAX_DEPTH,
    max_entries: int = SCAN_MAX_ENTRIES,
) -> NeverUploaded:
    """One bounded walk of the checkpoint dir for both kinds of `NeverUploaded`, at most `limit`
    of each. Hidden entries are left out; symlinks are neither reported nor followed.

    A checkpoint is a folder whose name ends in a step and holds the marker or a file of
    `COMPLETE_LOOKING_FILES`, or a single file whose name ends in a step with a suffix of
    `CHECKPOINT_FILE_SUFFIXES` (in the checkpoint dir) or `NESTED_CHECKPOINT_FILE_SUFFIXES`
    (below it, a `.pt`/`.pth` only with `_CHECKPOINT_WORD` in its name). In the checkpoint
    dir, one without its marker (in its folder, or its sibling marker `sibling_marker_name`)
    and unchanged for `settled_s` is unmarked; below it, every one is misplaced. A checkpoint's
    insides are never looked into, nor those of a marked or complete-looking folder without a
    step (`final/`, a saved model); parts of a sharded save (`_SHARD_PART`) are no checkpoints.
    Breadth-first: folders read at most `max_depth` deep, at most `max_entries` directory
    entries read or looked up in all (`FOLDER_MAX_ENTRIES` of any one folder)."""
    now = time.time() if now is None else now
    budget = [max_entries]
    unmarked: list[tuple[int, str]] = []
    misplaced: list[str] = []
    folders: deque[tuple[str, str, int]] = deque([(str(checkpoint_dir), "", 0)])
    while folders:
        path, relative, depth = folders.popleft()
        if len(misplaced) >= limit and depth > 0:
            break  # the checkpoint dir's own entries were all looked at: unmarked is complete
        entries = _listing(path, budget)
        names = {entry.name for entry in entries}
        if depth > 0 and (marker in names or any(n in names for n in COMPLETE_LOOKING_FILES)):
            continue  # a marked folder or a saved model without a step: what it holds is its own
        for entry in entries:
            if entry.name.startswith("."):
                continue
            name, step = f"{relative}{entry.name}", local_step(entry.name)
            if entry.is_dir(follow_symlinks=False):
                if step is not None:  # a checkpoint, or a folder such as `version_0`, `run1`
                    marked, looks_complete = _checkpoint_files(entry.path, marker, budget)
                    if depth and (marked or looks_complete):
                        misplaced.append(name)
                        continue
                    if looks_complete and not marked:  # in the checkpoint dir itself
                        inside = [e.path for e in _listing(entry.path, budget)]
                        if now - _newest_mtime(inside) >= settled_s:
                            unmarked.append((step, name))
                        continue  # settled or still being written: nothing in it to look at
                    if marked:
                        continue  # uploaded; what it holds is its own
                if depth < max_depth:
                    folders.append((entry.path, f"{name}/", depth + 1))
                continue
            if step is None or not _is_checkpoint_file(entry, step, nested=depth > 0):
                continue
            if depth:
                misplaced.append(name)
            elif sibling_marker_name(entry.name, marker) not in names and (
                now - _newest_mtime([entry.path]) >= settled_s
            ):
                unmarked.append((step, name))
    return NeverUploaded(
        unmarked=[name for _, name in sorted(unmarked, reverse=True)[:limit]],
        misplaced=misplaced[:limit],
    )


def _checkpoint_files(folder: str, marker: str, budget: list[int]) -> tuple[bool, bool]:
    """Whether `folder` holds the marker, and whether it holds a file of
    `COMPLETE_LOOKING_FILES`, found by looking each name up (each lowers `budget[0]`): cheaper
    than reading a folder that may hold thousands of files."""
    found = []
    for name in (marker, *COMPLETE_LOOKING_FILES):
        if budget[0] <= 0:
            return False, False
        budget[0] -= 1
        try:
            found.append(stat.S_ISREG((Path(folder) / name).lstat().st_mode))
        except OSError:
            found.append(False)
    return found[0], any(found[1:])


def _is_checkpoint_file(entry: os.DirEntry[str], step: int | None, *, nested: bool) -> bool:
    """A single file saved as a checkpoint: its name ends in a step, with a suffix of
    `CHECKPOINT_FILE_SUFFIXES` (`NESTED_CHECKPOINT_FILE_SUFFIXES` and `_CHECKPOINT_WORD`
    below the checkpoint dir), and it is no part of a sharded save."""
    suffix = Path(entry.name).suffix
    if step is None or _SHARD_PART.search(entry.name):
        return False
    if nested and (
        suffix not in NESTED_CHECKPOINT_FILE_SUFFIXES
        or (suffix != ".ckpt" and not _CHECKPOINT_WORD.search(entry.name))
    ):
        return False
    return suffix in CHECKPOINT_FILE_SUFFIXES and entry.is_file(follow_symlinks=False)


def unmarked_checkpoints(
    checkpoint_dir: Path,
    marker: str,
    limit: int,
    *,
    settled_s: float = UNMARKED_SETTLED_S,
    now: float | None = None,
) -> list[str]:
    """The unmarked ones of `never_uploaded_checkpoints`."""
    found = never_uploaded_checkpoints(checkpoint_dir, marker, limit, settled_s=settled_s, now=now)
    return found.unmarked


def misplaced_checkpoints(checkpoint_dir: Path, marker: str, limit: int) -> list[str]:
    """The misplaced ones of `never_uploaded_checkpoints`."""
    return never_uploaded_checkpoints(checkpoint_dir, marker, limit).misplaced


def _newest_mtime(paths: list[str]) -> float:
    newest = 0.0
    for path in paths:
        try:
            newest = max(newest, Path(path).lstat().st_mtime)
        except OSError:
            continue
    return newest


def _marking(marker: str) -> str:
    """How a checkpoint is marked, in a clause."""
    return (
        f"the marker file {marker!r} in its folder, or, for a single-file checkpoint, next to "
        f"it as <file>.{marker.lstrip('.') or marker} "
        f"({sibling_marker_name('step_50.pt', marker)} for step_50.pt)"
    )


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


def misplaced_fix(checkpoint_dir: Path, marker: str) -> str:
    """What to do about checkpoints saved below the checkpoint dir: where each framework saves
    directly in it, and how each save is marked, in one sentence."""
    return (
        f"save each checkpoint directly in {checkpoint_dir} (Hugging Face: "
        f"output_dir={checkpoint_dir}; accelerate: save_state({checkpoint_dir}/step_<step>); "
        f"Lightning: ModelCheckpoint(dirpath={checkpoint_dir}); torch.save: "
        f"{checkpoint_dir}/step_<step>.pt) and mark it complete with {_marking(marker)} "
        "(the hooks mark Trainer's, accelerate's and Lightning's saves there; after any other "
        "save, tether_hooks.checkpoint_saved(path); agent/README.md)"
    )


class NeverUploadedReporter:
    """Walks the checkpoint dir once per `scan` for checkpoints that are never uploaded
    (`never_uploaded_checkpoints`) and says each newly found one once (`say`), with the fix."""

    def __init__(self, checkpoint_dir: Path, marker: str, say: Callable[[str], None]) -> None:
        self.checkpoint_dir, self.marker, self.say = checkpoint_dir, marker, say
        self._said_misplaced: set[str] = set()
        self._said_unmarked: set[str] = set()

    def scan(self, limit: int) -> NeverUploaded:
        found = never_uploaded_checkpoints(self.checkpoint_dir, self.marker, limit)
        new = [name for name in found.unmarked if name not in self._said_unmarked]
        if new:
            self._said_unmarked.update(new)
            self.say(
                f"checkpoints that look complete but are not marked, never uploaded: "
                f"{', '.join(new)}; {unmarked_fix(self.checkpoint_dir, self.marker)}"
            )
        new = [path for path in found.misplaced if path not in self._said_misplaced]
        if new:
            self._said_misplaced.update(new)
            self.say(
                f"checkpoints found below the checkpoint dir, never uploaded: {', '.join(new)}; "
                f"{misplaced_fix(self.checkpoint_dir, self.marker)}"
            )
        return found


def _listing(directory: str, budget: list[int]) -> list[os.DirEntry[str]]:
    """At most `FOLDER_MAX_ENTRIES` entries of `directory`, sorted by name, less symlinks; and
    no more than `budget[0]`, which is lowered by the entries read."""
    wanted = min(FOLDER_MAX_ENTRIES, budget[0])
    if wanted <= 0:
        return []
    try:
        with os.scandir(directory) as it:
            read = list(itertools.islice(it, wanted))
    except OSError:
        return []
    budget[0] -= len(read)
    return sorted((e for e in read if not e.is_symlink()), key=lambda e: e.name)


@dataclass(frozen=True)
class StepsOnDisk:
    """What the script says on disk of its progress, read once for a heartbeat: the step it
    reached (`step`) and the steps it will train in all (`total`), each None when unsaid."""

    step: int | None
    total: int | None


def _json_file(path: Path) -> object:
    """The file's JSON value; None when it is missing, unreadable or not JSON."""
    try:
        return json.loads(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _whole_steps(value: object) -> int | None:
    """A step count the heartbeat carries: a whole number from 1 to `MAX_STEP`, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_STEP:
        return value
    return None


def _step_of(value: object) -> int | None:
    """A progress file's step: a bare number, or `{"step": n, …}`; a whole number ≥ 0."""
    if isinstance(value, dict):
        value = value.get("step")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def read_progress_file(path: Path) -> int | None:
    return _step_of(_json_file(path))


def read_steps(checkpoint_dir: Path, marker: str, progress_file: Path | None) -> StepsOnDisk:
    """The step (the largest of the newest marked checkpoint's, the progress file's and the
    Trainer's `global_step`) and the total (`total_steps` in a JSON progress file
    `{"step": n, "total_steps": m}`, else the Trainer's `max_steps`), from one listing of the
    checkpoint dir and one read of each file: `trainer_state.json` in the checkpoint dir, then
    in its newest marked checkpoint. `tether status` counts step N of M with the total when the
    spec gives none."""
    marked = marked_checkpoints(checkpoint_dir, marker)
    newest = marked[-1] if marked else None
    progress = _json_file(progress_file) if progress_file is not None else None
    trainer_states = [
        state
        for state in (
            _json_file(checkpoint_dir / "trainer_state.json"),
            *([_json_file(newest[1] / "trainer_state.json")] if newest else []),
        )
        if isinstance(state, dict)
    ]
    trainer_step = next(
        (
            s["global_step"]
            for s in trainer_states
            if isinstance(s.get("global_step"), int) and s["global_step"] >= 0
        ),
        None,
    )
    steps = [newest[0] if newest else None, _step_of(progress), trainer_step]
    known = [s for s in steps if s is not None]
    said_total = _whole_steps(progress.get("total_steps")) if isinstance(progress, dict) else None
    total = said_total or next(
        (t for t in (_whole_steps(s.get("max_steps")) for s in trainer_states) if t), None
    )
    return StepsOnDisk(step=max(known) if known else None, total=total)


def current_step(checkpoint_dir: Path, marker: str, progress_file: Path | None) -> int | None:
    return read_steps(checkpoint_dir, marker, progress_file).step


def total_steps(checkpoint_dir: Path, marker: str, progress_file: Path | None) -> int | None:
    """The steps the script will train in all, as it says on disk (`read_steps`)."""
    return read_steps(checkpoint_dir, marker, progress_file).total


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
