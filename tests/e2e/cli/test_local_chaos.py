"""The chaos controls and `tether ssh --local` from another terminal, as a person uses them
while `tether local up` serves: a shell on the job's host in the training process's directory
and environment, `tether local kill-host` killing that host (processes, disk) until the control
plane replaces it, freeze and thaw, a clear refusal for a job without a host, and no process
left once the stack stops."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.e2e.cli.local_up import TETHER, local_up
from tests.e2e.conftest import SIGNED, example_code, tiny_spec
from tests.paths import ROOT
from tether_local.hosts import disk_view
from tether_local.hosts.local_hosts import describe_marked

pytestmark = pytest.mark.slow

TRAIN = "python tiny_train.py --steps 6000 --checkpoint-every 100 --step-seconds 0.02"


def tether(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TETHER, *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def host_view(env: dict[str, str], job_id: str) -> dict[str, object]:
    shown = tether(env, "ssh", job_id, "--local", "--json")
    assert shown.returncode == 0, shown.stderr
    view: dict[str, object] = json.loads(shown.stdout)
    return view


def test_ssh_local_and_kill_host_from_another_terminal(tmp_path: Path) -> None:
    root = tmp_path / "root"
    state = tmp_path / "local-stack.json"
    env = {**os.environ, "TETHER_LOCAL_STATE": str(state)}
    stack_id = ""
    with local_up(TETHER, root, env, tmp_path / "stderr.txt") as stack:
        terminal = stack.terminal
        terminal.wait_for("serving", timeout_s=180)
        assert stat.S_IMODE(state.stat().st_mode) == 0o600  # it holds the control token
        api = terminal.wait_for("API: ", 1).split()[1]
        refused = tether(env, "local", "kill-host", "no-such-job")
        assert refused.returncode == 2
        assert "no host was ever rented for job no-such-job" in refused.stderr

        spec = tiny_spec(name="poked", run=TRAIN, code=example_code(api))
        created = httpx.post(f"{api}/jobs", json=spec, headers=SIGNED, timeout=60)
        assert created.status_code == 201, created.text
        job_id = created.json()["job_id"]
        assert job_id in terminal.wait_for("generation 1 training", timeout_s=120)

        # `tether ssh --local --print`: a command line that opens a shell on the host, in the
        # training process's directory, with its environment
        printed = tether(env, "ssh", job_id, "--local", "--print")
        assert printed.returncode == 0, printed.stderr
        line = printed.stdout.strip()
        probe = 'pwd; echo "$TETHER_JOB_ID $TETHER_GENERATION"; echo "$TETHER_CHECKPOINT_DIR"'
        shell = subprocess.run(
            ["bash", "-c", f"{line} -c {shlex.quote(probe)}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.splitlines()
        view = host_view(env, job_id)
        instance_id = int(str(view["instance_id"]))
        disk = root / "hosts" / str(instance_id) / "disk"
        assert view["env_from"] == "the training process"
        # where the job's code runs, on the disk, as the host sees it (`disk_view`)
        seen = disk_view.seen_root(disk)
        assert Path(shell[0]).is_relative_to(seen)
        assert disk_view.on_disk(shell[0], disk).is_dir()
        assert shell[1] == f"{job_id} 1"
        assert Path(shell[2]).is_relative_to(seen)
        marker = dict(view["env"])["TETHER_LOCAL_HOST"]  # type: ignore[call-overload]
        stack_id = str(marker).split(":")[0]

        frozen = tether(env, "local", "freeze", job_id)
        assert frozen.returncode == 0, frozen.stderr
        assert f"host {instance_id} (job {job_id}, generation 1): frozen" in frozen.stdout
        thawed = tether(env, "local", "thaw", job_id, "--json")
        assert json.loads(thawed.stdout)["action"] == "thaw"

        # `tether local kill-host`: the machine dies, and the control plane replaces it
        killed = tether(env, "local", "kill-host", job_id)
        assert killed.returncode == 0, killed.stderr
        assert f"host {instance_id} (job {job_id}, generation 1): killed" in killed.stdout
        assert describe_marked(str(marker)) == []
        assert not disk.exists()
        assert job_id in terminal.wait_for("generation 2 training", timeout_s=180)
        assert int(str(host_view(env, job_id)["generation"])) == 2
    assert stack.process.returncode == 0, stack.stderr
    assert not state.exists()
    if stack_id:
        assert describe_marked(f"{stack_id}:", prefix=True) == []
