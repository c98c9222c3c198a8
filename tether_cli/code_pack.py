"""Pack a job's working directory (spec `code: {dir}`) into a deterministic tar.gz. No network.

What goes in: every file and directory under the root except `.git/`, what the `.gitignore` and
`.tetherignore` files say to leave out (`tether_cli/ignore_rules.py`), and anything neither a
regular file, a directory nor a symbolic link (sockets, FIFOs: skipped, said). A symbolic link
goes in as a link when its target lies inside the tree, otherwise it is skipped, said.

The same tree always gives the same bytes, hence the same sha256 (uploads are content-addressed
and skipped when already there): entries sorted by path, every mtime 0, uid/gid 0 without
names, mode 0755 for directories and executable files and 0644 for the rest, a gzip header
without a name or time.

Limits (`functions/domain/code_archive.py`, which the API and the agent enforce too):
`MAX_ARCHIVE_BYTES` compressed, `MAX_ARCHIVE_FILES` entries, `MAX_UNPACKED_BYTES` in all. Past
one, or on a file that cannot be read, `PackError` says what and names the biggest files and
directories to add to `.tetherignore`; the partial archive is deleted. `check` applies every one
of them without writing an archive (what `tether validate` runs; `pack` is what `submit` runs):
the same walk and the same compression, into a byte counter, and only when the files could
compress to more than `MAX_ARCHIVE_BYTES` (`archive_bound`).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import stat
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from functions.domain.code_archive import MAX_ARCHIVE_BYTES, MAX_ARCHIVE_FILES, MAX_UNPACKED_BYTES
from tether_cli.ignore_rules import IGNORE_FILES, Rule, ignored, parse_rules

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

ALWAYS_EXCLUDED = (".git",)
BIGGEST_SHOWN = 8
_CHUNK = 1024 * 1024


class PackError(Exception):
    """The directory cannot be packed; `details` are lines to print after the message."""

    def __init__(self, message: str, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []


@dataclass(frozen=True)
class Entry:
    path: str  # relative, posix
    kind: str  # "file" | "dir" | "link"
    size: int = 0
    executable: bool = False
    link: str = ""


@dataclass
class Tree:
    root: Path
    entries: list[Entry] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # one line each: what and why

    @property
    def files(self) -> int:
        return sum(1 for e in self.entries if e.kind == "file")

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)


@dataclass(frozen=True)
class Packed:
    path: Path  # the tar.gz (a temporary file: the caller deletes it)
    sha256: str
    size_bytes: int
    tree: Tree


def collect(root: Path) -> Tree:
    """What packing `root` would put in, checked against the limits (PackError past one)."""
    if not root.is_dir():
        raise PackError(f"code.dir {root} is not a directory")
    tree = Tree(root)
    _walk(tree, root, "", [])
    if len(tree.entries) > MAX_ARCHIVE_FILES:
        raise PackError(
            f"{root} has {len(tree.entries)} files and directories to ship, more than "
            f"{MAX_ARCHIVE_FILES}; add what the job does not need to {root / '.tetherignore'}",
            _most_entries(tree),
        )
    if tree.total_bytes > MAX_UNPACKED_BYTES:
        raise PackError(
            f"{root} has {_human(tree.total_bytes)} to ship, more than "
            f"{_human(MAX_UNPACKED_BYTES)}; add what the job does not need to "
            f"{root / '.tetherignore'} (models and data belong in storage, not in the code)",
            biggest(tree),
        )
    return tree


def archive_bound(tree: Tree) -> int:
    """An upper bound on the packed size of `tree`, whatever its files hold: each entry's tar
    header, long-name record and padding, the archive's end blocks, and deflate's worst-case
    growth on incompressible data (zlib's `deflateBound`) with the gzip header and trailer."""
    headers = sum(2048 + 2 * (len(e.path) + len(e.link)) for e in tree.entries)
    tar_bytes = tree.total_bytes + headers + tarfile.RECORDSIZE
    return tar_bytes + tar_bytes // 2048 + 1024


def check(root: Path) -> Tree:
    """What packing `root` would put in, checked against every limit `pack` applies, the
    compressed size included, without writing the archive (PackError past one)."""
    tree = collect(root)
    if archive_bound(tree) > MAX_ARCHIVE_BYTES:
        _write(tree, _ByteCounter())
    return tree


class _ByteCounter(io.RawIOBase):
    """A sink that keeps only how many bytes were written to it."""

    def __init__(self) -> None:
        self._count = 0

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer, /) -> int:
        size = memoryview(data).nbytes
        self._count += size
        return size

    def tell(self) -> int:
        return self._count


