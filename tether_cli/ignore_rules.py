""".gitignore rules (and `.tetherignore`, the same syntax) for `tether submit`'s packing. Pure.

Each file's patterns are matched by `pathspec`'s `GitIgnoreSpec`, the implementation git-style
tools share (blank lines, `#` comments, escapes, `!` re-includes, `dir/` for directories only,
anchoring by a leading or middle `/`, `*`, `?`, `[...]`, `**`). What git adds across files is
done here: every directory's `.gitignore` then `.tetherignore` apply below it, deeper files after
higher ones, the last matching pattern deciding. As in git, nothing inside an ignored directory
can be re-included (the packer does not descend into it).
"""

from __future__ import annotations

from dataclasses import dataclass

from pathspec import GitIgnoreSpec

IGNORE_FILES = (".gitignore", ".tetherignore")


@dataclass(frozen=True)
class Rule:
    """The patterns of one ignore file."""

    base: str  # the directory of the file it came from, relative to the root ("" = the root)
    spec: GitIgnoreSpec


def parse_rules(text: str, base: str = "") -> list[Rule]:
    """The rules of one ignore file found in the directory `base` (relative, posix)."""
    return [Rule(base, GitIgnoreSpec.from_lines(text.splitlines()))]


def ignored(rules: list[Rule], path: str, is_dir: bool) -> bool:
    """Whether `path` (relative to the root, posix) is ignored by `rules` (in file order)."""
    verdict = False
    for rule in rules:
        if rule.base:
            if not path.startswith(rule.base + "/"):
                continue
            relative = path[len(rule.base) + 1 :]
        else:
            relative = path
        # pathspec tells a directory by its trailing slash (for `dir/` patterns).
        match = rule.spec.check_file(relative + "/" if is_dir else relative).include
        if match is not None:
            verdict = match
    return verdict
