"""`tether ssh JOB [--local] [--print | --json]`: a shell on the job's current host.

On Vast: the job's view from the API (`GET /jobs/{id}`) names the current generation's instance;
Vast's own record of it (`GET /api/v0/instances/{id}/`, with the account's Vast key: the
`VAST_API_KEY` variable, else the `/tether/account/vast` parameter `tether secrets set vast`
stored) gives the SSH endpoint, read as Vast's own CLI reads it (`vastai ssh-url`): a direct
connection when the record maps the container's port 22 (`ports["22/tcp"][0]["HostPort"]` on
`public_ipaddr`), else Vast's SSH proxy (`ssh_host`, `ssh_port`; one port up for a jupyter
launch mode). The CLI reads the record itself, rather than the API handing out an endpoint,
because the control plane keeps no SSH fields: only Vast knows the current one, and asking it
from here adds no grant, no stored field and no Vast call to the API's read path. The user
needs the Vast key anyway to reach the host: it is their account.

Who gets in is Vast's business: Vast puts the account's SSH keys on an instance (`vastai create
ssh-key …`, or the console's keys page; a new key also reaches the instances already running),
and `ssh` runs as `root`. By default tether rents in Vast's entrypoint launch mode (runtype
`args`, so the image's own entrypoint runs the agent), in which Vast starts no SSH server in the
container; a job with `ssh: true` in its spec is rented in Vast's SSH launch mode instead
(`functions.domain.onstart.launch_mode`). The command says so when the record shows `args`.

On the local stack (`--local`): a shell on the job's newest local host, from `tether local
up`'s control endpoint (`tether_local.control`): in the training process's working directory
with its environment (else the agent's, less its secrets), and carrying the host's process
marker, so `tether local kill-host` ends it with the host.

`--print` prints the command instead of running it; `--json` prints it with what it was read
from, for scripts.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from functions.domain.job import TERMINAL_STATES
from infra import names
from tether_cli import output, provider_keys
from tether_cli.output import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError

if TYPE_CHECKING:
    from functions.adapters.vast import VastClient

LIVE_GENERATION_STATUSES = ("provisioning", "running")
SSH_USER = "root"  # Vast's containers: root, whatever the image
ADD_KEY_HINT = (
    "Vast puts your account's SSH keys on the instance: add yours with `vastai create ssh-key "
    '"$(cat ~/.ssh/id_ed25519.pub)"` or on the console\'s keys page '
    "(https://cloud.vast.ai/manage-keys/); a new key reaches running instances too"
)
NO_SSH_SERVER = (
    "instance {instance} runs in Vast's entrypoint launch mode (runtype {runtype!r}): Vast "
    "starts no SSH server in it, so this connects only if the job's image runs sshd; submit "
    "the job with `ssh: true` in its spec to have Vast run one"
)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "ssh",
        help="open a shell on a job's current host (ssh on Vast; a local shell with --local)",
        description="Open a shell on JOB's current host: `ssh -p PORT root@HOST` with the "
        "endpoint from Vast's record of the instance (your Vast key: VAST_API_KEY, else the "
        "one `tether secrets set vast` stored). Vast authorizes your account's SSH keys "
        "(`vastai create ssh-key`). With --local, a shell on the local stack's host, in the "
        "training process's directory and environment.",
    )
    parser.add_argument("job_id", metavar="JOB", help="the job id")
    parser.add_argument(
        "--local", action="store_true", help="the host of `tether local up`'s stack"
    )
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--print", action="store_true", help="print the command, do not run it")
    shown.add_argument("--json", action="store_true", help="print the command and its sources")
    parser.set_defaults(handler=run)


# --- Vast --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SshEndpoint:
    host: str
    port: int
    via: Literal["direct", "proxy"]

    def command(self) -> list[str]:
        return ["ssh", "-p", str(self.port), f"{SSH_USER}@{self.host}"]


def ssh_endpoint(record: Mapping[str, Any]) -> SshEndpoint | None:
    """The SSH endpoint in Vast's instance `record` (see the module docstring), or None when it
    shows none (a record right after the rent has none yet)."""
    ports = record.get("ports")
    mapped = ports.get("22/tcp") if isinstance(ports, Mapping) else None
    address = record.get("public_ipaddr")
    if isinstance(mapped, list) and mapped and isinstance(mapped[0], Mapping):
        port = _port(mapped[0].get("HostPort"))
        if port and isinstance(address, str) and address.strip():
            return SshEndpoint(address.strip(), port, "direct")
    host, port = record.get("ssh_host"), _port(record.get("ssh_port"))
    if isinstance(host, str) and host.strip() and port:
        if "jupyter" in str(record.get("image_runtype") or ""):
            port += 1  # the jupyter launch modes serve SSH one port up, as `vastai ssh-url` says
        return SshEndpoint(host.strip(), port, "proxy")
    return None


def _port(value: Any) -> int | None:
    try:
        port = int(str(value).strip())
    except ValueError:
        return None
    return port if 0 < port < 65536 else None


def runs_no_ssh_server(record: Mapping[str, Any]) -> bool:
    """Vast's entrypoint launch mode (`args`): Vast injects no SSH server."""
    runtype = str(record.get("image_runtype") or "")
    return bool(runtype) and "ssh" not in runtype and "jupyter" not in runtype


