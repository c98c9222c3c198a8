"""Killing a host in the middle of a transfer: `killed-during-upload` (a checkpoint half
uploaded) and `killed-during-restore` (the replacement downloading it).

The transfer is caught by watching its bytes (the S3 stand-in's directory, the host's disk)
every few milliseconds; the moment it is seen the host is frozen (SIGSTOP), the transfer
confirmed unfinished, and only then destroyed: on a loaded machine a transfer could otherwise
end between the look and the kill. Ballast makes each checkpoint big enough that a transfer
lasts long enough to be seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tether_agent.checkpoints import MANIFEST_NAME

from functions.adapters.store import JobView
from functions.domain.job import Generation
from tether_local.demo.evidence import checkpoint_dirs, restore_candidates
from tether_local.demo.host_faults import destroy
from tether_local.demo.run import DemoError, DemoRun

TRANSFER_BALLAST_MB = 96
CATCH_POLL_S = 0.01
_T = TypeVar("_T")


def _catch(what: str, probe: Callable[[], _T | None], timeout_s: float = 45) -> _T:
    """Until `probe` finds something, polling the file system only (fast, no DynamoDB reads)."""
    deadline = time.monotonic() + timeout_s
    while (found := probe()) is None:
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(CATCH_POLL_S)
    return found


def _steps_by_dir(run: DemoRun, generation: int) -> dict[Path, int]:
    """The steps of `generation`'s checkpoint directories in the S3 stand-in, by directory."""
    found = checkpoint_dirs(run.stack, run.job_id)
    return {d: cid.step for d, cid in found.items() if cid.generation == generation}


def killed_during_upload(run: DemoRun) -> None:
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    g = run.wait_step(1, 50, checkpoint=50)
    instance = run.instance(g)

    def complete_step() -> int:
        dirs = _steps_by_dir(run, 1)
        return max((s for d, s in dirs.items() if (d / MANIFEST_NAME).is_file()), default=0)

    def half_written() -> tuple[Path, int] | None:
        """A checkpoint newer than every complete one, with files but no manifest yet."""
        complete = complete_step()
        for directory, step in _steps_by_dir(run, 1).items():
            try:
                started = step > complete and any(directory.iterdir())
                if started and not (directory / MANIFEST_NAME).exists():
                    return directory, complete
            except OSError:  # deleted by retention while we looked
                continue
        return None

    while True:
        half, complete = _catch("g1 uploading a checkpoint", half_written)
        hosts.freeze(instance)
        if not (half / MANIFEST_NAME).exists() and newest_recorded(run) == complete:
            break
        run.say(f"{half.name} finished uploading (or {complete} was not recorded yet) before "
                "the freeze; waiting for the next one")  # fmt: skip
        hosts.thaw(instance)
    files = sorted(p.name for p in half.iterdir())
    run.say(f"g1 is uploading {half.name} ({', '.join(files)}; no manifest yet)")
    run.fault("dead", g, lambda: hosts.destroy(instance))
    run.wait_training(2)
    restored = run.restores.get(2)
    run.say(
        f"g2 restored step {restored.step if restored else '-'}; "
        f"step {complete} was the last complete one"
    )
    run.checks["killed_mid_upload"] = not (half / MANIFEST_NAME).exists()
    run.checks["restored_last_complete_checkpoint"] = _restored(run, 2, complete, written_by=1)


def newest_recorded(run: DemoRun) -> int | None:
    """The step of the newest checkpoint the control plane recorded for the job."""
    job = run.store.get_job(run.job_id)
    found = job.recorded_checkpoints if job is not None else []
    return found[0].step if found else None


def killed_during_restore(run: DemoRun) -> None:
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    destroy(run, run.wait_step(1, 100, checkpoint=100))

    def rented(view: JobView) -> Generation | None:
        g = run.generation(view, 2)
        return g if g is not None and g.instance_id is not None else None

    g2 = run.wait("g2 rented", rented)
    complete = newest_recorded(run)  # g1 is superseded: the record is final
    if complete is None:
        raise DemoError("g1 was destroyed with no checkpoint recorded")
    instance = run.instance(g2)
    disk = hosts.get(instance).disk

    def staging() -> Path | None:
        return next(iter(disk.rglob(".tether-restore-*")), None)

    restoring = _catch("g2 restoring a checkpoint", staging)
    hosts.freeze(instance)
    if not restoring.exists():
        raise DemoError(f"g2 finished restoring {restoring.name} before it could be killed")
    run.say(f"g2 is downloading into {restoring.name}")
    run.fault("dead", g2, lambda: hosts.destroy(instance))
    run.wait_training(3)
    seen = run.progress.get(2)
    run.checks["killed_mid_restore"] = 2 not in run.restores and not (
        seen and seen.first_training_at
    )
    run.checks["third_generation_restored"] = _restored(run, 3, complete, written_by=1)


def _restored(run: DemoRun, generation: int, step: int, written_by: int) -> bool:
    """`generation` restored the checkpoint of `step` that generation `written_by` uploaded,
    the newest of those the control plane recorded and gave it."""
    restored = run.restores.get(generation)
    given = restore_candidates(run.stack, run.job_id).get(generation, ())
    return (
        restored is not None
        and bool(given)
        and (given[0].step, given[0].generation) == (step, written_by)
        and restored.manifest_key == given[0].manifest_key
        and restored.manifest_sha256 == given[0].manifest_sha256
    )


__all__ = [
    "TRANSFER_BALLAST_MB",
    "killed_during_restore",
    "killed_during_upload",
    "newest_recorded",
]
