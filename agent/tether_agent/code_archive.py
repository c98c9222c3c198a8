"""The job's code as an archive: downloaded, verified and extracted before the restore.

The spec's `code: {dir}` is packed and uploaded by `tether submit`; the control plane copies it
to `jobs/<job_id>/code/<sha256>.tar.gz` and gives the agent the sha256 as
`TETHER_CODE_ARCHIVE_SHA256`. On every host (a replacement's disk is wiped) the agent downloads
it with its read-only key into a hidden staging directory, checks its sha256 (a mismatch: the
code is refused, never run), extracts it there safely and only then renames the tree into
`$TETHER_WORK_DIR/code`, so a download or extraction killed halfway never becomes the code a
command runs in.

Safe extraction (`extract_safely`) checks every member before writing anything: a relative,
normalised name (no absolute path, no `..`, no empty or `.` parts, no backslash), no duplicate,
regular files, directories and symbolic links only (no hard links, devices or FIFOs), a link's
target relative and inside the tree, no member below a link, at most `MAX_ARCHIVE_FILES`
members and `MAX_UNPACKED_BYTES` in all. Files are written with `O_EXCL | O_NOFOLLOW`, links
last. The limits mirror `functions/domain/code_archive.py` (held equal by
`tests/unit/agent/test_contract.py`).

Any failure is `CodeUnavailable` with a reason fit for the log (exit 14, agent/README.md).
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tarfile
from pathlib import Path
from typing import Protocol

from tether_agent.job_code import CodeUnavailable
from tether_agent.storage import StorageError, TransferCancelled

MAX_ARCHIVE_BYTES = 100 * 1024 * 1024
MAX_ARCHIVE_FILES = 20_000
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
_COPY_CHUNK = 1024 * 1024


class Reader(Protocol):
    """What the agent's read-only `Storage` offers here."""

    def list_sizes(self, prefix: str) -> dict[str, int]: ...

    def download_file(self, key: str, dest: Path, size: int) -> str: ...


def code_prefix(job_prefix: str) -> str:
    return f"{job_prefix}code/"


def archive_key(job_prefix: str, sha256: str) -> str:
    """`jobs/<job_id>/code/<sha256>.tar.gz` (`functions/domain/storage_layout.job_code_key`)."""
    return f"{code_prefix(job_prefix)}{sha256}.tar.gz"


def fetch_archive(reader: Reader, job_prefix: str, sha256: str, dest: Path) -> Path:
    """Download, verify and extract the job's archive into `dest` (replaced if present).
    `TransferCancelled` passes through (the agent was told to stop)."""
    key = archive_key(job_prefix, sha256)
    staging = dest.with_name(f".{dest.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        try:
            size = reader.list_sizes(code_prefix(job_prefix)).get(key)
        except TransferCancelled:
            raise
        except StorageError as exc:
            raise CodeUnavailable(f"cannot list the job's code in storage: {exc}") from None
        if size is None:
            raise CodeUnavailable(f"the job's code archive {key} is not in storage")
        if size > MAX_ARCHIVE_BYTES:
            raise CodeUnavailable(
                f"the job's code archive {key} has {size} bytes, more than {MAX_ARCHIVE_BYTES}"
            )
        packed = staging / "archive.tar.gz"
        try:
            got = reader.download_file(key, packed, size)
        except TransferCancelled:
            raise
        except StorageError as exc:
            raise CodeUnavailable(f"cannot download the job's code archive {key}: {exc}") from None
        if got != sha256:
            raise CodeUnavailable(
                f"the job's code archive {key} hashes to {got}, not {sha256}: refusing to run "
                "code that does not match what was submitted"
            )
        tree = staging / "tree"
        extract_safely(packed, tree)
        shutil.rmtree(dest, ignore_errors=True)
        tree.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def extract_safely(archive: Path, dest: Path) -> int:
    """Extract the tar.gz `archive` into the new directory `dest`; the number of members.
    Everything is checked before anything is written (the module docstring has the rules)."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members = _checked(tar)
            dest.mkdir(parents=True)
            links: list[tarfile.TarInfo] = []
            for member in members:
                target = dest / member.name
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.issym():
                    links.append(member)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    _write_file(tar, member, target)
            for member in links:
                (dest / member.name).parent.mkdir(parents=True, exist_ok=True)
                (dest / member.name).symlink_to(member.linkname)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise CodeUnavailable(f"the job's code archive cannot be extracted: {exc}") from None
    return len(members)


def _checked(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members: list[tarfile.TarInfo] = []
    names: set[str] = set()
    links: set[str] = set()
    total = 0
    for member in tar:
        if len(members) >= MAX_ARCHIVE_FILES:
            raise CodeUnavailable(f"the archive has more than {MAX_ARCHIVE_FILES} members")
        name = _safe_name(member.name)
        if name in names:
            raise CodeUnavailable(f"the archive lists {name!r} twice")
        if member.issym():
            _check_link(name, member.linkname)
            links.add(name)
        elif not (member.isfile() or member.isdir()):
            kind = "a hard link" if member.islnk() else "a device, FIFO or other special file"
            raise CodeUnavailable(f"the archive member {name!r} is {kind}")
        total += max(0, member.size) if member.isfile() else 0
        if total > MAX_UNPACKED_BYTES:
            raise CodeUnavailable(f"the archive unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        member.name = name
        names.add(name)
        members.append(member)
    for member in members:
        parents = member.name.split("/")[:-1]
        for i in range(1, len(parents) + 1):
            if "/".join(parents[:i]) in links:
                raise CodeUnavailable(f"the archive member {member.name!r} lies below a link")
    return members


def _safe_name(raw: str) -> str:
    name = raw[2:] if raw.startswith("./") else raw
    name = name.rstrip("/")
    parts = name.split("/")
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\0" in name
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise CodeUnavailable(f"the archive member {raw!r} has an unsafe path")
    return name


def _check_link(name: str, target: str) -> None:
    if not target or target.startswith("/") or "\0" in target:
        raise CodeUnavailable(f"the archive link {name!r} points outside the tree ({target!r})")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    if resolved == ".." or resolved.startswith("../") or resolved.startswith("/"):
        raise CodeUnavailable(f"the archive link {name!r} points outside the tree ({target!r})")


def _write_file(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    source = tar.extractfile(member)
    if source is None:
        raise CodeUnavailable(f"the archive member {member.name!r} has no content")
    mode = 0o755 if member.mode & stat.S_IXUSR else 0o644
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    written = 0
    with os.fdopen(fd, "wb") as out, source:
        while chunk := source.read(_COPY_CHUNK):
            written += len(chunk)
            if written > member.size:
                raise CodeUnavailable(f"the archive member {member.name!r} is longer than said")
            out.write(chunk)
    target.chmod(mode)  # the umask may have narrowed it
