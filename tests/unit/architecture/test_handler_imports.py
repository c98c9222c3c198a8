"""A handler's cold start imports what its path needs: the heartbeat (the function a flood of new
environments hits) loads no provider adapter and no HTTP client of its own
(`functions/adapters/factory.py` imports each adapter when it first builds one), none of the
monitor's decisions, and no YAML parser (only the CLI reads job files)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.paths import ROOT

# Adapters only the monitor, the lifecycle and the jobs API use.
PROVIDER_ADAPTERS = {
    "functions.adapters.vast",
    "functions.adapters.cloudflare",
    "functions.adapters.artifacts",
    "functions.adapters.code_bucket",
    "functions.adapters.notify",
    "functions.adapters.r2",
    "functions.adapters.transitions",
}


def modules_after_import(module: str) -> set[str]:
    """What importing `module` loads, as the stack deploys the heartbeat: untraced (its tracer
    patches nothing: `infra.names.UNTRACED_HANDLERS`)."""
    probe = f"import importlib, json, sys; importlib.import_module({module!r}); " + (
        "print(json.dumps(sorted(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True, text=True, check=True, cwd=ROOT,
        env={"PATH": "", "PYTHONPATH": str(ROOT), "AWS_REGION": "us-east-1",
             "POWERTOOLS_TRACE_DISABLED": "true"},
    )  # fmt: skip
    return set(json.loads(result.stdout))


# The monitor's judgement (reconcile, moves, the rent plan) and the job-file parser: a heartbeat
# needs the records they share (`functions/domain/supervision_facts.py`), not them.
NOT_ON_THE_HEARTBEATS_PATH = {
    "functions.domain.reconcile",
    "functions.domain.move",
    "functions.domain.rent",
    "yaml",
}


def test_the_heartbeat_imports_no_provider_adapter() -> None:
    loaded = modules_after_import("functions.api.heartbeat")
    assert loaded & PROVIDER_ADAPTERS == set()
    assert loaded & NOT_ON_THE_HEARTBEATS_PATH == set()
