"""The local stack's control endpoint: its chaos controls and a look at a job's host, over
loopback HTTP, for commands run in another terminal while `tether local up` serves
(`tether local kill-host`, `tether local hang-gpu`, …, `tether ssh --local`).

`StackControl(stack, token).handle` is an httpx handler (`tether_local.http.LoopbackServer`
serves it). Every request carries `Authorization: Bearer <token>`: `tether local up` draws the
token and writes it, with the URL, into its state file (mode 0600), so another user of the
machine cannot kill your hosts. Routes, JSON both ways:

    GET  /jobs/{job_id}/host              the job's newest host, with what a shell on it gets
    POST /jobs/{job_id}/host/{action}     a chaos action on it (`HOST_ACTIONS`)
    POST /vast/outage    {"on": true}     every Vast request answers 502 (false: back)
    POST /vast/faults    {"kind": "rate_limit", "count": 5}   the next matching requests fail

A host's job is the `TETHER_JOB_ID` Vast gave it; "the newest" is the one with the highest
generation. Every action but `zombie` needs a host that is not destroyed (409 otherwise);
`zombie` takes the newest destroyed one. The shell view is the training process's environment
and working directory, read from /proc while one runs (what the job's command sees: its secrets,
the `TETHER_*` paths, the hooks on PYTHONPATH); before it starts or after it ends, the agent's
process environment less the agent's own secrets, in the agent's work dir. Either way it keeps
the host's process marker, so a shell opened with it dies with the host, as an SSH session does.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from functions.domain import agent_env
from tether_local.hosts import disk_view
from tether_local.hosts.local_hosts import LocalHost, LocalHosts, marked_processes
from tether_local.http import ApiFront
from tether_local.stack import LocalStack

_HOST_PATH = re.compile(r"^/jobs/(?P<job>[^/]+)/host(?:/(?P<action>[a-z-]+))?/?$")
_AGENT_SECRET_PREFIXES = (agent_env.AGENT_TOKEN, "TETHER_S3_")  # never in the training env


class ControlError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class HostAction:
    """One chaos action: what it does to the host, and the sentence that says so."""

    run: Callable[[LocalStack, LocalHost, dict[str, Any]], None]
    done: str  # completes "host <id> (job <job>, generation <n>): "
    needs_destroyed: bool = False


def _kill(stack: LocalStack, host: LocalHost, body: dict[str, Any]) -> None:
    status = body.get("status", "offline")
    if status not in ("offline", "exited"):
        raise ControlError(400, "invalid_request", "status must be 'offline' or 'exited'")
    _hosts(stack).destroy(host.instance_id, status)


def _outbid(stack: LocalStack, host: LocalHost, _body: dict[str, Any]) -> None:
    try:
        stack.vast.outbid(host.instance_id)
    except (ValueError, KeyError) as exc:
        raise ControlError(409, "conflict", str(exc)) from None


def _cut(stack: LocalStack, host: LocalHost, _body: dict[str, Any]) -> None:
    _front(stack).cut_heartbeats(_job_of(host), host.generation or 0)


def _restore(stack: LocalStack, host: LocalHost, _body: dict[str, Any]) -> None:
    _front(stack).restore_heartbeats(_job_of(host), host.generation or 0)


def _on_hosts(method: str) -> Callable[[LocalStack, LocalHost, dict[str, Any]], None]:
    def run(stack: LocalStack, host: LocalHost, _body: dict[str, Any]) -> None:
        getattr(_hosts(stack), method)(host.instance_id)

    return run


HOST_ACTIONS: dict[str, HostAction] = {
    "kill": HostAction(
        _kill, "killed: every process gone, its disk deleted, Vast shows it offline"
    ),
    "hang-gpu": HostAction(_on_hosts("hang_gpu"), "its GPU hangs (the probe times out)"),
    "idle-gpu": HostAction(_on_hosts("idle_gpu"), "its GPU reads idle (0 % utilisation)"),
    "heal-gpu": HostAction(_on_hosts("heal_gpu"), "its GPU answers again"),
    "freeze": HostAction(_on_hosts("freeze"), "frozen: every process stopped (SIGSTOP)"),
    "thaw": HostAction(_on_hosts("thaw"), "thawed: every process continues (SIGCONT)"),
    "cut-heartbeats": HostAction(_cut, "its heartbeats are dropped at the API front"),
    "restore-heartbeats": HostAction(_restore, "its heartbeats reach the API again"),
    "outbid": HostAction(_outbid, "outbid: Vast stops it for a higher bid"),
    "zombie": HostAction(
        _on_hosts("zombie"),
        "back from the dead: its old agent runs again on an empty disk",
        needs_destroyed=True,
    ),
}


class StackControl:
    """See the module docstring."""

    def __init__(self, stack: LocalStack, token: str) -> None:
        self.stack = stack
        self._token = token

    def handle(self, request: httpx.Request) -> httpx.Response:
        try:
            self._authorize(request)
            return _reply(200, self._route(request))
        except ControlError as exc:
            return _reply(exc.status, {"error": exc.code, "message": exc.message})

    def _authorize(self, request: httpx.Request) -> None:
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, f"Bearer {self._token}".encode()):
            raise ControlError(401, "unauthorized", "the control token is missing or wrong")

    def _route(self, request: httpx.Request) -> dict[str, Any]:
        method, path = request.method, request.url.path
        body = _body(request) if method == "POST" else {}
        if match := _HOST_PATH.match(path):
            job_id, action = match.group("job"), match.group("action")
            if action is None and method == "GET":
                hosts = _hosts(self.stack)
                return shell_view(newest_host(hosts.for_job(job_id), job_id), hosts)
            if action is not None and method == "POST":
                return self._act(job_id, action, body)
        elif path == "/vast/outage" and method == "POST":
            on = body.get("on")
            if not isinstance(on, bool):
                raise ControlError(400, "invalid_request", 'give {"on": true | false}')
            self.stack.vast.outage(on)
            return {"vast_outage": on}
        elif path == "/vast/faults" and method == "POST":
            kind, count = body.get("kind"), body.get("count", 1)
            if not isinstance(count, int) or isinstance(count, bool):
                raise ControlError(400, "invalid_request", "count must be a whole number")
            try:
                self.stack.vast.inject(kind, count)  # type: ignore[arg-type]  # it checks
            except ValueError as exc:
                raise ControlError(400, "invalid_request", str(exc)) from None
            return {"vast_faults": self.stack.vast.pending_faults()}
        raise ControlError(404, "not_found", f"no such control: {method} {path}")

    def _act(self, job_id: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        action = HOST_ACTIONS.get(name)
        if action is None:
            known = ", ".join(HOST_ACTIONS)
            raise ControlError(404, "not_found", f"no host action {name!r} (known: {known})")
        hosts = _hosts(self.stack).for_job(job_id)
        host = newest_host(hosts, job_id, destroyed=action.needs_destroyed)
        action.run(self.stack, host, body)
        return {
            "job_id": job_id,
            "instance_id": host.instance_id,
            "generation": host.generation,
            "action": name,
            "done": f"host {host.instance_id} (job {job_id}, generation {host.generation}): "
            + action.done,
        }


def newest_host(hosts: list[LocalHost], job_id: str, *, destroyed: bool = False) -> LocalHost:
    """The job's host of the highest generation that is (`destroyed`) or is not destroyed; a
    ControlError saying what there is otherwise."""
    if not hosts:
        raise ControlError(404, "not_found", f"no host was ever rented for job {job_id}")
    wanted = [h for h in hosts if (h.state == "destroyed") == destroyed]
    if not wanted:
        seen = ", ".join(f"{h.instance_id} {h.state}" for h in hosts)
        what = "destroyed host to bring back" if destroyed else "live host"
        raise ControlError(409, "no_host", f"job {job_id} has no {what} (hosts: {seen})")
    return max(wanted, key=lambda h: (h.generation or 0, h.starts))


def shell_view(host: LocalHost, hosts: LocalHosts) -> dict[str, Any]:
    """Where and with what environment a shell on `host` starts (see the module docstring)."""
    if host.state in ("booting", "pull_failed") or host.stand_in is None:
        raise ControlError(
            409, "no_host", f"host {host.instance_id} is {host.state}: no shell on it yet"
        )
    found = _training_process(host)
    if found is not None:
        env, cwd = found
        source = "the training process"
    else:
        env = {
            k: v
            for k, v in hosts.process_env(host).items()
            if not k.startswith(_AGENT_SECRET_PREFIXES)
        }
        work_dir = env.get(agent_env.WORK_DIR) or str(disk_view.seen_root(host.disk))
        on_disk = disk_view.on_disk(work_dir, host.disk).is_dir()
        cwd = work_dir if on_disk else str(disk_view.seen_root(host.disk))
        source = "the agent (no training process runs)"
    agent = host.process.pid if host.process is not None else None
    return {
        "job_id": host.job_id,
        "instance_id": host.instance_id,
        "generation": host.generation,
        "state": host.state,
        "disk": str(host.disk),
        "log_file": str(host.log_file),
        "cwd": cwd,  # as the host's processes see it
        "cwd_on_disk": str(disk_view.on_disk(cwd, host.disk)),  # the same, from this machine
        # how a command gets into the host's view of its disk (`disk_view`)
        "enter": disk_view.entering(agent, cwd) if agent is not None else [],
        "env": env,
        "env_from": source,
    }


def _training_process(host: LocalHost) -> tuple[dict[str, str], str] | None:
    """The environment and working directory of the host's training command (the process of
    the host's marker whose environment has the agent's `TETHER_MARKER`), the oldest first."""
    for pid in sorted(marked_processes(host.marker)):
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
            cwd = str(Path(f"/proc/{pid}/cwd").readlink())
        except OSError:
            continue
        env = dict(
            item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item
        )
        if agent_env.MARKER in env:
            return env, cwd
    return None


def _hosts(stack: LocalStack) -> LocalHosts:
    if stack.hosts is None:
        raise ControlError(503, "unavailable", "the local stack is not started")
    return stack.hosts


def _front(stack: LocalStack) -> ApiFront:
    if stack.front is None:
        raise ControlError(503, "unavailable", "the local stack is not started")
    return stack.front


def _job_of(host: LocalHost) -> str:
    return host.job_id or ""


def _body(request: httpx.Request) -> dict[str, Any]:
    if not request.content:
        return {}
    try:
        body = json.loads(request.content)
    except ValueError:
        raise ControlError(400, "invalid_request", "the body is not JSON") from None
    if not isinstance(body, dict):
        raise ControlError(400, "invalid_request", "the body must be a JSON object")
    return body


def _reply(status: int, body: dict[str, Any]) -> httpx.Response:
    return httpx.Response(status, json=body)


__all__ = ["HOST_ACTIONS", "ControlError", "StackControl", "newest_host", "shell_view"]
