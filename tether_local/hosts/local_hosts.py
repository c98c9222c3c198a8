"""Local "hosts": what renting on the Vast simulator starts on this machine.

A rent (`VastSimulator.on_rent`) becomes, after the simulator's start-up delay, a process group
running the real agent (`tether-agent run`, started by absolute path from its own venv as the
onstart script does) installed from the same wheel the onstart script installs
(`infra.synth.build_agent_wheel`). A host is a little container: every process it starts carries
a marker variable, so stopping or destroying the host kills all of them, the training process too
(the agent puts that in its own process group).

A host is not kinder than a rented machine:
- The image. The training command runs with the job's image, not the agent's venv: `PATH` is the
  image stand-in's `bin` (`tether_local.hosts.images`: `python` has exactly the packages the image
  carries) then `/usr/local/bin:/usr/bin:/bin`. An image with no stand-in fails the start as Vast
  fails an image it cannot pull: the instance stays `loading` with a status message naming the
  image and the known ones (`VastSimulator.fail_pull`), and no process starts.
- The disk. `<root>/<instance id>/disk` is the container's disk: a Vast stop keeps it (a restart
  finds it as it was), a destroy deletes it, whoever destroys (the lifecycle or a user's cancel
  through `DELETE /instances/{id}`, or the chaos `destroy`). Next to it, and not on it, are what
  the harness keeps of the machine: the console log (`host.log`, kept after a destroy for
  diagnosis, as Vast's logs are not) and the fake GPU probe's file.

The environment: `LocalHost.received_env` is exactly what Vast gives the container, the rent's
`env` plus Vast's own variables (`CONTAINER_ID`, `CONTAINER_API_KEY`, ...); tests check it for
account secrets. The process environment adds what the container image and the disk would
provide: absolute paths in `TETHER_CHECKPOINT_DIR`, `TETHER_WORK_DIR`, `TETHER_PROGRESS_FILE`
and `TETHER_OUTPUTS_DIR` are mapped into the host's disk (`/workspace/ckpt` →
`<seen root>/workspace/ckpt`): `TETHER_WORK_DIR` here, the others, which come over the agent's
first heartbeat, by the agent below `TETHER_PATH_ROOT` (the disk); `HOME` is the disk. Every
host sees its own disk at the same seen root where this machine allows mount namespaces
(`tether_local.hosts.disk_view`), as every container sees `/workspace`, so what a script writes
into its checkpoints about its paths is the same on every host;
`PATH` is the image's (above), the GPU is scripted through `<machine>/gpu-probe` (below),
and `TETHER_VAST_URL` points at the simulator when the rent did not set it. Nothing else is
mapped: any other absolute path a job names is this machine's, so job commands should use the
`TETHER_*` paths or paths relative to the disk.

The GPU (`LocalHosts.use_gpu`, chosen when a host is rented). `fake-probe` (the default): the
agent's fake probe reads the file (`TETHER_GPU_PROBE=fake:<file>`). `fake-nvml`: the probe path of
a real host, the agent's own NVML probe (`TETHER_GPU_PROBE=nvml`) importing a fake `pynvml`
(`tether_local.hosts.fake_nvml`) that reads the file (`FAKE_NVML_FILE`); that module sits in the
site-packages of a second agent venv, so no other host can import it.

Chaos: `destroy` (the machine dies: processes killed, disk gone, Vast shows it offline),
`hang_gpu` / `idle_gpu` / `heal_gpu` (the GPU's file: hung, idle, responsive), `freeze` /
`thaw` (SIGSTOP / SIGCONT), `zombie` (a destroyed host comes back and runs its old agent again,
on an empty disk). Cutting heartbeats is the API front's switch (`ApiFront.cut_heartbeats`); API
faults are `VastSimulator.inject`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from functions.domain import agent_env
from tether_local.hosts import disk_view, images
from tether_local.hosts import fake_nvml as fake_nvml_module
from tether_local.hosts.agent_install import agent_venv
from tether_local.vast_sim import SimInstance, VastSimulator

LOG = logging.getLogger(__name__)

HOST_MARKER = "TETHER_LOCAL_HOST"  # on every process of a local host: "<stack id>:<instance id>"
_MAPPED_PATHS = (
    agent_env.CHECKPOINT_DIR,
    agent_env.WORK_DIR,
    agent_env.PROGRESS_FILE,
    agent_env.OUTPUTS_DIR,
)
DEFAULT_WORK_DIR = "/var/lib/tether"
HostState = Literal["booting", "running", "stopped", "destroyed", "pull_failed"]
HostGpu = Literal["fake-probe", "fake-nvml"]  # see the module docstring
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"  # after the image's bin on the host's PATH


# --- processes of a host --------------------------------------------------------------------


def marked_processes(marker: str, *, prefix: bool = False) -> list[int]:
    """PIDs of live processes whose environment has HOST_MARKER=marker (or starts with it)."""
    wanted = f"{HOST_MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            status = (entry / "stat").read_text()
        except OSError:
            continue
        if status.rsplit(")", 1)[-1].split()[0] == "Z":  # already dead, waiting to be reaped
            continue
        for item in environ.split(b"\0"):
            if item == wanted or (prefix and item.startswith(wanted)):
                found.append(int(entry.name))
                break
    return found


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


KILL_WAIT_S = 10.0  # how long SIGKILLed processes may take to go (seconds on a busy machine)
# Empty scans in a row before a kill is done: a process in the middle of an exec reads as
# having no environment for an instant, so one empty scan can miss a child the agent was
# starting as it was killed.
QUIET_SCANS = 3


def _kill_marked(marker: str, *, prefix: bool = False) -> list[str]:
    """SIGKILL every process marked `marker` until none is left: repeated, for processes forked
    while we kill, and bound by time rather than rounds, as a killed process can take a while
    to go on a loaded machine; done after `QUIET_SCANS` empty scans in a row. Returns what
    outlived `KILL_WAIT_S` (pid, state, command)."""
    deadline = time.monotonic() + KILL_WAIT_S
    quiet = 0
    while quiet < QUIET_SCANS:
        pids = marked_processes(marker, prefix=prefix)
        quiet = 0 if pids else quiet + 1
        if pids:
            if time.monotonic() >= deadline:
                return [describe_process(pid) for pid in pids]
            _signal_all(pids, signal.SIGKILL)
        time.sleep(0.02)
    return []


def _kill_group(process: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL the agent's process group (its own session, so its pid is the group's id) while
    the agent lives: that takes a child it forked whose exec is not done, before /proc shows
    the child's environment. Not once it has exited: its pid could be another's by then."""
    if process is not None and process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