def live_host(job: Mapping[str, Any]) -> tuple[int, int]:
    """(instance id, generation) of the job's live host, from its API view; a CliError that
    says why there is none."""
    job_id, state = job.get("job_id"), str(job.get("state"))
    host = job.get("host") if isinstance(job.get("host"), Mapping) else None
    if state in {s.value for s in TERMINAL_STATES}:
        raise CliError(f"job {job_id} has ended ({state}): it has no host any more", EXIT_FAILURE)
    if host is None or not isinstance(host.get("instance_id"), int):
        raise CliError(
            f"job {job_id} has no host yet ({state}): try again once it is rented "
            f"(`tether status {job_id}`)",
            EXIT_FAILURE,
        )
    generation, status = host.get("generation"), host.get("status")
    if status not in LIVE_GENERATION_STATUSES:
        raise CliError(
            f"job {job_id} has no live host: generation {generation}'s instance "
            f"{host['instance_id']} is {status} ({state}); a new host comes with the next "
            f"generation (`tether status {job_id}`)",
            EXIT_FAILURE,
        )
    return int(host["instance_id"]), int(generation or 0)


def vast_api_key(environ: Mapping[str, str] | None = None) -> str:
    """The account's Vast key: VAST_API_KEY, else the SSM parameter the deploy keeps it in."""
    env = os.environ if environ is None else environ
    key = env.get("VAST_API_KEY", "").strip()
    if key:
        return key
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from tether_cli.deploy_checks import resolve_region

    region, _ = resolve_region(None, env)
    try:
        value = boto3.client("ssm", region_name=region).get_parameter(
            Name=names.VAST_KEY_PARAMETER, WithDecryption=True
        )["Parameter"]["Value"]
    except (BotoCoreError, ClientError) as exc:
        raise CliError(
            f"cannot read the Vast key ({names.VAST_KEY_PARAMETER} in {region}): {exc}; or set "
            "VAST_API_KEY",
            EXIT_FAILURE,
        ) from None
    if not provider_keys.holds_a_key("vast", str(value)):
        raise CliError(
            "the Vast key is not set: `tether secrets set vast` (or set VAST_API_KEY)", EXIT_USAGE
        )
    return str(value)


def instance_record(vast: VastClient, instance_id: int) -> dict[str, Any]:
    """Vast's record of the instance, every field it sends; a CliError when it is gone."""
    from functions.adapters.vast import VastError

    try:
        instance = vast.show_instance(instance_id)
    except VastError as exc:
        raise CliError(f"Vast: cannot read instance {instance_id}: {exc}", EXIT_FAILURE) from None
    if instance is None:
        raise CliError(f"instance {instance_id} is gone on Vast: no host to reach", EXIT_FAILURE)
    return instance.model_dump(mode="json")


