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


UNTRACED = {"POWERTOOLS_TRACE_DISABLED": "true"}
# What Lambda sets that switches Powertools' tracer (and its patching) on.
TRACED = {"AWS_LAMBDA_FUNCTION_NAME": "tether-test", "LAMBDA_TASK_ROOT": str(ROOT)}


def run_probe(probe: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True, text=True, check=True, cwd=ROOT,
        env={"PATH": "", "PYTHONPATH": str(ROOT), "AWS_REGION": "us-east-1", **env},
    )  # fmt: skip
    return result.stdout


def modules_after_import(module: str, env: dict[str, str] = UNTRACED) -> set[str]:
    probe = f"import importlib, json, sys; importlib.import_module({module!r}); " + (
        "print(json.dumps(sorted(sys.modules)))"
    )
    return set(json.loads(run_probe(probe, env)))


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


def test_the_traced_heartbeat_patches_aws_calls_and_no_http_client() -> None:
    loaded = modules_after_import("functions.api.heartbeat", TRACED)
    assert "aws_xray_sdk.ext.botocore.patch" in loaded  # its AWS calls are traced
    assert {"httpx", "sqlite3"} & loaded == set()


def test_an_http_client_the_factory_builds_is_traced() -> None:
    probe = (
        "import functions.api.heartbeat\n"
        "from functions.adapters import factory\n"
        "print(type(factory._http_client('vast')).__module__)"
    )
    assert run_probe(probe, TRACED).strip() == "aws_xray_sdk.ext.httpx.patch"
    assert run_probe(probe, UNTRACED).strip().startswith("httpx")
