"""The onstart script and the instance environment for a rented Vast host
(docs/architecture.md#rented-host). Pure.

Vast runs `onstart` (≤ 4048 characters) inside the container at start. Ours only installs the
agent into its own venv from a presigned URL and starts it in the background. The instance
environment (Vast's `env` field, built by `build_host_env`) carries only what bootstraps the
agent; the job itself (its command among it) comes over the agent's first heartbeat
(`job_bootstrap.py`) and is never written into the script, so no quoting in it can escape.

Invariant 6: only job-scoped, expiring values reach the host. `ensure_no_account_secrets` is the
last check before a rent: it refuses a script, an environment or a job (what the heartbeat will
hand the agent) that contains an account-wide key.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from urllib.parse import unquote, urlsplit

from functions.domain import agent_env
from functions.domain.jobspec import JobSpec

VAST_ONSTART_LIMIT = 4048  # characters, Vast's create-instance limit
DEFAULT_VENV = "/opt/tether-agent"
DEFAULT_WORK_DIR = "/var/lib/tether"
# Vast's launch modes (the rent's `runtype`). "args" keeps the image's own entrypoint and runs
# the onstart script as its command. "ssh_direc ssh_proxy" (the official CLI's `--ssh --direct`)
# is Vast's entrypoint instead: it starts sshd with the account's keys (a direct port where the
# machine has one, else Vast's proxy) and then runs the onstart script itself.
ENTRYPOINT_LAUNCH = "args"
SSH_LAUNCH = "ssh_direc ssh_proxy"
_WHEEL_NAME = re.compile(r"^[A-Za-z0-9_.+-]+\.whl$")
_ABS_PATH = re.compile(r"^/[A-Za-z0-9_./-]+$")

# POSIX sh (no bashisms), so it runs whatever shell Vast uses; written tight because every
# character the script takes is one the presigned URL cannot have. Placeholders {{NAME}} are
# filled with shell-quoted values only. How it works:
# - if the onstart shell lacks the container env, it imports TETHER_*/CONTAINER_* from PID 1's
#   environ (through Python's shlex.quote, so values are never evaluated as code);
# - logs to $W/onstart.log, the agent to $W/agent.log; a second run (container restart) finds
#   the installed agent and the running pid and does nothing twice;
# - downloads with curl, wget or Python (5 tries, growing pauses), installs into a venv, or,
#   when the image lacks python3-venv, with `pip install --target $V/lib`, then runs the agent
#   with that dir on sys.path (not PYTHONPATH: the training command must not inherit it);
# - installs the wheel with its `[gpu]` extra (`nvidia-ml-py`, NVML's binding): without it the
#   GPU probe reports "no GPU" on every host and the monitor's hung rules can never fire.
_TEMPLATE = r"""#!/bin/sh
# tether onstart: install the agent, start it. Its settings come from the env (TETHER_*).
U={{URL}}
F={{WHEEL}}
V={{VENV}}
P=$(command -v python3||command -v python)||{ echo "tether: no python3 in image">&2;exit 1;}
if [ -z "${TETHER_JOB_ID:-}" ]&&[ -r /proc/1/environ ];then
eval "$("$P" -c 'import shlex
for e in open("/proc/1/environ","rb").read().split(b"\0"):
 k,_,v=e.decode(errors="replace").partition("=")
 if k.startswith(("TETHER_","CONTAINER_")) and k.isidentifier():
  print("export "+k+"="+shlex.quote(v))')"
