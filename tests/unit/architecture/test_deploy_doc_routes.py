"""docs/deploy.md names every route the API declares, in the table of what gets deployed and in
the throttles table: both are read here and compared with the routes the stack declares
(`infra/names.py`, which `infra/constructs/api.py` adds) and the routes the handlers serve
(`@app.get` / `@app.post` in `functions/api/`), so a new route cannot go undocumented."""

from __future__ import annotations

import ast
import re

from infra import names
from tests.paths import ROOT

DOC = ROOT / "docs" / "deploy.md"
ROUTE = re.compile(r"`(GET|POST|PUT|DELETE|PATCH) (/[^`\s]*)`")


def stack_routes() -> set[str]:
    declared = (*names.USER_ROUTES, names.LOGS_ROUTE, names.FILES_ROUTE, names.HEARTBEAT_ROUTE)
    return {f"{method} {path}" for method, path in declared}


def handler_routes() -> set[str]:
    """`METHOD /path` of every route decorator in functions/api, `<job_id>` written `{id}` as
    API Gateway's route keys write it."""
    found: set[str] = set()
    for path in sorted((ROOT / "functions" / "api").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and isinstance(decorator.func, ast.Attribute)
                    and decorator.func.attr in ("get", "post", "put", "delete", "patch")
                    and decorator.args
                    and isinstance(decorator.args[0], ast.Constant)
                ):
                    route = re.sub(r"<[^>]+>", "{id}", str(decorator.args[0].value))
                    found.add(f"{decorator.func.attr.upper()} {route}")
    return found


def table_rows(heading: str) -> list[str]:
    """The table lines of the section under `## heading`."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"## {heading}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return [line for line in lines[start:end] if line.startswith("|")]


def routes_in(lines: list[str]) -> set[str]:
    return {f"{m} {p}" for line in lines for m, p in ROUTE.findall(line)}


def test_the_handlers_serve_exactly_the_routes_the_stack_declares() -> None:
    assert handler_routes() == stack_routes()


def test_the_api_row_of_what_gets_deployed_lists_every_route() -> None:
    api_row = [row for row in table_rows("What gets deployed") if row.startswith("| `Api` |")]
    assert len(api_row) == 1
    assert routes_in(api_row) == stack_routes()


def test_the_throttles_table_gives_every_route_a_bucket() -> None:
    assert routes_in(table_rows("Throttles")) == stack_routes()


def test_the_route_pattern_reads_a_row_as_written() -> None:
    row = "| x | `POST /jobs`, `GET /jobs/{id}/files` and `$default` | 10 |"
    assert routes_in([row]) == {"POST /jobs", "GET /jobs/{id}/files"}
