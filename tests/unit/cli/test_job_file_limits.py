"""`tether validate` on pathological job files: each is refused with exit 2 and one line that
names the file and the limit, never "unexpected …" with exit 1 (docs/architecture.md#bounded-input).

The limits (`functions/domain/documents.py`): 1 MiB, 32 levels, 10,000 values with aliases
counted as what they repeat. The values below are written out, not read from the constants."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.paths import ROOT
from tether_cli.main import main

TINY = (ROOT / "examples" / "tiny-cpu" / "job.yaml").read_text()


def laughs(levels: int = 9) -> str:
    """Nine aliases of nine aliases …: a few hundred bytes, 9**levels strings once expanded."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for n in range(1, levels):
        lines.append(f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


CASES = {
    # the reproduction: a list nested 2,000 deep (RecursionError, exit 1, before)
    "nested-2000": TINY + "env:\n  A: " + "[" * 2000 + "]" * 2000 + "\n",
    "mapping-nested-2000": TINY + "x: " + "{a: " * 2000 + "1" + "}" * 2000 + "\n",
    "nested-33": TINY + "env:\n  A: " + "[" * 33 + "]" * 33 + "\n",
    "billion-laughs": TINY + laughs(),
    "billion-laughs-in-env": TINY.replace("budget_usd: 1", "budget_usd: 1\nenv: *l8") + laughs(),
    "alias-cycle": TINY + "env: &e {A: *e}\n",
    # an alias whose target is 20 deep, used 16 deep: 36 levels once expanded
    "deep-through-an-alias": TINY
    + "x: &a "
    + "[" * 20
    + "1"
    + "]" * 20
    + "\ny: "
    + "[" * 16
    + "*a"
    + "]" * 16
    + "\n",
    "integer-of-5000-digits": TINY.replace("budget_usd: 1", "budget_usd: " + "1" * 5000),
    "over-a-mebibyte": TINY + "# " + "x" * (1024 * 1024) + "\n",
}
REASONS = {
    "nested-2000": "nested deeper than 32 levels",
    "mapping-nested-2000": "nested deeper than 32 levels",
    "nested-33": "nested deeper than 32 levels",
    "billion-laughs": "more than 10000 values",
    "billion-laughs-in-env": "more than 10000 values",
    "alias-cycle": "refers to itself",
    "deep-through-an-alias": "nested deeper than 32 levels",
    "integer-of-5000-digits": "cannot be read",
    "over-a-mebibyte": "larger than 1024 KiB",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_pathological_job_file_is_refused_with_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(CASES[name])
    started = time.monotonic()
    code = main(["validate", str(path)])
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    assert "unexpected" not in err and "Traceback" not in err
    line = err.strip()
    assert len(line.splitlines()) == 1, err
    assert str(path) in line and REASONS[name] in line, line
    assert elapsed < 30  # a generous bound on "does not expand 10**8 nodes", not a speed test


def test_32_levels_are_still_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The limit is 32: a value 31 levels inside the top mapping is read (and then refused
    by the spec's own rules, not by the loader)."""
    path = tmp_path / "deep-31.yaml"
    path.write_text(TINY + "env:\n  A: " + "[" * 30 + "]" * 30 + "\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "env.A: must be a string" in err and "nested deeper" not in err


def test_aliases_within_the_limits_are_fine(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text(
        TINY.replace("budget_usd: 1", "budget_usd: &b 1\nexpected_hours: *b").replace(
            "expected_hours: 0.5\n", ""
        )
    )
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("literal", "field"),
    [(".inf", "budget_usd"), ("-.inf", "expected_hours"), (".nan", "budget_usd")],
)
def test_non_finite_numbers_name_their_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, literal: str, field: str
) -> None:
    path = tmp_path / "inf.yaml"
    text = TINY.replace("budget_usd: 1", "budget_usd: 1\n").replace(
        f"{field}: ", f"{field}: {literal} #"
    )
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{field}: must be a finite number" in err, err
