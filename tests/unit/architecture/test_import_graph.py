"""The import graph points one way: CLI → local stack → infra → functions
(docs/architecture.md#layers).

Every `import` and `from … import` in the source tree (lazy ones inside functions too) is read
with `ast`, so an arrow that points up or across fails here rather than in a user's install.
The agent is its own distribution: it imports nothing of the rest, and only the local stack
(which runs real hosts) may import it.

Inside the local stack each wing is its own layer: the stand-ins for AWS, R2 and Vast know
nothing of tether (local AWS runs any template) nor of each other; the hosts start when the Vast
simulator rents; `http` serves over local AWS; `stack` composes the wings; the demo drives a
stack. A module of `tether_local` outside every wing fails here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import ROOT

# Which first-party modules each layer may import (besides itself).
LAYERS: dict[str, set[str]] = {
    "tether_agent": set(),
    "functions": set(),  # the package itself (an empty __init__)
    "functions.domain": set(),
    "functions.settings": {"functions.domain"},
    "functions.observability": {"functions.settings"},
    "functions.adapters": {"functions.domain", "functions.settings", "functions.observability"},
    "functions.api": {
        "functions.domain",
        "functions.adapters",
        "functions.settings",
        "functions.observability",
    },
    "functions.monitor": {
        "functions.domain",
        "functions.adapters",
        "functions.settings",
        "functions.observability",
    },
    "functions.lifecycle": {
        "functions.domain",
        "functions.adapters",
        "functions.settings",
        "functions.observability",
    },
    "infra": {"functions"},
    "tether_local": set(),  # the package itself (a docstring); every module sits in a wing
    "tether_local.aws": set(),
    "tether_local.r2": set(),
    "tether_local.vast_sim": set(),
    "tether_local.hosts": {"tether_local.vast_sim", "infra", "functions"},
    "tether_local.http": {"tether_local.aws"},
    "tether_local.stack": {
        "tether_local.aws",
        "tether_local.r2",
        "tether_local.vast_sim",
        "tether_local.hosts",
        "tether_local.http",
        "infra",
        "functions",
    },
    "tether_local.control": {
        "tether_local.stack",
        "tether_local.hosts",
        "tether_local.http",
        "functions",
    },
    "tether_local.demo": {
        "tether_local.stack",
        "tether_local.hosts",
        "tether_local.http",
        "infra",
        "functions",
        "tether_agent",
    },
    "tether_cli": {"tether_local", "infra", "functions"},
}
SOURCES = {
    "tether_agent": ROOT / "agent" / "tether_agent",
    "functions": ROOT / "functions",
    "infra": ROOT / "infra",
    "tether_local": ROOT / "tether_local",
    "tether_cli": ROOT / "tether_cli",
}
FIRST_PARTY = set(SOURCES)


def module_name(path: Path) -> str:
    for package, base in SOURCES.items():
        if path.is_relative_to(base):
            parts = path.relative_to(base).with_suffix("").parts
            return ".".join((package, *parts)).removesuffix(".__init__")
    raise AssertionError(path)


def layer_of(module: str) -> str:
    """The longest LAYERS key that is `module` or a package above it."""
    candidates = [key for key in LAYERS if module == key or module.startswith(key + ".")]
    assert candidates, f"{module} belongs to no layer: add it to LAYERS"
    return max(candidates, key=len)


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            # `from functions import settings` imports the submodule functions.settings
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def source_files() -> list[Path]:
    return sorted(p for base in SOURCES.values() for p in base.rglob("*.py"))


def allowed(importer: str, imported: str) -> bool:
    own = layer_of(importer)
    if imported == own or imported.startswith(own + "."):
        return True
    if imported.split(".")[0] not in FIRST_PARTY:
        return True
    return any(
        imported == target or imported.startswith(target + ".") or target.startswith(imported + ".")
        for target in LAYERS[own]
    )


def test_every_source_file_belongs_to_a_layer() -> None:
    for path in source_files():
        module = module_name(path)
        layer = layer_of(module)
        assert layer != "tether_local" or module == "tether_local", (
            f"{module} belongs to no wing of tether_local: add it to LAYERS"
        )


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path: Path) -> None:
    importer = module_name(path)
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {imported}"
        for line, imported in imported_modules(path)
        if not allowed(importer, imported)
    ]
    assert not wrong, "arrows pointing up or across:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    ("importer", "imported", "ok"),
    [
        ("tether_cli.main", "tether_local.demo", True),
        ("tether_local.stack", "tether_cli.api_client", False),
        ("infra.stack", "tether_local.aws.local_aws", False),
        ("tether_local.aws.local_aws", "functions.settings", False),
        ("tether_local.vast_sim.state", "tether_local.hosts.local_hosts", False),
        ("tether_local.hosts.local_hosts", "tether_local.vast_sim", True),
        ("tether_local.stack", "tether_local.demo.run", False),
        ("tether_local.demo.run", "tether_local.stack", True),
        ("functions.lifecycle.service", "functions.api.heartbeat_service", False),
        ("functions.domain.job", "functions.adapters.store", False),
        ("functions.api.jobs", "functions.domain.job", True),
        ("tether_agent.main", "functions.domain.heartbeat_contract", False),
        ("functions.api.jobs", "functions", True),  # `from functions import settings`
    ],
)
def test_the_rule_itself(importer: str, imported: str, ok: bool) -> None:
    assert allowed(importer, imported) is ok


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected set of more than one module (Tarjan's), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                cycles.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def test_no_module_of_the_functions_imports_itself_back() -> None:
    """Within a layer too, arrows point one way: two modules that import each other (even one
    side only for type checking) are one module in two files, or a piece in the wrong one."""
    files = [p for p in source_files() if p.is_relative_to(SOURCES["functions"])]
    modules = {module_name(p) for p in files}
    graph = {
        module_name(p): {m for _, m in imported_modules(p) if m in modules} - {module_name(p)}
        for p in files
    }
    assert import_cycles(graph) == []


@pytest.mark.parametrize(
    ("graph", "cycles"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_the_cycle_finder_itself(graph: dict[str, set[str]], cycles: list[list[str]]) -> None:
    assert import_cycles(graph) == cycles
