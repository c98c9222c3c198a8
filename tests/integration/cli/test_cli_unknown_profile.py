"""An AWS_PROFILE that names no profile: every command says so in one line, before anything runs.
(The commands' modules load the AWS SDK as the CLI starts, and the X-Ray SDK's sampler reads the
profile then: without the guard in `tether_cli.main`, a 40-frame ProfileNotFound traceback.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT


@pytest.mark.parametrize("argv", [["--version"], ["jobs", "--local"], ["validate", "x.yaml"]])
def test_an_unknown_profile_is_one_line_with_the_fix(tmp_path: Path, argv: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path), AWS_PROFILE="no-such-profile")
    done = subprocess.run(
        [sys.executable, "-m", "tether_cli.main", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "tether: error: AWS profile 'no-such-profile' is not in your AWS config: create it "
        "(`aws configure --profile no-such-profile`) or set AWS_PROFILE to one that exists"
    )
