"""`make mutate`: mutation testing of the pure rules, with mutmut, outside CI.

Two runs, each in its own staging folder under `build/mutate/` so the checkout stays clean and
mutmut's module names match the imported ones:

- `domain`: `functions/domain/` against `tests/unit/domain`;
- `agent`: the agent's checkpoint and restore rules (`tether_agent/checkpoints.py`, `restore.py`)
  against `tests/unit/agent` (the agent's package sits at the staging root, so the mutants are
  imported as `tether_agent.*`, as the tests import them).

A surviving mutant is a rule that no test pins down. The run prints each survivor and the score
(killed ÷ mutants that a test reached). It takes tens of minutes on two cores; `--only domain` or
`--only agent` runs one. The score is a report, not a gate, but a half that reaches no mutant
measured nothing (its staging lacks a file its tests read, or mutmut failed): that exits 1,
naming the half and its log.

    python -m tests.mutation [--only domain|agent] [--max-children N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.paths import ROOT

STAGING = ROOT / "build" / "mutate"
# Also copied into every staging folder: the tests import their shared helpers and read examples.
SHARED = ("tests", "examples")


@dataclass(frozen=True)
class Target:
    name: str
    sources: dict[str, Path]  # staging name → where it comes from
    mutate: tuple[str, ...]  # globs, relative to the staging root
    tests: tuple[str, ...]
    # Other files the tests read (relative to the checkout), copied to the same place.
    files: tuple[str, ...] = ()


TARGETS = (
    Target(
        name="domain",
        sources={"functions": ROOT / "functions"},
        mutate=("functions/domain/*",),
        tests=("tests/unit/domain",),
    ),
    Target(
        name="agent",
        sources={"tether_agent": ROOT / "agent" / "tether_agent"},
        mutate=("tether_agent/checkpoints.py", "tether_agent/restore.py"),
        tests=("tests/unit/agent",),
        files=("agent/README.md",),  # tests/unit/agent/test_training_env.py reads its table
    ),
)


def _toml_list(values: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def stage(target: Target) -> Path:
    root = STAGING / target.name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name, source in target.sources.items():
        shutil.copytree(source, root / name, ignore=ignore)
    for name in SHARED:
        shutil.copytree(ROOT / name, root / name, ignore=ignore)
    for name in target.files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, root / name)
    (root / "pyproject.toml").write_text(
        "[tool.mutmut]\n"
        f"source_paths = {_toml_list(list(target.sources))}\n"
        f"only_mutate = {_toml_list(target.mutate)}\n"
        f"pytest_add_cli_args_test_selection = {_toml_list(target.tests)}\n"
        f"also_copy = {_toml_list([*SHARED, *_top_folders(target.files)])}\n\n"
        "[tool.pytest.ini_options]\n"
        'addopts = "-q -p no:cacheprovider"\n'
        'filterwarnings = ["ignore::DeprecationWarning"]\n'
    )
    return root


def _top_folders(files: tuple[str, ...]) -> list[str]:
    """The staging folders that hold `files`: mutmut copies a file of `also_copy` only into a
    folder that exists, so the folder is named instead (it holds only those files)."""
    return sorted({Path(name).parts[0] for name in files})


def run(target: Target, max_children: int) -> dict[str, int]:
    root = stage(target)
    mutmut = Path(sys.executable).with_name("mutmut")
    print(f"== mutmut over {', '.join(target.mutate)} ({', '.join(target.tests)})", flush=True)
    log = root / "mutmut-run.log"
    with log.open("w") as out:  # mutmut redraws a progress line; keep it out of the terminal
        subprocess.run(
            [str(mutmut), "run", "--max-children", str(max_children)],
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    print(f"   mutmut's log: {log.relative_to(ROOT)}")
    results = subprocess.run(
        [str(mutmut), "results", "--all", "true"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    counts: dict[str, int] = {}
    survivors = []
    for line in results.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if not name:
            continue
        counts[status] = counts.get(status, 0) + 1
        if status == "survived":
            survivors.append(name)
    for name in survivors:
        print(f"   survived: {name}")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__)
    parser.add_argument("--only", choices=[t.name for t in TARGETS])
    parser.add_argument("--max-children", type=int, default=2)
    args = parser.parse_args(argv)
    if shutil.which("mutmut", path=str(Path(sys.executable).parent)) is None:
        print("mutmut is not installed: pip install mutmut (make mutate does)", file=sys.stderr)
        return 2
    unmeasured = []
    for target in TARGETS:
        if args.only and target.name != args.only:
            continue
        counts = run(target, args.max_children)
        killed = counts.get("killed", 0)
        reached = killed + counts.get("survived", 0) + counts.get("timeout", 0)
        score = f"{killed / reached:.1%}" if reached else "n/a"
        print(f"== {target.name}: {score} killed ({killed} of {reached} reached); {counts}")
        if not reached:
            unmeasured.append(target.name)
    for name in unmeasured:
        log = (STAGING / name / "mutmut-run.log").relative_to(ROOT)
        print(
            f"mutate: the {name} half reached no mutant, so it measured nothing: its tests did "
            f"not run against the mutants (read {log})",
            file=sys.stderr,
        )
    return 1 if unmeasured else 0


if __name__ == "__main__":
    raise SystemExit(main())
