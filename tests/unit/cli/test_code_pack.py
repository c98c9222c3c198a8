"""Packing a job's working directory: ignore rules, determinism, limits, unreadable files and
links out of the tree; and the agent's safe extraction of what was packed (and of worse)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from tether_agent.code_archive import extract_safely
from tether_agent.job_code import CodeUnavailable

from tether_cli import code_pack
from tether_cli.code_pack import PackError, collect, pack
from tether_cli.ignore_rules import ignored, parse_rules


@pytest.mark.parametrize(
    ("patterns", "path", "is_dir", "expected"),
    [
        ("*.log", "a.log", False, True),
        ("*.log", "deep/er/a.log", False, True),
        ("*.log\n!keep.log", "keep.log", False, False),
        ("*.log\n!keep.log", "x/keep.log", False, False),
        ("build/", "build", True, True),
        ("build/", "build", False, False),  # dir only
        ("/top.txt", "top.txt", False, True),
        ("/top.txt", "sub/top.txt", False, False),  # anchored
        ("docs/*.md", "docs/a.md", False, True),
        ("docs/*.md", "x/docs/a.md", False, False),  # a middle slash anchors
        ("docs/*.md", "docs/sub/a.md", False, False),  # * never crosses /
        ("**/cache", "a/b/cache", True, True),
        ("**/cache", "cache", True, True),
        ("a/**/b", "a/b", False, True),
        ("a/**/b", "a/x/y/b", False, True),
        ("logs/**", "logs/x/y.txt", False, True),
        ("# comment\n\n", "# comment", False, False),
        ("\\#hash", "#hash", False, True),
        ("file?.txt", "file1.txt", False, True),
        ("file[0-2].txt", "file3.txt", False, False),
        ("file[!0-2].txt", "file3.txt", False, True),
    ],
)
def test_gitignore_syntax(patterns: str, path: str, is_dir: bool, expected: bool) -> None:
    assert ignored(parse_rules(patterns), path, is_dir) is expected


def test_a_nested_file_applies_below_its_directory_only() -> None:
    rules = parse_rules("*.tmp\n") + parse_rules("!keep.tmp\n/local.txt\n", "sub")
    assert ignored(rules, "a.tmp", False)
    assert not ignored(rules, "sub/keep.tmp", False)
    assert ignored(rules, "keep.tmp", False)  # the nested negation is sub/'s only
    assert ignored(rules, "sub/local.txt", False)
    assert not ignored(rules, "local.txt", False)


def _tree(root: Path) -> Path:
    (root / "src" / "cache").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(os.urandom(4096))
    (root / "train.py").write_text("print('hi')\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "a.log").write_text("log")
    (root / "keep.log").write_text("keep")
    (root / "src" / "model.py").write_text("x = 1\n")
    (root / "src" / "cache" / "c.bin").write_text("c")
    (root / "src" / "secret.txt").write_text("s")
    (root / ".gitignore").write_text("/data/\n*.log\n!keep.log\n**/cache/\n")
    (root / "src" / ".tetherignore").write_text("secret.txt\n")
    return root


def _names(archive: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(archive) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_packing_honours_ignore_files_and_never_ships_git(tmp_path: Path) -> None:
    packed = pack(_tree(tmp_path / "w"))
    try:
        members = _names(packed.path)
    finally:
        packed.path.unlink()
    assert sorted(members) == [
        ".gitignore", "keep.log", "run.sh", "src", "src/.tetherignore", "src/model.py",
        "train.py",
    ]  # fmt: skip
    assert members["run.sh"].mode == 0o755 and members["train.py"].mode == 0o644
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members.values()} == {
        (0, 0, 0, "", "")
    }


def test_the_same_tree_gives_the_same_sha256(tmp_path: Path) -> None:
    first = pack(_tree(tmp_path / "one"))
    os.utime(tmp_path / "one" / "train.py", (1, 1))  # times do not count
    again = pack(tmp_path / "one")
    other = pack(_tree(tmp_path / "two"))  # same content elsewhere, made at another time
    (tmp_path / "two" / "train.py").write_text("print('changed')\n")
    changed = pack(tmp_path / "two")
    for p in (first, again, other, changed):
        p.path.unlink()
    assert first.sha256 == again.sha256
    assert first.size_bytes == again.size_bytes
    assert changed.sha256 != first.sha256


def test_a_link_out_of_the_tree_is_skipped_with_a_message_and_one_inside_kept(
    tmp_path: Path,
) -> None:
    root = tmp_path / "w"
    root.mkdir()
    (root / "train.py").write_text("x")
    (tmp_path / "outside.txt").write_text("secret")
    (root / "escape").symlink_to(tmp_path / "outside.txt")
    (root / "up").symlink_to("../outside.txt")
    (root / "alias.py").symlink_to("train.py")
    tree = collect(root)
    assert [(e.path, e.kind, e.link) for e in tree.entries if e.kind == "link"] == [
        ("alias.py", "link", "train.py")
    ]
    assert sorted(tree.skipped) == [
        f"escape: skipped (a link to {tmp_path / 'outside.txt'}, outside the directory)",
        "up: skipped (a link to ../outside.txt, outside the directory)",
    ]


def test_an_unreadable_file_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "w"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "locked.bin").write_text("x")
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m: not str(p).endswith("locked.bin") and real_access(p, m)
    )
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("tether-code-*"))
    with pytest.raises(PackError, match=r"cannot read sub/locked.bin: permission denied"):
        pack(root)
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("tether-code-*")) == before


def test_past_the_size_limit_the_error_names_the_biggest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "w"
    (root / "weights").mkdir(parents=True)
    (root / "weights" / "model.bin").write_bytes(os.urandom(300_000))
    (root / "train.py").write_text("x")
    monkeypatch.setattr(code_pack, "MAX_ARCHIVE_BYTES", 100_000)
    with pytest.raises(PackError) as caught:
        pack(root, out_dir=tmp_path)
    assert "passes 97.7 KiB compressed" in caught.value.message
    assert ".tetherignore" in caught.value.message
    assert caught.value.details[0].endswith("weights/") or "weights/" in caught.value.details[0]
    assert any(d.endswith("weights/model.bin") for d in caught.value.details)
    assert list(tmp_path.glob("tether-code-*")) == []  # the partial archive is gone


def test_past_the_file_count_the_error_names_the_fullest_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "w"
    (root / "many").mkdir(parents=True)
    for i in range(12):
        (root / "many" / f"{i}.txt").write_text("x")
    monkeypatch.setattr(code_pack, "MAX_ARCHIVE_FILES", 10)
    with pytest.raises(PackError, match="13 files and directories to ship, more than 10") as c:
        collect(root)
    assert c.value.details[0].split() == ["12", "many/"]


def test_what_is_packed_extracts_to_the_same_tree(tmp_path: Path) -> None:
    root = _tree(tmp_path / "w")
    (root / "alias.py").symlink_to("train.py")
    packed = pack(root)
    dest = tmp_path / "out"
    assert extract_safely(packed.path, dest) == 8
    packed.path.unlink()
    assert (dest / "src" / "model.py").read_text() == "x = 1\n"
    assert os.access(dest / "run.sh", os.X_OK)
    assert (dest / "alias.py").is_symlink() and (dest / "alias.py").read_text() == "print('hi')\n"
    assert not (dest / "data").exists() and not (dest / ".git").exists()


def _evil(tmp_path: Path, *members: tuple[tarfile.TarInfo, bytes]) -> Path:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    ("members", "reason"),
    [
        ([(_info("/etc/x"), b"x")], "unsafe path"),
        ([(_info("../x"), b"x")], "unsafe path"),
        ([(_info("a/../../x"), b"x")], "unsafe path"),
        ([(_info("l", tarfile.SYMTYPE, "/etc/passwd"), b"")], "points outside the tree"),
        ([(_info("l", tarfile.SYMTYPE, "../../x"), b"")], "points outside the tree"),
        ([(_info("l", tarfile.SYMTYPE, "."), b""), (_info("l/x"), b"x")], "below a link"),
        ([(_info("h", tarfile.LNKTYPE, "x"), b"")], "a hard link"),
        ([(_info("dev", tarfile.CHRTYPE), b"")], "a device"),
        ([(_info("fifo", tarfile.FIFOTYPE), b"")], "a device, FIFO"),
        ([(_info("x"), b"1"), (_info("x"), b"2")], "twice"),
    ],
)
def test_extraction_refuses_unsafe_members_and_writes_nothing(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]], reason: str
) -> None:
    archive = _evil(tmp_path, *members)
    dest = tmp_path / "out"
    with pytest.raises(CodeUnavailable, match=reason):
        extract_safely(archive, dest)
    assert not dest.exists()


def test_extraction_refuses_a_file_that_is_not_gzip(tmp_path: Path) -> None:
    bad = tmp_path / "x.tar.gz"
    bad.write_bytes(b"not an archive")
    with pytest.raises(CodeUnavailable, match="cannot be extracted"):
        extract_safely(bad, tmp_path / "out")
