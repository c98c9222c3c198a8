"""Local hosts behind the Vast simulator, driven through Vast's own API: a destroy deletes the
disk whoever sends it, a stop keeps it, and an image the local stack cannot stand in for fails
the start as a failed pull (no process, the instance never `running`, the reason in status_msg).
No AWS here: the agent of these hosts has no job settings and exits at once, which is enough
for what the machine does with its disk and its image."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tether_local.hosts import disk_view
from tether_local.hosts.images import stand_in
from tether_local.hosts.local_hosts import SYSTEM_PATH, LocalHost, LocalHosts, describe_marked
from tether_local.vast_sim import VastSimulator

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 60.0) -> T:
    deadline = time.monotonic() + timeout_s
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(0.02)
    return value


class Machines:
    """A simulator with local hosts attached, and Vast's API on it as an account holder."""

    def __init__(self, root: Path) -> None:
        self.sim = VastSimulator(startup_s=0, created_s=0, restart_s=0)
        self.hosts = LocalHosts(
            self.sim,
            root=root,
            vast_url="http://127.0.0.1:9",
            stack_id=f"hosts-test-{uuid.uuid4().hex[:8]}",
            stop_grace_s=0.5,
        )
        self.hosts.attach()
        self.api = httpx.Client(
            transport=httpx.MockTransport(self.sim.handle),
            base_url="http://vast.sim",
            headers={"Authorization": f"Bearer {self.sim.api_key}"},
        )

    def rent(self, image: str) -> LocalHost:
        offer = min(self.sim.offers(), key=lambda o: float(o["dph_base"]))
        reply = self.api.put(
            f"/api/v0/asks/{offer['id']}/",
            json={"image": image, "disk": 10, "label": "tether:hosts-test:g1", "env": {}},
        )
        assert reply.status_code == 200, reply.text
        return self.hosts.get(int(reply.json()["new_contract"]))

    def booted(self, host: LocalHost) -> LocalHost:
        wait_for(f"host {host.instance_id} to boot", lambda: host.starts > 0)
        return host

    def record(self, host: LocalHost) -> dict[str, Any]:
        reply = self.api.get(f"/api/v0/instances/{host.instance_id}/")
        assert reply.status_code == 200, reply.text
        record: dict[str, Any] = reply.json()["instances"]
        return record

    def set_state(self, host: LocalHost, state: str) -> None:
        reply = self.api.put(f"/api/v0/instances/{host.instance_id}/", json={"state": state})
        assert reply.status_code == 200, reply.text

    def destroy(self, host: LocalHost) -> None:
        reply = self.api.delete(f"/api/v0/instances/{host.instance_id}/")
        assert reply.status_code == 200, reply.text


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[Machines]:
    local = Machines(tmp_path / "hosts")
    try:
        yield local
    finally:
        local.hosts.close()
        local.api.close()
    assert local.hosts.processes() == []


def _write_output(host: LocalHost) -> Path:
    """What a job writes outside its checkpoints (the agent uploads nothing of it)."""
    output = host.disk / "workspace" / "outputs" / "result.txt"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("hours of work\n")
    return output


def test_a_destroy_through_the_api_deletes_the_disk(machines: Machines) -> None:
    host = machines.booted(machines.rent("python:3.12-slim"))
    output = _write_output(host)

    machines.destroy(host)  # what the lifecycle, a cancel or the orphan sweep sends

    assert host.state == "destroyed"
    assert not output.exists()
    assert not host.disk.exists()
    assert describe_marked(host.marker) == []
    assert host.log_file.exists()  # the harness's console record is not on the disk


def test_a_stop_keeps_the_disk_and_a_restart_finds_it(machines: Machines) -> None:
    host = machines.booted(machines.rent("python:3.12-slim"))
    output = _write_output(host)

    machines.set_state(host, "stopped")  # what the agent's dead-man switch sends
    assert host.state == "stopped"
    assert machines.record(host)["actual_status"] == "stopped"
    assert output.read_text() == "hours of work\n"

    machines.set_state(host, "running")
    wait_for("the restarted host", lambda: host.starts == 2)
    assert output.read_text() == "hours of work\n"


def test_the_chaos_destroy_deletes_the_disk_too(machines: Machines) -> None:
    host = machines.booted(machines.rent("python:3.12-slim"))
    output = _write_output(host)
    machines.hosts.destroy(host.instance_id)
    assert not output.exists()
    assert machines.record(host)["actual_status"] == "offline"


def test_an_image_with_no_stand_in_fails_the_start_like_a_failed_pull(
    machines: Machines,
) -> None:
    image = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
    host = machines.rent(image)

    record = machines.record(host)  # startup_s=0: a pulled image would be running by now
    assert record["actual_status"] == "loading"
    message = record["status_msg"]
    assert image in message and "cannot be pulled" in message
    assert "python:3.N" in message  # the known ones
    assert host.state == "pull_failed" and host.starts == 0
    assert describe_marked(host.marker) == []
    assert image in host.log_text()

    machines.set_state(host, "stopped")  # a restart pulls again, and fails again
    machines.set_state(host, "running")
    assert machines.record(host)["actual_status"] == "loading"
    assert host.starts == 0
    machines.destroy(host)
    assert machines.sim.instance(host.instance_id) is None


def test_the_agent_runs_from_its_venv_with_the_images_path(machines: Machines) -> None:
    host = machines.booted(machines.rent("python:3.12-slim"))
    env = machines.hosts.process_env(host)
    image = stand_in("python:3.12-slim")
    assert env["PATH"] == f"{image.bin}:{SYSTEM_PATH}"
    assert "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env
    assert host.process is not None and isinstance(host.process.args, list)
    [agent] = [Path(a) for a in map(str, host.process.args) if Path(a).name == "tether-agent"]
    assert agent.is_absolute()
    assert not agent.is_relative_to(image.root)


@pytest.mark.skipif(not disk_view.available(), reason="no unprivileged mount namespaces here")
def test_every_host_sees_its_own_disk_at_the_same_paths(machines: Machines) -> None:
    """As every container sees its disk at /workspace: what a script records about its paths
    is the same on every host, and each still writes only to its own disk."""
    hosts = [machines.booted(machines.rent("python:3.12-slim")) for _ in range(2)]
    envs = [machines.hosts.process_env(h) for h in hosts]
    assert envs[0]["HOME"] == envs[1]["HOME"] == str(disk_view.SEEN_ROOT)
    assert envs[0]["TETHER_PATH_ROOT"] == envs[1]["TETHER_PATH_ROOT"] == str(disk_view.SEEN_ROOT)
    assert hosts[0].disk != hosts[1].disk
    for host in hosts:
        write = f"pwd > where && echo {host.instance_id} > {disk_view.SEEN_ROOT}/whoami"
        subprocess.run(disk_view.command_seeing(["sh", "-c", write], host.disk), check=True)
    for host in hosts:
        assert (host.disk / "whoami").read_text() == f"{host.instance_id}\n"
        assert (host.disk / "where").read_text() == f"{disk_view.SEEN_ROOT}\n"
    assert list(disk_view.SEEN_ROOT.iterdir()) == []  # the seen root itself holds nothing
