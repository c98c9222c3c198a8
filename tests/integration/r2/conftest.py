"""Fixtures for the R2 front's tests: one front per module (`r2_harness.running_r2`), reset per
test (clock back at real time, no refusals recorded)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.r2_harness import R2, running_r2


@pytest.fixture(scope="module")
def r2_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[R2]:
    with running_r2(tmp_path_factory.mktemp("r2")) as running:
        yield running


@pytest.fixture
def r2(r2_server: R2) -> R2:
    r2_server.clock.offset = 0.0
    r2_server.front.refusals.clear()
    return r2_server
