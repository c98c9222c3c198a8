"""Session-wide safety: fake AWS credentials so nothing in the tests can reach real AWS."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.paths import SHARED

for key, value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
}.items():
    os.environ[key] = value
os.environ.pop("AWS_PROFILE", None)
os.environ.pop("VAST_API_KEY", None)


@pytest.fixture(scope="session")
def shared_vast_offers() -> Path:
    """The real Vast records in ../shared, or skip when this checkout has no shared/ beside it."""
    path = SHARED / "fixtures" / "vast" / "offers.json"
    if not path.exists():
        pytest.skip("../shared/fixtures/vast is not present")
    return path