def describe_process(pid: int) -> str:
    """A process as a warning or a failed test names it: pid, state and command line."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} [{state}] {command.decode(errors='replace')}"


def describe_marked(marker: str, *, prefix: bool = False) -> list[str]:
    """`marked_processes`, each described (`describe_process`): what a test asserts is empty,
    so that a failure names what was left."""
    return [describe_process(pid) for pid in marked_processes(marker, prefix=prefix)]


@dataclass
class LocalHost:
    """One rented instance's local machine. `received_env`: what Vast gave the container;
    `machine`: its directory, holding the `disk` and what is not on it (log, GPU probe)."""

    instance_id: int
    label: str | None
    image: str
    received_env: dict[str, str]
    machine: Path
    marker: str
    gpu: HostGpu = "fake-probe"
    state: HostState = "booting"
    frozen: bool = False
    starts: int = 0
    stand_in: images.StandIn | None = field(default=None, repr=False)
    pull_error: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def disk(self) -> Path:
        """The container's disk: kept by a stop, deleted by a destroy."""
        return self.machine / "disk"

    @property
    def gpu_probe_file(self) -> Path:
        return self.machine / "gpu-probe"

    @property
    def log_file(self) -> Path:
        """The console (the agent's stdout and stderr): the harness's record, kept after a
        destroy."""
        return self.machine / "host.log"

    @property
    def job_id(self) -> str | None:
        return self.received_env.get(agent_env.JOB_ID)

    @property
    def generation(self) -> int | None:
        value = self.received_env.get(agent_env.GENERATION, "")
        return int(value) if value.isdigit() else None

    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""


