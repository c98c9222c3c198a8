"""An AWS_PROFILE that names no profile: a command that uses AWS says so in one line with the
fix; one that does not (`--version`, `--local`) is not stopped by it; none prints a traceback.
(The X-Ray SDK reads the profile when it is first imported: `tether_cli.main` turns a failure
while the commands load into the same line.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT


@pytest.mark.parametrize(
    ("argv", "code", "said"),
    [
        (["--version"], 0, ""),  # reads no AWS config
        (["jobs", "--local"], 1, "tether: error: no local stack is running at"),  # nor this
        (
            ["jobs"],
            1,
            "tether: error: AWS profile 'no-such-profile' is not in your AWS config: create it "
            "(`aws configure --profile no-such-profile`) or set AWS_PROFILE to one that exists",
        ),
    ],
)
def test_an_unknown_profile_is_one_line_with_the_fix_where_aws_is_used(
    tmp_path: Path, argv: list[str], code: int, said: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path), AWS_PROFILE="no-such-profile")
    done = subprocess.run(
        [sys.executable, "-m", "tether_cli.main", *argv],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().startswith(said)
    assert len(done.stderr.strip().splitlines()) <= 1