fi
W=${TETHER_WORK_DIR:-{{WORK}}}
mkdir -p "$W"||exit 1
exec >>"$W/onstart.log" 2>&1
log(){ echo "$(date -u +%FT%TZ) tether-onstart: $*";}
if [ -f "$W/agent.pid" ]&&grep -qa tether "/proc/$(cat "$W/agent.pid")/cmdline" 2>/dev/null;then
log "agent already running";exit 0;fi
fetch(){
if command -v curl >/dev/null;then curl -fsSL -o "$2" "$1"
elif command -v wget >/dev/null;then wget -q -O "$2" "$1"
else "$P" -c 'import sys,urllib.request as r;r.urlretrieve(*sys.argv[1:])' "$1" "$2";fi;}
retry(){ for i in 1 2 3 4 5;do "$@"&&return 0
log "try $i/5 failed: $1";sleep $((i*i));done;return 1;}
if [ ! -x "$V/bin/tether-agent" ]&&[ ! -d "$V/lib/tether_agent" ];then
retry fetch "$U" "$W/$F"||{ log "agent wheel download failed";exit 1;}
if "$P" -m venv "$V"&&"$V/bin/python" -m pip --version >/dev/null 2>&1;then
retry "$V/bin/python" -m pip install -q "$W/$F[gpu]"||{ log "pip install into $V failed";exit 1;}
else
log "python3 -m venv failed (no python3-venv?): pip install --target $V/lib"
rm -rf "$V"
retry "$P" -m pip install -q --target "$V/lib" "$W/$F[gpu]"||{
log "no pip: add python3-venv or pip to the image";exit 1;}
fi;fi
if [ -x "$V/bin/tether-agent" ];then set -- "$V/bin/tether-agent" run
else set -- "$P" -c 'import sys;sys.path.insert(0,sys.argv.pop(1))
from tether_agent.main import main;sys.exit(main())' "$V/lib" run;fi
nohup "$@" </dev/null >>"$W/agent.log" 2>&1 &
echo $! >"$W/agent.pid"
log "agent started, pid $!, log $W/agent.log"
"""


class OnstartTooLong(ValueError):
    """The script would pass Vast's onstart limit."""


def launch_mode(spec: JobSpec) -> str:
    """The rent's `runtype`: Vast's SSH launch mode when the job asks for `ssh`, so `tether ssh`
    can reach the host; else the image's own entrypoint."""
    return SSH_LAUNCH if spec.ssh else ENTRYPOINT_LAUNCH


