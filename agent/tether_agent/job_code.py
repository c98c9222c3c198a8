"""The job's code from git: one commit, cloned before the training command starts.

The spec's `code: {git, commit}` reaches the agent as `TETHER_CODE_GIT` / `TETHER_CODE_COMMIT`.
The commit is fetched into a hidden staging directory next to the destination, checked out
detached, checked to be exactly that commit (`rev-parse HEAD`), and only then renamed into
place, so a clone killed halfway never becomes the code a command runs in. Every host fetches
again (a replacement host has a wiped disk); a destination left by an earlier run on the same
disk is replaced. Git never prompts (a private repository without a key fails at once) and no
single git command runs longer than `timeout_s`.

Any failure is `CodeUnavailable` with a reason fit for the log; the agent then fails the
generation without starting the command (exit 14, agent/README.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

GIT_TIMEOUT_S = 900.0  # per git command: a large repository over a slow link, not a hang
_OUTPUT_TAIL = 300  # characters of git's own message kept in the reason


class CodeUnavailable(Exception):
    """The job's code could not be put in place; the message says why."""


def fetch_git(
    url: str,
    commit: str,
    dest: Path,
    *,
    timeout_s: float = GIT_TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> Path:
    """Clone `commit` of `url` into `dest` (replaced if present). Returns `dest`."""
    git = shutil.which("git")
    if git is None:
        raise CodeUnavailable(
            "the job names its code by git (code.git), but this image has no `git` on PATH: "
            "install git in the image"
        )
    staging = dest.with_name(f".{dest.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return _run([git, "-C", str(staging), *args], env, timeout_s, cancel)

    try:
        _check(run("init", "--quiet"), "git init")
        _check(run("remote", "add", "origin", "--", url), "git remote add")
        # One commit only, when the server allows fetching by SHA (GitHub, GitLab do);
        # otherwise the whole history, from which the commit is checked out.
        if run("fetch", "--quiet", "--depth", "1", "origin", commit).returncode != 0:
            _check(run("fetch", "--quiet", "origin"), f"git fetch {url}")
        _check(
            run("checkout", "--quiet", "--detach", commit),
            f"commit {commit} of {url}",
        )
        head = run("rev-parse", "HEAD")
        _check(head, "git rev-parse HEAD")
        if head.stdout.strip() != commit:
            raise CodeUnavailable(f"checked out {head.stdout.strip()!r}, not commit {commit}")
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return dest


def _run(
    argv: Sequence[str], env: dict[str, str], timeout_s: float, cancel: threading.Event | None
) -> subprocess.CompletedProcess[str]:
    try:
        process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        raise CodeUnavailable(f"cannot run git: {exc}") from None
    waited = 0.0
    while True:
        try:
            out, _ = process.communicate(timeout=0.2)
            return subprocess.CompletedProcess(argv, process.returncode, out, "")
        except subprocess.TimeoutExpired:
            waited += 0.2
            if waited >= timeout_s or (cancel is not None and cancel.is_set()):
                process.kill()
                process.communicate()
                why = "cancelled" if cancel is not None and cancel.is_set() else "timed out"
                raise CodeUnavailable(f"git {argv[3]} {why} after {waited:.0f} s") from None


def _check(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode != 0:
        said = " ".join(done.stdout.split())[-_OUTPUT_TAIL:] or f"exit {done.returncode}"
        raise CodeUnavailable(f"{what} failed: {said}")
