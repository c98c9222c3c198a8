"""Integration tier: moto in process (LocalAws) running synthesized templates.

`sample_template` is a tiny CDK stack (sample_stack.py), synthesized once per session;
`local_aws` is a fresh LocalAws per test (server start and reset take a fraction of a second, so
tests never share DynamoDB items or executions); `tether_template` is the real stack.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.local.aws import Deployed, LocalAws

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# Wait and Retry intervals run at 1/10 000: a 3600 s Wait takes 0.36 s.
TIME_SCALE = 1e-4


@pytest.fixture(scope="session")
def sample_template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The sample stack's template, synthesized once per source state (cached under build/:
    Node takes 5–15 s). Its Lambda asset holds the handlers at the path their Handler strings
    name (tests/integration/sample_handlers.py), as a real deploy would."""
    from tests.integration.sample_stack import synthesize

    sources = [HERE / "sample_stack.py", HERE / "sample_handlers.py"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources))
    digest.update(importlib.metadata.version("aws-cdk-lib").encode())
    cache = ROOT / "build" / "synth" / f"sample-{digest.hexdigest()[:16]}.json"
    if cache.exists():
        cached: dict[str, Any] = json.loads(cache.read_text())
        return cached
    root = tmp_path_factory.mktemp("sample")
    package = root / "asset" / "tests" / "integration"
    package.mkdir(parents=True)
    for init in (package.parent / "__init__.py", package / "__init__.py"):
        init.write_text("")
    shutil.copy(HERE / "sample_handlers.py", package / "sample_handlers.py")
    template = synthesize(root / "asset", root / "cdk.out")
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(f".{os.getpid()}.tmp")  # xdist workers may race: rename wins
    partial.write_text(json.dumps(template))
    partial.replace(cache)
    return template


@pytest.fixture(scope="session")
def tether_template() -> dict[str, Any]:
    """The real tether stack, synthesized without bundling (cached by source hash)."""
    from infra.synth import synth_template

    return synth_template(bundle=False)


@pytest.fixture
def local_aws() -> Iterator[LocalAws]:
    with LocalAws(time_scale=TIME_SCALE) as aws:
        yield aws


@pytest.fixture
def sample(local_aws: LocalAws, sample_template: dict[str, Any]) -> Deployed:
    return local_aws.deploy(sample_template, stack_name="Sample")
