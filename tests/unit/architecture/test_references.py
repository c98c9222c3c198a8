"""References in code and docs resolve inside the repository.

Comments, docstrings, test names and docs cite only what a clone contains: the design of record
is `docs/architecture.md` (with explicit anchors, e.g. `docs/architecture.md#invariant-4`) and
the decisions under `docs/decisions/`. A citation of a design document kept elsewhere, of an issue
number, a deliverable or a numbered "why" resolves nowhere and fails here, and so does a link to a
markdown file or anchor that does not exist.

The files checked are the repository's own (`git ls-files`, untracked files that git does not
ignore included); without git, the tree less build outputs and virtual environments.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from tests.paths import ROOT

TEXT_SUFFIXES = frozenset(
    {".py", ".md", ".toml", ".yaml", ".yml", ".txt", ".json", ".cfg", ".ini", ".sh"}
)
TEXT_NAMES = frozenset({"Makefile", "run"})
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        "build",
        "dist",
        "cdk.out",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        "results",
    }
)
THIS_FILE = Path(__file__).resolve()

# The words are spelled in pieces so that a grep of the tree for such references finds none here.
OUTSIDE_DOC = "DES" + "IGN"
ISSUE = "iss" + "ue"
DELIVER = "deli" + "ver"
WHY = "w" + "hy"
STOP = "st" + "op"
NOT_A_UNIT = r"(?!\s*(?:s|ms|min|minutes?|seconds?|hours?|h|times|%|of)\b)"

# (what it is, pattern): each names something a clone does not contain.
FORBIDDEN: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a design document outside the repository", re.compile(rf"\b{OUTSIDE_DOC}\b|§")),
    ("an issue number", re.compile(rf"\b{ISSUE}s?\s*#?\d+", re.IGNORECASE)),
    ("an issue number", re.compile(r"(?<![\w/&])#\d{2,4}\b")),
    ("a pull request number", re.compile(r"\b(?:PR|pull request)\s*#?\d+", re.IGNORECASE)),
    ("a deliverable number", re.compile(rf"\b{DELIVER}(?:able)?s?\s*#?\d+", re.IGNORECASE)),
    ("a numbered 'why'", re.compile(rf"\b{WHY}\s*#?\d{{1,2}}\b", re.IGNORECASE)),
    ("a numbered stop", re.compile(rf"\b{STOP}\s+#?\d+\b{NOT_A_UNIT}", re.IGNORECASE)),
    ("an issue branch", re.compile(r"\bi\d{1,3}-[a-z]")),
)

# `docs/x.md#anchor` (or `README.md#…`, `agent/README.md#…`) anywhere, from the repository root.
ROOTED_CITATION = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.md)#([\w-]+)")
# A markdown link's target: `](path.md#anchor)`, `](path.md)`, `](#anchor)`.
MARKDOWN_LINK = re.compile(r"\]\((?!https?:|mailto:)([^)\s#]*)(?:#([^)\s]+))?\)")
EXPLICIT_ID = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def _walk(root: Path) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        parts = path.relative_to(root).parts
        if any(p in SKIPPED_DIRS or p.endswith(".egg-info") for p in parts[:-1]):
            continue
        if path.is_file():
            found.append(path)
    return found


@cache
def repository_files() -> tuple[Path, ...]:
    git = shutil.which("git")
    paths: list[Path]
    if git is not None and (ROOT / ".git").exists():
        listed = subprocess.run(
            [git, "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
        paths = [ROOT / name for name in listed.split("\0") if name]
    else:
        paths = _walk(ROOT)
    return tuple(
        sorted(
            p
            for p in paths
            if p.is_file()
            and (p.suffix in TEXT_SUFFIXES or p.name in TEXT_NAMES)
            and p.resolve() != THIS_FILE
        )
    )


def forbidden_references(text: str) -> list[tuple[int, str, str]]:
    """(line number, what it cites, the matched text) for every reference that cannot resolve."""
    hits = []
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in FORBIDDEN:
            for match in pattern.finditer(line):
                hits.append((number, what, match.group(0)))
    return hits


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: tags and link targets dropped, lower case, punctuation
    removed, each space a hyphen."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


def explicit_ids(text: str) -> list[str]:
    return EXPLICIT_ID.findall(text)


@cache
def anchors_of(doc: Path) -> frozenset[str]:
    """Every anchor a markdown file offers: its explicit `<a id>`s and its headings' slugs."""
    text = doc.read_text(encoding="utf-8")
    anchors = set(explicit_ids(text))
    seen: Counter[str] = Counter()
    in_fence = False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        match = None if in_fence else HEADING.match(line)
        if match:
            slug = github_slug(match.group(2))
            anchors.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return frozenset(anchors)