class LocalHosts:
    """The hosts behind a `VastSimulator`: `attach()` sets its hooks. Thread-safe."""

    def __init__(
        self,
        sim: VastSimulator,
        *,
        root: Path,
        vast_url: str,
        stack_id: str,
        stop_grace_s: float = 2.0,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.sim = sim
        self.root = root
        self.vast_url = vast_url
        self.stack_id = stack_id
        self.stop_grace_s = stop_grace_s
        self.extra_env = dict(extra_env or {})
        self._venvs: dict[HostGpu, Path] = {}
        self.gpu: HostGpu = "fake-probe"  # what the next rented host gets (`use_gpu`)
        self._hosts: dict[int, LocalHost] = {}
        self._timers: dict[int, threading.Timer] = {}
        self._lock = threading.RLock()
        self._closed = False

    def attach(self) -> None:
        self._venvs["fake-probe"] = agent_venv()
        self.sim.on_rent = self._on_rent
        self.sim.on_start = self._on_start
        self.sim.on_stop = self._on_stop
        self.sim.on_destroy = self._on_destroy

    def use_gpu(self, gpu: HostGpu) -> None:
        """The GPU of hosts rented from now on (their agent venv is built here, not at boot)."""
        if gpu not in self._venvs:
            self._venvs[gpu] = agent_venv(fake_nvml=gpu == "fake-nvml")
        self.gpu = gpu

    # looking

    def get(self, instance_id: int) -> LocalHost:
        with self._lock:
            return self._hosts[instance_id]

    def all(self) -> list[LocalHost]:
        with self._lock:
            return list(self._hosts.values())

    def for_job(self, job_id: str) -> list[LocalHost]:
        return [h for h in self.all() if h.job_id == job_id]

    def received_envs(self) -> dict[int, dict[str, str]]:
        """Every host's environment as Vast gave it, destroyed hosts included."""
        return {h.instance_id: dict(h.received_env) for h in self.all()}

    def processes(self) -> list[int]:
        """PIDs of every live process of this stack's hosts (empty after `close`)."""
        return marked_processes(f"{self.stack_id}:", prefix=True)

    # Vast's hooks (called outside the simulator's lock)

    def _on_rent(self, instance: SimInstance) -> None:
        with self._lock:
            if self._closed:
                return
            host = LocalHost(
                instance_id=instance.id,
                label=instance.label,
                image=instance.image,
                received_env=instance.container_env(),
                machine=self.root / str(instance.id),
                marker=f"{self.stack_id}:{instance.id}",
                gpu=self.gpu,
            )
            host.disk.mkdir(parents=True, exist_ok=True)
            host.gpu_probe_file.write_text("responsive\n")
            self._hosts[instance.id] = host
            if self._image_known(host):
                self._boot_later(host, instance.boot_s)

    def _on_start(self, instance: SimInstance) -> None:
        with self._lock:
            host = self._hosts.get(instance.id)
            if host is None or self._closed or host.state == "destroyed":
                return
            host.state = "booting"
            if self._image_known(host):
                self._boot_later(host, instance.boot_s)

    def _on_stop(self, instance: SimInstance) -> None:
        host = self._hosts.get(instance.id)
        if host is not None:
            self._cancel_boot(host.instance_id)
            with self._lock:  # a boot under way spawns before this, or not at all
                host.state = "stopped"
            self._terminate(host)  # the disk stays, as a stopped instance's storage does

    def _on_destroy(self, instance: SimInstance) -> None:
        host = self._hosts.get(instance.id)
        if host is not None:
            self._end(host)

    def _end(self, host: LocalHost) -> None:
        """Destroyed: every process killed, then the disk deleted. Under the lock, so no boot
        can spawn in between; `state` says "destroyed" only once the disk is gone."""
        self._cancel_boot(host.instance_id)
        with self._lock:
            self._kill(host)
            self._wipe_disk(host)
            host.state = "destroyed"

    # the image

    def _image_known(self, host: LocalHost) -> bool:
        """Fail the start at once for an image with no stand-in (as a failed pull)."""
        try:
            images.recipe_for(host.image)
        except images.UnknownImage as exc:
            self._fail_pull(host, str(exc))
            return False
        return True

    def _fail_pull(self, host: LocalHost, message: str) -> None:
        host.state = "pull_failed"
        host.pull_error = message
        with host.log_file.open("a") as log:
            log.write(f"tether-local: {message}\n")
        LOG.warning("host %s: %s", host.instance_id, message)
        with contextlib.suppress(KeyError):  # destroyed meanwhile
            self.sim.fail_pull(host.instance_id, message)

    # booting

    def _boot_later(self, host: LocalHost, delay_s: float) -> None:
        self._cancel_boot(host.instance_id)
        timer = threading.Timer(max(delay_s, 0.0), self._boot, args=(host,))
        timer.daemon = True
        self._timers[host.instance_id] = timer
        timer.start()

    def _cancel_boot(self, instance_id: int) -> None:
        with self._lock:
            timer = self._timers.pop(instance_id, None)
        if timer is not None:
            timer.cancel()

    def _boot(self, host: LocalHost) -> None:
        with self._lock:
            self._timers.pop(host.instance_id, None)
            if self._closed or host.state != "booting":
                return
        try:  # built once per image and cached: seconds the first time, outside the lock
            stand_in = images.stand_in(host.image)
        except images.ImageError as exc:
            with self._lock:
                if not self._closed and host.state == "booting":
                    self._fail_pull(host, str(exc))
            return
        with self._lock:
            if self._closed or host.state != "booting":
                return
            host.stand_in = stand_in
            self._spawn(host)
            host.state = "running"

    def _spawn(self, host: LocalHost) -> None:
        venv = self._venvs.get(host.gpu)
        assert venv is not None, "attach() first (and use_gpu() for another GPU)"
        env = self.process_env(host)
        host.disk.mkdir(parents=True, exist_ok=True)
        disk_view.on_disk(env[agent_env.WORK_DIR], host.disk).mkdir(parents=True, exist_ok=True)
        log = host.log_file.open("ab")  # the child gets its own copy; closed below
        try:
            host.process = subprocess.Popen(
                disk_view.command_seeing([str(venv / "bin" / "tether-agent"), "run"], host.disk),
                env=env,
                cwd=host.disk,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        host.starts += 1
        LOG.info("host %s: agent started (pid %s)", host.instance_id, host.process.pid)

    def process_env(self, host: LocalHost) -> dict[str, str]:
        """The agent's process environment: `received_env` plus what the image and disk give
        (see the module docstring). The agent passes it on to the training command."""
        assert host.stand_in is not None, "the image's stand-in first (_boot)"
        seen = disk_view.seen_root(host.disk)  # the disk, where the host's processes see it
        env = {
            "PATH": f"{host.stand_in.bin}:{SYSTEM_PATH}",
            "HOME": str(seen),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
            **host.received_env,
            HOST_MARKER: host.marker,
        }
        env.setdefault(agent_env.WORK_DIR, DEFAULT_WORK_DIR)
        env[agent_env.PATH_ROOT] = str(seen)  # the job's paths the heartbeat brings
        for name in _MAPPED_PATHS:
            value = env.get(name)
            if value and value.startswith("/"):
                env[name] = str(seen / value.lstrip("/"))
        if host.gpu == "fake-nvml":
            env[agent_env.GPU_PROBE] = "nvml"
            env[fake_nvml_module.FILE_ENV] = str(host.gpu_probe_file)
        else:
            env[agent_env.GPU_PROBE] = f"fake:{host.gpu_probe_file}"
        env.setdefault(agent_env.VAST_URL, self.vast_url)
        return env

    # stopping

    def _terminate(self, host: LocalHost) -> None:
        """As a container stop: SIGTERM to everything, SIGKILL after the grace."""
        pids = marked_processes(host.marker)
        _signal_all(pids, signal.SIGCONT)  # a frozen process cannot handle SIGTERM
        _signal_all(pids, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s
        while time.monotonic() < deadline and marked_processes(host.marker):
            time.sleep(0.05)
        self._kill(host)

    @staticmethod
    def _wipe_disk(host: LocalHost) -> None:
        """A destroyed instance's storage is gone (its processes are dead by now)."""
        shutil.rmtree(host.disk, ignore_errors=True)
        LOG.info("host %s: disk deleted", host.instance_id)

    def _kill(self, host: LocalHost) -> None:
        _kill_group(host.process)
        if left := _kill_marked(host.marker):
            LOG.warning("host %s: processes outlived SIGKILL: %s", host.instance_id, left)
        if host.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                host.process.wait(timeout=5)
        host.frozen = False

    # chaos

    def destroy(self, instance_id: int, status: Literal["exited", "offline"] = "offline") -> None:
        """The machine dies: every process killed, its disk (and local checkpoints) gone, and
        Vast shows the instance `status` until someone destroys it."""
        self._end(self.get(instance_id))
        with contextlib.suppress(KeyError):  # already destroyed through the API
            self.sim.kill(instance_id, status)

    def zombie(self, instance_id: int) -> LocalHost:
        """A destroyed host comes back: its old agent (old generation, old token) runs again,
        on an empty disk (the destroy deleted it)."""
        host = self.get(instance_id)
        if host.state != "destroyed" or host.stand_in is None:
            raise ValueError(f"host {instance_id} is {host.state}, not destroyed after running")
        host.gpu_probe_file.write_text("responsive\n")
        with self._lock:
            self._spawn(host)
            host.state = "running"
        return host

    def hang_gpu(self, instance_id: int) -> None:
        self.get(instance_id).gpu_probe_file.write_text("hung\n")

    def idle_gpu(self, instance_id: int) -> None:
        self.get(instance_id).gpu_probe_file.write_text("idle\n")

    def heal_gpu(self, instance_id: int) -> None:
        self.get(instance_id).gpu_probe_file.write_text("responsive\n")

    def freeze(self, instance_id: int) -> None:
        host = self.get(instance_id)
        _signal_all(marked_processes(host.marker), signal.SIGSTOP)
        host.frozen = True

    def thaw(self, instance_id: int) -> None:
        host = self.get(instance_id)
        _signal_all(marked_processes(host.marker), signal.SIGCONT)
        host.frozen = False

    # teardown

    def close(self) -> None:
        """Kill every host's processes; no stray process outlives the stack."""
        with self._lock:
            self._closed = True
            timers = list(self._timers.values())
            self._timers.clear()
        for timer in timers:
            timer.cancel()
        for host in self.all():
            self._kill(host)
        if left := _kill_marked(f"{self.stack_id}:", prefix=True):
            LOG.warning("local hosts: processes outlived SIGKILL: %s", left)

    def __iter__(self) -> Iterator[LocalHost]:
        return iter(self.all())


__all__ = ["HOST_MARKER", "HostGpu", "LocalHost", "LocalHosts", "agent_venv", "marked_processes"]
