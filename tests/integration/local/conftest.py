"""The local AWS harness on a tiny CDK stack of its own (sample_stack.py), synthesized once per
source state; `sample` deploys it into each test's fresh LocalAws."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.paths import ROOT
from tether_local.aws.local_aws import Deployed, LocalAws

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def sample_template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The sample stack's template, synthesized once per source state (cached under build/:
    Node takes 5–15 s). Its Lambda asset holds the handlers at the path their Handler strings
    name (tests/integration/local/sample_handlers.py), as a real deploy would."""
    from tests.integration.local.sample_stack import synthesize

    sources = [HERE / "sample_stack.py", HERE / "sample_handlers.py"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources))
    digest.update(importlib.metadata.version("aws-cdk-lib").encode())
    cache = ROOT / "build" / "synth" / f"sample-{digest.hexdigest()[:16]}.json"
    if cache.exists():
        cached: dict[str, Any] = json.loads(cache.read_text())
        return cached
    root = tmp_path_factory.mktemp("sample")
    package = root / "asset" / "tests" / "integration" / "local"
    package.mkdir(parents=True)
    for init in (package.parent.parent, package.parent, package):
        (init / "__init__.py").write_text("")
    shutil.copy(HERE / "sample_handlers.py", package / "sample_handlers.py")
    template = synthesize(root / "asset", root / "cdk.out")
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(f".{os.getpid()}.tmp")  # xdist workers may race: rename wins
    partial.write_text(json.dumps(template))
    partial.replace(cache)
    return template


@pytest.fixture
def sample(local_aws: LocalAws, sample_template: dict[str, Any]) -> Deployed:
    return local_aws.deploy(sample_template, stack_name="Sample")
