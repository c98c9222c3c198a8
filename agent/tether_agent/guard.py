"""The training command's guard: ends the training when its agent dies.

The agent runs the training command through this small process, the leader of the training's
own process group (`runner.TrainingProcess`). While the agent lives the guard only waits: signals
the agent sends to the group reach the command directly, the guard notes them and stays to pass
on the command's exit status (a signal death N as 128+N, as a shell reports it; 127 when the
command cannot start).

When the agent dies (OOM-killed, SIGKILLed, crashed) nobody heartbeats, uploads or stops the
training any more, and the control plane will replace the host. The guard sees it (its parent
changes; checked every `POLL_S`), sends SIGTERM to the whole group (so the training may save a
checkpoint and exit, as on a `stop`), waits up to `--grace-s`, then SIGKILLs the group, itself
included. Nothing is left running. Meanwhile it keeps the output pipe drained into the agent's
training log (`--log`), through its copy of the pipe's read end (`--drain-fd`): otherwise the
training's next print would fail on a pipe with no reader and it could die before it saves.

A launcher may start its workers out of the group: torchrun puts each worker in a session of
its own, and forwards a SIGTERM to them itself, but dies of a SIGKILL without passing it on. So
every SIGKILL also goes to each process below the command (`descendants`, read from /proc just
before), wherever its group.

Linux's `PR_SET_PDEATHSIG` was not enough on its own: it signals only the direct child (a
`bash -c` that runs a pipeline leaves its children running), fires when the forking *thread*
exits rather than the agent, and does not exist elsewhere. Polling the parent costs nothing.

Standard library only, and run by path (`python -I guard.py …`): the image's interpreter runs it
when the agent was installed without a venv.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

POLL_S = 0.5  # how often the guard checks that its agent is alive
PREFIX = "[tether] "


def _note(signum: int, frame: FrameType | None) -> None:
    """The agent signalled the group: the command got it too; the guard stays to report."""


def _say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # the agent (the pipe's reader) may be gone
        sys.stderr.write(PREFIX + text + "\n")
        sys.stderr.flush()


def _drain(fd: int, log_path: str | None) -> None:
    """Read the output pipe after the agent is gone, appending it to the training log."""
    with contextlib.ExitStack() as stack:
        sink = None
        if log_path:
            with contextlib.suppress(OSError):
                sink = stack.enter_context(open(log_path, "ab"))  # noqa: PTH123
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return
            if not data:
                return
            if sink is not None:
                with contextlib.suppress(OSError):
                    sink.write(data)
                    sink.flush()


def _child_waiter(pid: int) -> Callable[[float], None]:
    """Sleeps up to `t` seconds, returning early when the child exits (a pidfd on Linux)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return time.sleep

    def wait(seconds: float) -> None:
        select.select([pidfd], [], [], seconds)

    return wait


def exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def descendants(pid: int) -> list[int]:
    """The live processes below `pid` (its children, theirs, …), read from /proc; [] without
    /proc. Those in another session or group than `pid` (torchrun's workers) are among them."""
    children: dict[int, list[int]] = {}
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":  # a zombie is dead already
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found.extend(below)
        todo.extend(below)
    return found


def kill_tree(group: int, below: list[int]) -> None:
    """SIGKILL each process of `below` (`descendants` taken just before: once their parent
    dies, those out of the group can no longer be found), then the process group `group` (last:
    it may hold the caller)."""
    for pid in below:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGKILL)


def guard(
    command: Sequence[str],
    *,
    agent_pid: int,
    grace_s: float,
    drain_fd: int | None = None,
    log_path: str | None = None,
) -> int:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _note)  # a handler, not SIG_IGN: the command does not inherit it
    try:
        child = subprocess.Popen(list(command))  # in this group; SIGPIPE and co. reset
    except OSError as exc:
        _say(f"cannot start the training command: {exc}")
        return 127
    wait = _child_waiter(child.pid)
    while True:
        code = child.poll()
        if code is not None:
            return exit_status(code)
        if os.getppid() != agent_pid:
            break
        wait(POLL_S)
    # The agent is gone.
    if drain_fd is not None:
        threading.Thread(target=_drain, args=(drain_fd, log_path), daemon=True).start()
    _say(f"the agent (pid {agent_pid}) is gone: SIGTERM to the training, SIGKILL in {grace_s:g}s")
    with contextlib.suppress(OSError):
        os.killpg(0, signal.SIGTERM)  # the whole group; the guard only notes it
    deadline = time.monotonic() + grace_s
    while child.poll() is None and time.monotonic() < deadline:
        wait(min(POLL_S, max(deadline - time.monotonic(), 0.0)))
    code = child.poll()
    _say(
        "training ended after the agent died"
        if code is not None
        else f"training ignored SIGTERM for {grace_s:g}s: SIGKILL"
    )
    # Workers it left behind, in the group or out of it (torchrun's), and the guard itself.
    kill_tree(os.getpgid(0), descendants(os.getpid()))
    return exit_status(code) if code is not None else 128 + signal.SIGKILL  # not reached


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="guard.py", description=__doc__.split("\n")[0])
    parser.add_argument("--agent-pid", type=int, required=True)
    parser.add_argument("--grace-s", type=float, required=True)
    parser.add_argument("--drain-fd", type=int, default=None)
    parser.add_argument("--log", default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("no command after --")
    return guard(
        command,
        agent_pid=args.agent_pid,
        grace_s=args.grace_s,
        drain_fd=args.drain_fd,
        log_path=args.log,
    )


if __name__ == "__main__":
    sys.exit(main())
