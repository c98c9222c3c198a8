"""The README's "Without AWS" commands, as written, on a machine with no AWS account: an empty
HOME and no AWS_* variable, against a `tether local up` this test starts (and stops: Ctrl-C,
every host and server with it).

The commands are parsed out of README.md, so the test breaks when the README drifts. Two
things differ from a person at a terminal, both about isolation, not about the commands: the
stack listens on a free port (`--port 0`, found through `TETHER_LOCAL_STATE`) rather than the
default 8787, and `<job id>` is the id the `submit` before it printed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cli.local_up import local_up
from tests.e2e.processes import live_processes
from tests.paths import ROOT

pytestmark = pytest.mark.slow

SECTION = "### Without AWS"
LOCAL_UP = "tether local up &"
SUBMITTED = re.compile(r"^submitted: (\S+) \(", re.MULTILINE)


def readme_commands() -> list[str]:
    """The `$ ` lines of the first console block under the README's "Without AWS" heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    block = section[section.index("```console\n") + len("```console\n") :]
    block = block[: block.index("```")]
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


def test_the_readme_parse_finds_the_local_path() -> None:
    commands = readme_commands()
    assert commands[0] == LOCAL_UP
    assert "tether submit examples/qlora-7b/job.yaml --local --env QLORA_TINY=1" in commands
    assert all(" --local" in command for command in commands[1:])


def bare_environment(tmp_path: Path) -> dict[str, str]:
    """A new user's shell: `tether` on PATH, an empty HOME, no AWS_* variable at all."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # `tether` on PATH, as `pip install .` puts it; run from the clone's root, `python -m`
    # imports this checkout.
    tether = bin_dir / "tether"
    tether.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tether_cli.main "$@"\n')
    tether.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    return {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TETHER_LOCAL_STATE": str(tmp_path / "local-stack.json"),
    }


def test_the_readme_local_commands_run_as_written_without_aws(tmp_path: Path) -> None:
    commands = readme_commands()
    assert commands[0] == LOCAL_UP  # started below, on a free port
    env = bare_environment(tmp_path)
    assert not [key for key in env if key.startswith("AWS_")]
    job_id = ""
    stderr_file = tmp_path / "local-up.stderr"
    with local_up(["tether"], tmp_path / "root", env, stderr_file, stop_timeout_s=120) as stack:
        terminal = stack.terminal
        terminal.wait_for("serving", timeout_s=240)
        for command in commands[1:]:
            if "<job id>" in command:
                assert job_id, f"{command!r} needs a job submitted before it"
                command = command.replace("<job id>", job_id)
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            assert done.returncode == 0, f"$ {command}\n{done.stdout}\n{done.stderr}"
            assert "Traceback" not in done.stderr, done.stderr
            submitted = SUBMITTED.search(done.stdout)
            if submitted:
                job_id = submitted.group(1)
                assert f"tether status {job_id} --local" in done.stdout  # the next: hint
        # The last submit was the QLoRA example in its tiny mode, its secret stored locally.
        assert job_id.startswith("qlora-7b-")
        shown = subprocess.run(
            ["tether", "status", job_id, "--local", "--json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        spec = json.loads(shown.stdout)["spec"]
        assert spec["env"]["QLORA_TINY"] == "1" and spec["secrets"] == ["HF_TOKEN"]
    assert stack.process.returncode == 0, stack.stderr
    terminal.wait_for("stopped", timeout_s=10)
    assert not Path(env["TETHER_LOCAL_STATE"]).exists()
    assert not live_processes(str(tmp_path / "root"))  # no host left behind
