"""Integration tier: moto in process (LocalAws) running synthesized templates.

`local_aws` is a fresh LocalAws per test (server start and reset take a fraction of a second, so
tests never share DynamoDB items or executions); `tether_template` is the real stack.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.supervision_harness import Supervised, supervised_stack
from tether_local.aws.local_aws import LocalAws

# Wait and Retry intervals run at 1/10 000: a 3600 s Wait takes 0.36 s.
TIME_SCALE = 1e-4


@pytest.fixture(scope="session")
def tether_template() -> dict[str, Any]:
    """The real tether stack, synthesized without bundling (cached by source hash)."""
    from infra.synth import synth_template

    return synth_template(bundle=False)


@pytest.fixture
def local_aws() -> Iterator[LocalAws]:
    """In process: these tests are about deploying and executing, not the Lambda runtime
    (tests/integration/local/test_lambda_runtime.py runs both runtimes)."""
    with LocalAws(time_scale=TIME_SCALE, runtime="in_process") as aws:
        yield aws


@pytest.fixture(scope="module")
def stack(tether_template: dict[str, Any]) -> Iterator[Supervised]:
    """The real stack deployed once per test module, in process (`supervised_stack`)."""
    yield from supervised_stack(tether_template, TIME_SCALE)


@pytest.fixture
def sup(stack: Supervised) -> Supervised:
    """The module's stack, emptied for this test (`Supervised.fresh`)."""
    stack.fresh()
    return stack
