"""Where a local host's processes see its disk: at one absolute path, the same on every host.

On Vast every container of a job sees its disk at the same absolute paths (`/workspace/...`),
and training scripts write those paths into what they save: a Lightning `.ckpt` records its
ModelCheckpoint's `dirpath` and best and last paths, a Trainer's `trainer_state.json` its best
checkpoint's path. Local hosts each have their own disk directory (`<root>/<instance id>/disk`),
so without more the same script would save different bytes on each host and a rehearsal could
never end identical to its uninterrupted run.

Where this machine allows unprivileged user and mount namespaces (Linux: `unshare(1)`), each
host runs in a mount namespace of its own with its disk bind-mounted at `SEEN_ROOT`, and the
rehearsal's uninterrupted run does the same with its own directory: every one of them sees the
job's paths at `SEEN_ROOT/...`, as containers see `/workspace/...`, while each still writes to its
own disk (a destroy still deletes exactly that host's files). Nothing is shared: `SEEN_ROOT`
itself stays an empty directory outside the namespaces. Where namespaces are not available
(macOS, a kernel or container that forbids them) the hosts see their own disk paths, as before,
and `available()` says so.
"""

from __future__ import annotations

import functools
import logging
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

LOG = logging.getLogger(__name__)

SEEN_ROOT = Path(tempfile.gettempdir()) / "tether-host-disk"

# Binds the disk ($1) at the seen root ($2), moves to $3 and becomes the command; 125 (as
# `env` and `nohup` use for their own failures) when the bind fails, so it is not mistaken for
# the command's exit.
_BIND_THEN_EXEC = (
    '{mount} --bind -- "$1" "$2" || exit 125; cd -- "$3" || exit 125; shift 3; exec "$@"'
)


def _wrapped(command: Sequence[str], disk: Path, cwd: Path = SEEN_ROOT) -> list[str]:
    unshare, mount = shutil.which("unshare"), shutil.which("mount")
    assert unshare is not None and mount is not None, "available() first"
    return [
        unshare,
        "--user",
        "--map-root-user",  # root inside, this user outside: a bind needs no real privilege
        "--mount",  # private propagation: the bind is seen by this host's processes only
        "--",
        "/bin/sh",
        "-c",
        _BIND_THEN_EXEC.format(mount=shlex.quote(mount)),  # PATH left as the host's
        "sh",
        str(disk),
        str(SEEN_ROOT),
        str(cwd),
        *command,
    ]


@functools.cache
def available() -> bool:
    """Whether hosts can see their disks at `SEEN_ROOT` (checked once: a bind in a throwaway
    namespace, read back)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        LOG.info("no unshare(1): local hosts see their disks at their own paths")
        return False
    try:
        SEEN_ROOT.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="tether-disk-check-") as scratch:
            (Path(scratch) / "seen").write_text("yes")
            done = subprocess.run(
                _wrapped(["cat", str(SEEN_ROOT / "seen")], Path(scratch)),
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
    except (OSError, subprocess.SubprocessError) as exc:
        LOG.info("mount namespaces unavailable (%s): hosts see their own disk paths", exc)
        return False
    if done.returncode != 0 or done.stdout != "yes":
        LOG.info(
            "mount namespaces unavailable (%s): hosts see their own disk paths",
            done.stderr.strip() or f"exit {done.returncode}",
        )
        return False
    return True


def seen_root(disk: Path) -> Path:
    """The path at which a process started by `command_seeing` sees `disk`."""
    return SEEN_ROOT if available() else disk


def command_seeing(command: Sequence[str], disk: Path, cwd: Path | None = None) -> list[str]:
    """`command`, run so that it sees `disk` at `seen_root(disk)`, started in `cwd` (a path as
    it sees it; the seen root by default). Without namespaces the caller starts it in
    `on_disk(cwd, disk)`."""
    if not available():
        return list(command)
    return _wrapped(command, disk, cwd if cwd is not None else SEEN_ROOT)


def entering(pid: int, cwd: str | Path) -> list[str]:
    """The prefix that runs a command inside the host of process `pid` (its mount namespace,
    so the host's paths mean what they mean to its processes), started in `cwd` (a path as the
    host sees it); empty without namespaces."""
    nsenter = shutil.which("nsenter")
    if not available() or nsenter is None:
        return []
    # (not nsenter's --wd, which opens the directory before it enters: this machine's path)
    return [nsenter, f"--target={pid}", "--user", "--mount", "--preserve-credentials", "--",
            "/bin/sh", "-c", 'cd -- "$0" && exec "$@"', str(cwd)]  # fmt: skip


def on_disk(seen: str | Path, disk: Path) -> Path:
    """Where a path a host's process sees (below `seen_root(disk)`) is on this machine."""
    path = Path(seen)
    root = seen_root(disk)
    return disk / path.relative_to(root) if path.is_relative_to(root) else path