def _wheel_file_name(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise ValueError(f"agent_wheel_url: must be an http(s) URL (got {url[:60]!r})")
    name = unquote(parts.path.rsplit("/", 1)[-1])
    if not _WHEEL_NAME.match(name):
        raise ValueError(
            "agent_wheel_url: the path must end in a wheel file name such as "
            f"tether_agent-0.1.0-py3-none-any.whl (got {name!r}); pip needs that name"
        )
    return name


def build_onstart(
    *,
    agent_wheel_url: str,
    venv_dir: str = DEFAULT_VENV,
    default_work_dir: str = DEFAULT_WORK_DIR,
) -> str:
    """The onstart script: install the agent wheel into `venv_dir` and start `tether-agent run`.

    Raises ValueError naming the argument at fault, OnstartTooLong past Vast's limit.
    """
    wheel = _wheel_file_name(agent_wheel_url)
    for name, path in (("venv_dir", venv_dir), ("default_work_dir", default_work_dir)):
        if not _ABS_PATH.match(path):
            raise ValueError(f"{name}: must be an absolute path of plain characters (got {path!r})")
    script = (
        _TEMPLATE.replace("{{URL}}", shlex.quote(agent_wheel_url))
        .replace("{{WHEEL}}", shlex.quote(wheel))
        .replace("{{VENV}}", shlex.quote(venv_dir))
        .replace("{{WORK}}", default_work_dir)  # inside ${...:-}: checked plain above
    )
    if len(script) > VAST_ONSTART_LIMIT:
        room = VAST_ONSTART_LIMIT - (len(script) - len(agent_wheel_url))
        raise OnstartTooLong(
            f"agent_wheel_url: {len(agent_wheel_url)} characters make the onstart script "
            f"{len(script)} characters, over Vast's limit of {VAST_ONSTART_LIMIT}; the URL may "
            f"have at most {room} (presign with a shorter expiry or without a session token)"
        )
    return script


VAST_ENV_VALUE_LIMIT = 256  # characters of one `env` value, Vast's create-instance limit
VAST_ENV_TOTAL_LIMIT = 32 * 1024  # bytes of the whole `env`, Vast's create-instance limit


def build_host_env(
    job: JobSpec,
    *,
    job_id: str,
    generation: int,
    api_url: str,
    agent_token: str,
    lease_expires_at: float,
    heartbeat_interval_s: float | None = None,
    grace_s: float = 120,
    vast_url: str | None = None,
    gpu_probe: str | None = None,
    probe_timeout_s: float | None = None,
    work_dir: str | None = None,
    checkpoint_interval_s: float | None = None,
) -> dict[str, str]:
    """The instance environment (Vast's `env`): only what bootstraps the agent.

    Vast bounds each value at 256 characters and the whole env at 32 KB, so it carries the job
    id, the generation, the API URL, the per-generation agent token and short, fixed-size
    settings, never anything long or job-defined: the storage keys (R2 session tokens are
    550–700 characters), the job's `run`, checkpoint and outputs settings, code, own `env`,
    secrets' names and the checkpoints to restore come in the reply to the agent's first
    heartbeat (`job_bootstrap.py`). `CONTAINER_ID` / `CONTAINER_API_KEY` are Vast's to set.
    """
    ours: dict[str, str | None] = {
        agent_env.JOB_ID: job_id,
        agent_env.GENERATION: str(generation),
        agent_env.API_URL: api_url.rstrip("/"),
        agent_env.AGENT_TOKEN: agent_token,
        agent_env.LEASE_EXPIRES_AT: _number(lease_expires_at),
        agent_env.HEARTBEAT_INTERVAL_S: _number(
            job.policy.heartbeat_interval_s
            if heartbeat_interval_s is None
            else heartbeat_interval_s
        ),
        agent_env.GRACE_S: _number(grace_s),
        agent_env.CHECKPOINT_INTERVAL_S: (
            None if checkpoint_interval_s is None else str(max(1, round(checkpoint_interval_s)))
        ),
        agent_env.ON_DEAD_MAN: job.policy.on_dead_man,
        agent_env.VAST_URL: vast_url,
        agent_env.GPU_PROBE: gpu_probe,
        agent_env.PROBE_TIMEOUT_S: None if probe_timeout_s is None else _number(probe_timeout_s),
        agent_env.WORK_DIR: work_dir,
    }
    env = {name: value for name, value in ours.items() if value is not None}
    for name, value in env.items():
        if len(value) > VAST_ENV_VALUE_LIMIT:
            raise ValueError(
                f"env.{name}: {len(value)} characters, over Vast's limit of "
                f"{VAST_ENV_VALUE_LIMIT} for one value"
            )
    return env


def env_size(env: Mapping[str, str]) -> int:
    """The env's size as Vast counts it against its 32 KB: `K=V` and a separator per entry."""
    return sum(len(name) + len(value) + 2 for name, value in env.items())


def ensure_no_account_secrets(
    *,
    script: str,
    env: Mapping[str, str],
    account_secrets: Iterable[str],
    job: JobSpec | None = None,
) -> None:
    """Refuse to rent if an account-wide key (Vast, Cloudflare, AWS) would reach the host: in
    the script, the instance env, or what the agent receives over its heartbeat from `job`
    (its own `env` and its command)."""
    received = dict(env)
    if job is not None:
        received.update(job.env)
        received["run"] = job.run
    for secret in account_secrets:
        if len(secret) < 8:  # too short to search for meaningfully; never a real key
            continue
        if secret in script:
            raise ValueError("onstart: contains an account-wide secret; refusing to rent")
        for name, value in received.items():
            if secret in value or secret in name:
                raise ValueError(f"env.{name}: contains an account-wide secret; refusing to rent")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
