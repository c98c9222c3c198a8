"""Where this host gets the job's code: the archive `tether submit` uploaded
(`code_archive.py`) or a git commit (`job_code.py`); neither when the image holds it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from tether_agent.code_archive import archive_key, fetch_archive
from tether_agent.job_code import fetch_git
from tether_agent.settings import AgentSettings
from tether_agent.storage import Storage


@dataclass(frozen=True)
class CodeSource:
    what: str  # for the logs: the archive's key, or the repository and commit
    fetch: Callable[[], object]  # raises CodeUnavailable (or TransferCancelled)
    verified: bool  # the archive's sha256 is checked; git checks its own objects


def code_source(
    settings: AgentSettings, reader: Storage, cancel: threading.Event
) -> CodeSource | None:
    """How to fetch the job's code into `settings.code_dir`; None when the spec names none.
    `cancel` stops a git fetch (a download is stopped by the reader's own cancel event)."""
    s = settings
    if s.code_dir is None:
        return None
    if s.code_archive_sha256 is not None:
        return CodeSource(
            f"archive {archive_key(s.s3_prefix, s.code_archive_sha256)}",
            partial(fetch_archive, reader, s.s3_prefix, s.code_archive_sha256, s.code_dir),
            verified=True,
        )
    if s.code_git is not None and s.code_commit is not None:
        return CodeSource(
            f"{s.code_git} at {s.code_commit}",
            partial(fetch_git, s.code_git, s.code_commit, s.code_dir, cancel=cancel),
            verified=False,
        )
    return None