def run_vast(args: argparse.Namespace) -> int:
    from tether_cli.jobs import connect

    with connect(args) as api:
        job = api.get_job(args.job_id)
    instance_id, generation = live_host(job)
    from functions.adapters.vast import VastClient

    record = instance_record(VastClient(vast_api_key()), instance_id)
    endpoint = ssh_endpoint(record)
    if endpoint is None:
        raise CliError(
            f"Vast's record of instance {instance_id} shows no SSH endpoint yet "
            f"({record.get('actual_status') or 'just created'}): try again in a minute",
            EXIT_FAILURE,
        )
    command = endpoint.command()
    warning = (
        NO_SSH_SERVER.format(instance=instance_id, runtype=record.get("image_runtype"))
        if runs_no_ssh_server(record)
        else None
    )
    if args.json:
        output.print_json(
            {
                "job_id": args.job_id,
                "generation": generation,
                "instance_id": instance_id,
                "host": endpoint.host,
                "port": endpoint.port,
                "user": SSH_USER,
                "via": endpoint.via,
                "command": command,
                "warning": warning,
            }
        )
        return EXIT_OK
    if warning:
        output.warn(warning)
    if args.print:
        print(shlex.join(command))
        return EXIT_OK
    output.stderr_console().print(
        f"instance {instance_id} (job {args.job_id}, generation {generation}), {endpoint.via} "
        f"ssh. {ADD_KEY_HINT}.",
        highlight=False,
    )
    return _exec(command, None, None)


# --- the local stack ---------------------------------------------------------------------------


def local_shell(view: Mapping[str, Any]) -> tuple[list[str], str, dict[str, str]]:
    """(argv, working directory, environment) of a shell on a local host from its view: the
    directory on this machine, and argv entering the host's own view of its disk where it has
    one (`tether_local.hosts.disk_view`), so the host's paths in its environment hold."""
    env = {str(k): str(v) for k, v in (view.get("env") or {}).items()}
    shell = shutil.which("bash", path=env.get("PATH")) or shutil.which("bash") or "/bin/sh"
    enter = [str(part) for part in view.get("enter") or []]
    return [*enter, shell], str(view.get("cwd_on_disk") or view["cwd"]), env


def local_shell_line(argv: list[str], cwd: str, env: Mapping[str, str]) -> str:
    """The shell as one command line: `cd DIR && exec env -i K=V … bash`."""
    assignments = [f"{k}={v}" for k, v in sorted(env.items())]
    return f"cd {shlex.quote(cwd)} && exec " + shlex.join(["env", "-i", *assignments, *argv])


def run_local(args: argparse.Namespace) -> int:
    from tether_cli.local import control_request

    view = control_request(f"/jobs/{args.job_id}/host")
    argv, cwd, env = local_shell(view)
    if args.json:
        output.print_json({**view, "command": argv})
        return EXIT_OK
    if args.print:
        print(local_shell_line(argv, cwd, env))
        return EXIT_OK
    output.stderr_console().print(
        f"local host {view.get('instance_id')} (job {args.job_id}, generation "
        f"{view.get('generation')}): a shell in {cwd} with the environment of "
        f"{view.get('env_from')}; it ends when the host dies",
        highlight=False,
    )
    return _exec(argv, cwd, env)


def _exec(argv: list[str], cwd: str | None, env: Mapping[str, str] | None) -> int:
    """Become `argv` (the shell or ssh owns the terminal from here on)."""
    program = argv[0] if Path(argv[0]).is_absolute() else shutil.which(argv[0])
    if program is None:
        raise CliError(f"{argv[0]}: not found on PATH", EXIT_FAILURE)
    sys.stdout.flush()
    sys.stderr.flush()
    if cwd is not None:
        os.chdir(cwd)
    if env is None:
        os.execv(program, argv)  # noqa: S606 (ssh, found on PATH, with the user's argv)
    os.execve(program, argv, dict(env))  # noqa: S606 (the user's own shell)


def run(args: argparse.Namespace) -> int:
    return run_local(args) if args.local else run_vast(args)


__all__ = [
    "SshEndpoint",
    "instance_record",
    "live_host",
    "local_shell",
    "local_shell_line",
    "register",
    "run",
    "runs_no_ssh_server",
    "ssh_endpoint",
    "vast_api_key",
]