def pack(root: Path, out_dir: Path | None = None) -> Packed:
    """Pack `root` into a temporary tar.gz (in `out_dir`, default the system's temp dir)."""
    tree = collect(root)
    fd, name = tempfile.mkstemp(prefix="tether-code-", suffix=".tar.gz", dir=out_dir)
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as raw:
            _write(tree, raw)
            size = raw.tell()
        digest = hashlib.sha256()
        with path.open("rb") as done:
            while chunk := done.read(_CHUNK):
                digest.update(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Packed(path, digest.hexdigest(), size, tree)


def _walk(tree: Tree, directory: Path, rel: str, inherited: list[Rule]) -> None:
    rules = list(inherited)
    for name in IGNORE_FILES:
        ignore_file = directory / name
        if ignore_file.is_file():
            rules.extend(parse_rules(_read_text(ignore_file, rel, name), rel))
    try:
        names = sorted(p.name for p in directory.iterdir())
    except OSError as exc:
        raise PackError(f"cannot read the directory {_shown(rel)}: {exc.strerror}") from None
    for name in names:
        path = f"{rel}/{name}" if rel else name
        full = directory / name
        try:
            info = full.lstat()
        except OSError as exc:
            raise PackError(f"cannot read {path}: {exc.strerror}") from None
        is_dir = stat.S_ISDIR(info.st_mode)
        if (is_dir and name in ALWAYS_EXCLUDED) or ignored(rules, path, is_dir):
            continue
        if stat.S_ISLNK(info.st_mode):
            _add_link(tree, full, path)
        elif is_dir:
            tree.entries.append(Entry(path, "dir"))
            _walk(tree, full, path, rules)
        elif stat.S_ISREG(info.st_mode):
            if not os.access(full, os.R_OK):
                raise PackError(
                    f"cannot read {path}: permission denied; make it readable or add it to "
                    f"{tree.root / '.tetherignore'}"
                )
            executable = bool(info.st_mode & stat.S_IXUSR)
            tree.entries.append(Entry(path, "file", info.st_size, executable))
        else:
            tree.skipped.append(f"{path}: skipped (not a regular file, directory or link)")


def _add_link(tree: Tree, full: Path, path: str) -> None:
    target = str(full.readlink())
    root = tree.root.resolve()
    resolved = Path(os.path.normpath(full.parent.resolve() / target))
    if resolved != root and root not in resolved.parents:
        tree.skipped.append(f"{path}: skipped (a link to {target}, outside the directory)")
        return
    relative = os.path.relpath(resolved, full.parent.resolve())
    tree.entries.append(Entry(path, "link", link=Path(relative).as_posix()))


def _read_text(path: Path, rel: str, name: str) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        shown = f"{rel}/{name}" if rel else name
        raise PackError(f"cannot read {shown}: {exc.strerror}") from None


def _write(tree: Tree, raw: io.RawIOBase | io.BufferedWriter) -> None:
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for entry in tree.entries:
            info = tarfile.TarInfo(entry.path)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if entry.kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif entry.kind == "link":
                info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, entry.link
                tar.addfile(info)
            else:
                info.mode = 0o755 if entry.executable else 0o644
                info.size = entry.size
                try:
                    with (tree.root / entry.path).open("rb") as source:
                        tar.addfile(info, _Exactly(source, entry.size, entry.path))
                except OSError as exc:
                    raise PackError(f"cannot read {entry.path}: {exc.strerror}") from None
            if raw.tell() > MAX_ARCHIVE_BYTES:
                raise PackError(
                    f"the packed code passes {_human(MAX_ARCHIVE_BYTES)} compressed; add what "
                    f"the job does not need to {tree.root / '.tetherignore'} (models and data "
                    "belong in storage, not in the code)",
                    biggest(tree),
                )


class _Exactly(io.RawIOBase):
    """A file's content as collected: a file that changed size meanwhile is an error, not a
    corrupt archive."""

    def __init__(self, source: io.BufferedReader, size: int, path: str) -> None:
        self._source, self._left, self._path = source, size, path

    def read(self, n: int = -1) -> bytes:
        want = self._left if n < 0 else min(n, self._left)
        data = self._source.read(want)
        if len(data) < want:
            raise PackError(f"{self._path} changed while it was packed; pack again")
        self._left -= len(data)
        return data


def biggest(tree: Tree) -> list[str]:
    """The biggest files and top-level directories, biggest first: what to ignore."""
    sizes: Counter[str] = Counter()
    for entry in tree.entries:
        if entry.kind != "file":
            continue
        sizes[entry.path] = entry.size
        parts = entry.path.split("/")
        for depth in range(1, min(len(parts), 3)):
            sizes["/".join(parts[:depth]) + "/"] += entry.size
    return [f"{_human(size):>10}  {path}" for path, size in sizes.most_common(BIGGEST_SHOWN)]


def _most_entries(tree: Tree) -> list[str]:
    counts: Counter[str] = Counter()
    for entry in tree.entries:
        parts = entry.path.split("/")
        for depth in range(1, min(len(parts), 3)):
            counts["/".join(parts[:depth]) + "/"] += 1
    return [f"{count:>10}  {path}" for path, count in counts.most_common(BIGGEST_SHOWN)]


def _shown(rel: str) -> str:
    return rel or "."


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover


def cleanup(packed: Packed) -> None:
    with contextlib.suppress(OSError):
        packed.path.unlink()