def broken_citations(path: Path, text: str) -> list[str]:
    """Each cited markdown file that does not exist, or anchor that it does not offer."""
    targets: list[tuple[Path, str | None, str]] = []
    if path.suffix == ".md":
        for target, anchor in MARKDOWN_LINK.findall(text):
            if target and not target.endswith(".md"):
                continue
            doc = (path.parent / target) if target else path
            targets.append((doc, anchor or None, f"({target}#{anchor})" if anchor else target))
        text = MARKDOWN_LINK.sub("]()", text)  # link targets are relative to the file
    targets += [
        (ROOT / doc, anchor, f"{doc}#{anchor}") for doc, anchor in ROOTED_CITATION.findall(text)
    ]
    broken = []
    for doc, anchor, cited in targets:
        if not doc.is_file():
            broken.append(f"{cited}: no such file")
            continue
        if anchor is not None and anchor not in anchors_of(doc.resolve()):
            broken.append(f"{cited}: no such anchor in {doc.resolve().relative_to(ROOT)}")
    return broken


@pytest.mark.parametrize(
    ("line", "cited"),
    [
        (f"See {OUTSIDE_DOC} §3 for the lease.", "a design document outside the repository"),
        (f"({OUTSIDE_DOC} invariant 10)", "a design document outside the repository"),
        (f"Goals ({ISSUE} {16}): 10 s", "an issue number"),
        (f"see {ISSUE} #{3}", "an issue number"),
        (f"fixed in #{16}", "an issue number"),
        (f"({ISSUE} 15, {DELIVER.title()} 4)", "a deliverable number"),
        (f"Restore ({DELIVER}able 3; current)", "a deliverable number"),
        (f"Reproduction ({WHY.title()} 4): the GPU", "a numbered 'why'"),
        (f"as of {STOP} {20}, measured", "a numbered stop"),
        ("before `i" + "15-speed` merged", "an issue branch"),
    ],
)
def test_a_reference_outside_the_repository_is_found(line: str, cited: str) -> None:
    assert cited in [what for _, what, _ in forbidden_references(line)]


@pytest.mark.parametrize(
    "line",
    [
        f"Start-up of #{1}: 7.0 min",
        '{"pk": {"S": "JOB#' + '1"}}',
        "a colour #" + "123456",
        f"{WHY.title()} {401} for an expired key, not 403",
        f"a {STOP} tries 20 times; {STOP} {5} minutes before the keys expire",
        "the invariants (docs/architecture.md#invariant-4)",
        "https://github.com/aws/aws-appsync-community/issues/386 shows it",
    ],
)
def test_ordinary_text_is_not_a_reference(line: str) -> None:
    assert forbidden_references(line) == []


def test_no_file_cites_what_a_clone_does_not_contain() -> None:
    files = repository_files()
    assert any(p.name == "architecture.md" for p in files)  # the scan saw the tree
    found = [
        f"{path.relative_to(ROOT)}:{number}: {what}: {matched!r}"
        for path in files
        for number, what, matched in forbidden_references(path.read_text(encoding="utf-8"))
    ]
    assert not found, "cite docs/architecture.md#<anchor> or state the reason:\n" + "\n".join(found)


def test_every_cited_doc_and_anchor_exists() -> None:
    broken = [
        f"{path.relative_to(ROOT)}: {problem}"
        for path in repository_files()
        for problem in broken_citations(path, path.read_text(encoding="utf-8"))
    ]
    assert not broken, "\n".join(broken)


def test_a_missing_anchor_is_found() -> None:
    cited = "docs/architecture.md#no-such-anchor, docs/architecture.md#invariant-4, docs/x.md#y"
    assert broken_citations(ROOT / "functions" / "x.py", cited) == [
        "docs/architecture.md#no-such-anchor: no such anchor in docs/architecture.md",
        "docs/x.md#y: no such file",
    ]
    doc = ROOT / "docs" / "architecture.md"
    assert broken_citations(doc, "[a](deploy.md#throttles) [b](#no-such) [c](gone.md)") == [
        "(#no-such): no such anchor in docs/architecture.md",
        "gone.md: no such file",
    ]


def test_github_slugs() -> None:
    assert github_slug("The heartbeat: agent ⇄ API") == "the-heartbeat-agent--api"
    assert github_slug('<a id="x"></a>Supervision: how tether decides a job\'s fate') == (
        "supervision-how-tether-decides-a-jobs-fate"
    )
    assert github_slug("`tether validate JOB.yaml`") == "tether-validate-jobyaml"


def test_explicit_anchors_are_unique_per_doc() -> None:
    for doc in (p for p in repository_files() if p.suffix == ".md"):
        ids = explicit_ids(doc.read_text(encoding="utf-8"))
        repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
        assert not repeated, f"{doc.relative_to(ROOT)} repeats anchors {repeated}"


def test_every_invariant_is_addressable() -> None:
    """Code cites single invariants (`docs/architecture.md#invariant-9`): each of the numbered
    list under "The invariants" carries its own anchor, in order."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split('<a id="invariants"></a>', 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^(\d+)\. ", section, flags=re.MULTILINE)
    ids = re.findall(r'^\d+\. <a id="invariant-(\d+)"></a>', section, flags=re.MULTILINE)
    assert items == ids == [str(n) for n in range(1, 11)]
