"""`tether submit`'s code step: pack the spec's `code.dir` (or `--code DIR`), upload it through
the presigned URL the jobs API hands out (`POST /code/uploads`; skipped when the same archive is
there already), and put `code: {dir, archive: {sha256, size_bytes}}` in the spec it submits.

Everything that can be wrong with the directory (too big, too many files, unreadable) is found
while packing, before the API is called: the command exits 2 and nothing is uploaded or stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from functions.domain.jobspec import JobSpec
from tether_cli import output
from tether_cli.api_client import TetherApi
from tether_cli.code_pack import Packed, PackError, Tree, check, cleanup, pack
from tether_cli.output import EXIT_USAGE, CliError


@dataclass(frozen=True)
class CodeDir:
    shown: str  # as the user wrote it (kept in the spec for display)
    path: Path  # where it is


def code_dir(job: JobSpec, spec_path: str, override: str | None) -> CodeDir | None:
    """The directory to ship: `--code DIR` (relative to the current directory), else the spec's
    `code.dir` (relative to the spec file's folder); None when the job ships none."""
    if override is not None:
        if job.code is not None and job.code.git is not None:
            raise CliError(
                "code: --code and the spec's code.git are mutually exclusive "
                "(a job's code comes from git or from a directory)",
                EXIT_USAGE,
            )
        return CodeDir(override, Path(override))
    if job.code is None or job.code.dir is None:
        return None
    written = Path(job.code.dir).expanduser()
    path = written if written.is_absolute() else Path(spec_path).parent / written
    return CodeDir(job.code.dir, path)


def checked_tree(where: CodeDir) -> Tree:
    """What would be shipped, checked against every limit `submit` applies (`code_pack.check`,
    the compressed size included; no archive is written), or exit 2 saying why it cannot be."""
    try:
        return check(where.path)
    except PackError as exc:
        raise CliError(exc.message, EXIT_USAGE, exc.details) from None


def packed(where: CodeDir) -> Packed:
    try:
        result = pack(where.path)
    except PackError as exc:
        raise CliError(exc.message, EXIT_USAGE, exc.details) from None
    for line in result.tree.skipped:
        output.warn(line)
    return result


def ship(
    api: TetherApi, job: JobSpec, where: CodeDir, archive: Packed, *, quiet: bool
) -> tuple[dict[str, Any], bool]:
    """Upload `archive` unless the API has it already: (the spec to submit as JSON, uploaded)."""
    reply = api.code_upload(archive.sha256, archive.size_bytes)
    uploaded = not reply.get("exists")
    if uploaded:
        columns = (
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn()
        )  # fmt: skip
        progress = Progress(*columns, console=output.stderr_console(), disable=quiet)
        with progress:
            task = progress.add_task("uploading code", total=archive.size_bytes)
            api.put_file(str(reply["url"]), archive.path, lambda n: progress.advance(task, n))
    spec = job.model_dump(mode="json")
    spec["code"] = {
        "dir": where.shown,
        "archive": {"sha256": archive.sha256, "size_bytes": archive.size_bytes},
    }
    return spec, uploaded


def describe(archive: Packed, uploaded: bool) -> str:
    tree = archive.tree
    verb = "uploaded" if uploaded else "already uploaded"
    return (
        f"code: {tree.root} packed, {tree.files} files, {archive.size_bytes} bytes compressed "
        f"(sha256 {archive.sha256[:12]}…), {verb}"
    )


__all__ = ["CodeDir", "checked_tree", "cleanup", "code_dir", "describe", "packed", "ship"]
