"""One synthesis per session (cached under build/ by a hash of the sources)."""

from __future__ import annotations

from typing import Any

import pytest

from infra.synth import synth_template


@pytest.fixture(scope="session")
def template() -> dict[str, Any]:
    return synth_template(bundle=False)


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}
