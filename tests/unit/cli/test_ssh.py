"""`tether ssh`: the SSH endpoint read from Vast's instance record (the simulator's, through the
real adapter, and recorded ones), the job view's live host, the local shell's command line, and
`tether --version` and `secrets --help` telling the truth."""

from __future__ import annotations

import json
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.paths import ROOT
from tests.unit.local.vast_sim_support import FakeClock, cheapest_offer, client_for, rent_one
from tether_cli import local as local_cli
from tether_cli import ssh
from tether_cli.main import main
from tether_cli.output import CliError
from tether_local import control
from tether_local.vast_sim import VastSimulator
from tether_local.vast_sim.offers import generate_offers

FIXTURES = ROOT / "tests" / "fixtures" / "vast"


def rented(runtype: str) -> tuple[VastSimulator, dict[str, Any]]:
    """A simulator with one instance rented in `runtype`, and the adapter's record of it."""
    sim = VastSimulator(generate_offers(30, 3), seed=3, startup_s=0.0)
    vast = client_for(sim)
    offers = [o for o in sim.offers() if o["disk_space"] >= 20 and o["direct_port_count"] > 0]
    offer = min(offers, key=lambda o: float(o["dph_base"])) if offers else cheapest_offer(sim)
    instance_id = vast.rent(
        int(offer["id"]),
        image="python:3.12-slim",
        disk_gb=20,
        label="tether:job-1:g1",
        env={"TETHER_JOB_ID": "job-1"},
        onstart="echo start",
        runtype=runtype,
    ).instance_id
    return sim, ssh.instance_record(vast, instance_id)


def test_tethers_own_rent_is_reached_through_vasts_proxy_and_warns_of_no_ssh_server() -> None:
    _, record = rented("args")
    endpoint = ssh.ssh_endpoint(record)
    assert endpoint == ssh.SshEndpoint(record["ssh_host"], record["ssh_port"], "proxy")
    assert endpoint.command() == [
        "ssh",
        "-p",
        str(record["ssh_port"]),
        f"root@{record['ssh_host']}",
    ]
    assert ssh.runs_no_ssh_server(record)  # runtype args: Vast runs no sshd in the container


def test_a_direct_ssh_launch_mode_is_reached_on_the_machines_address() -> None:
    _, record = rented("ssh_direc ssh_proxy")
    endpoint = ssh.ssh_endpoint(record)
    host_port = int(record["ports"]["22/tcp"][0]["HostPort"])
    assert endpoint == ssh.SshEndpoint(record["public_ipaddr"], host_port, "direct")
    assert not ssh.runs_no_ssh_server(record)


def test_a_just_created_instance_has_no_endpoint_yet() -> None:
    clock = FakeClock()
    sim = VastSimulator(generate_offers(30, 3), seed=3, startup_s=60.0, created_s=10.0, clock=clock)
    vast = client_for(sim)
    instance_id = rent_one(vast, int(cheapest_offer(sim)["id"]))
    assert ssh.ssh_endpoint(ssh.instance_record(vast, instance_id)) is None
    clock.advance(61)
    assert ssh.ssh_endpoint(ssh.instance_record(vast, instance_id)) is not None


def test_the_jupyter_launch_modes_serve_proxy_ssh_one_port_up() -> None:
    record = {"ssh_host": "ssh5.vast.ai", "ssh_port": 24792, "image_runtype": "jupyter"}
    assert ssh.ssh_endpoint(record) == ssh.SshEndpoint("ssh5.vast.ai", 24793, "proxy")


def test_recorded_records_a_running_one_has_an_endpoint_a_just_created_one_none() -> None:
    running = json.loads((FIXTURES / "instance_show_running.json").read_text())["instances"]
    created = json.loads((FIXTURES / "instance_show_just_created.json").read_text())["instances"]
    assert ssh.ssh_endpoint(running) == ssh.SshEndpoint("ssh4.vast.ai", 45656, "proxy")
    assert ssh.ssh_endpoint(created) is None


@pytest.mark.parametrize(
    ("job", "says"),
    [
        ({"job_id": "j", "state": "FINISHED", "host": None}, "job j has ended (FINISHED)"),
        ({"job_id": "j", "state": "PROVISIONING", "host": None}, "job j has no host yet"),
        (
            {
                "job_id": "j",
                "state": "REPLACING",
                "host": {"generation": 2, "instance_id": 77, "status": "superseded"},
            },
            "job j has no live host: generation 2's instance 77 is superseded",
        ),
    ],
)
def test_a_job_without_a_live_host_says_why(job: dict[str, Any], says: str) -> None:
    with pytest.raises(CliError) as caught:
        ssh.live_host(job)
    assert says in caught.value.message


def test_a_running_generation_is_the_live_host() -> None:
    job = {
        "job_id": "j",
        "state": "RUNNING",
        "host": {"generation": 3, "instance_id": 123, "status": "running"},
    }
    assert ssh.live_host(job) == (123, 3)


def test_the_local_shell_line_runs_in_the_hosts_directory_with_its_environment(
    tmp_path: Path,
) -> None:
    work = tmp_path / "disk with space"
    work.mkdir()
    view = {"cwd": str(work), "env": {"PATH": "/usr/bin:/bin", "ODD": "it's $HOME; `x`"}}
    argv, cwd, env = ssh.local_shell(view)
    line = ssh.local_shell_line(argv, cwd, env)
    shown = subprocess.run(
        ["bash", "-c", line + " -c " + shlex.quote('pwd; printf "%s\\n" "$ODD"; env | wc -l')],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert shown[0] == str(work)
    assert shown[1] == "it's $HOME; `x`"
    assert int(shown[2]) <= 5  # only the host's variables (bash adds PWD, SHLVL, _)


def test_every_chaos_command_is_a_control_action() -> None:
    assert {action for action, _ in local_cli.HOST_ACTIONS.values()} == set(control.HOST_ACTIONS)


def test_version_prints_the_packages_version(capsys: pytest.CaptureFixture[str]) -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"tether {declared}"


def test_secrets_help_names_where_the_keys_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["secrets", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Secrets Manager" not in text
    assert "SSM Parameter Store SecureStrings (/tether/account/vast" in text


def test_no_serving_local_stack_is_said_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TETHER_LOCAL_STATE", str(tmp_path / "none.json"))
    assert main(["local", "kill-host", "job-1"]) == 1
    assert "no local stack is serving" in capsys.readouterr().err
