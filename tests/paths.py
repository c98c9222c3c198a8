"""Paths the tests share: the repository root, its examples and the optional ../shared beside it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"
SHARED = ROOT.parent / "shared"
