""".gitignore rules (and `.tetherignore`, the same syntax) for `tether submit`'s packing. Pure.

Supported, as git does it: blank lines and `#` comments; `\\#`, `\\!` and `\\ ` escapes;
trailing spaces dropped; `!pattern` re-includes; `pattern/` matches directories only; a pattern
with a `/` at its start or middle is anchored to its file's directory, otherwise it matches a
name at any depth below it; `*`, `?`, `[...]` never match `/`; `**/x`, `x/**` and `a/**/b`.
Every directory's `.gitignore` then `.tetherignore` apply below it, deeper files after higher
ones, the last matching pattern deciding. As in git, nothing inside an ignored directory can be
re-included (the packer does not descend into it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

IGNORE_FILES = (".gitignore", ".tetherignore")


@dataclass(frozen=True)
class Rule:
    base: str  # the directory of the file it came from, relative to the root ("" = the root)
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool


def parse_rules(text: str, base: str = "") -> list[Rule]:
    """The rules of one ignore file found in the directory `base` (relative, posix)."""
    rules = []
    for raw in text.splitlines():
        line = _strip_trailing_spaces(raw)
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        if negated or line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.lstrip("/")
        body = _translate(line)
        prefix = "" if anchored or line.startswith("**/") else "(?:.*/)?"
        rules.append(Rule(base, re.compile(f"^{prefix}{body}$", re.DOTALL), negated, dir_only))
    return rules


def ignored(rules: list[Rule], path: str, is_dir: bool) -> bool:
    """Whether `path` (relative to the root, posix) is ignored by `rules` (in file order)."""
    verdict = False
    for rule in rules:
        if rule.dir_only and not is_dir:
            continue
        if rule.base:
            if not path.startswith(rule.base + "/"):
                continue
            relative = path[len(rule.base) + 1 :]
        else:
            relative = path
        if rule.regex.match(relative):
            verdict = not rule.negated
    return verdict


def _strip_trailing_spaces(line: str) -> str:
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        return stripped[:-1] + " "
    return stripped


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == n:
            out.append("/.*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "^", "]") else i + 1)
            if end == -1:
                out.append(re.escape("["))
                i += 1
                continue
            inner = pattern[i + 1 : end]
            if inner.startswith("!"):
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = end + 1
        elif pattern[i] == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)
