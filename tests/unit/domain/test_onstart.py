"""The onstart script and the host environment: length, secrets, names, shell safety, and the
script actually run against a fake and a real (tiny, offline) agent wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from functions.domain import agent_env
from functions.domain.jobspec import RESERVED_ENV_PREFIXES, load_job_file, parse_job
from functions.domain.onstart import (
    VAST_ONSTART_LIMIT,
    OnstartTooLong,
    build_host_env,
    build_onstart,
    ensure_no_account_secrets,
)
from tests.paths import ROOT

WHEEL = "tether_agent-0.1.0-py3-none-any.whl"
SHORT_URL = f"https://tether-artifacts.s3.amazonaws.com/agent/{WHEEL}?X-Amz-Signature=ab12"

# Account-wide values that must never reach a host.
VAST_KEY = "vast-account-key-0123456789abcdef0123456789abcdef"
CF_TOKEN = "cf-api-token-Sn3lZJTBX6kkg7OdcBUAxOO963GEIyGQ"
AWS_SECRET = "aws-secret-wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
R2_PARENT_SECRET = "r2-parent-secret-5f4dcc3b5aa765d61d8327deb882cf99"
ACCOUNT_SECRETS = (VAST_KEY, CF_TOKEN, AWS_SECRET, R2_PARENT_SECRET)


def presigned_url(total_length: int) -> str:
    """An S3-style presigned URL (with a session token) padded to `total_length` characters."""
    head = (
        f"https://tether-artifacts-123456789012.s3.us-east-1.amazonaws.com/agent/{WHEEL}"
        "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=ASIAEXAMPLE%2F20260101%2Fus-east-1"
        "%2Fs3%2Faws4_request&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600"
        "&X-Amz-SignedHeaders=host&X-Amz-Signature=" + "0" * 64 + "&X-Amz-Security-Token="
    )
    assert total_length >= len(head)
    return head + "I" * (total_length - len(head))


def host_env(job_path: str = "examples/qlora-7b/job.yaml", **kw: object) -> dict[str, str]:
    job = load_job_file(ROOT / job_path)
    args: dict[str, object] = {
        "job_id": "j-123",
        "generation": 2,
        "api_url": "https://abc.execute-api.us-east-1.amazonaws.com/",
        "agent_token": "per-generation-agent-token",
        "lease_expires_at": 1_700_010_800.0,
    }
    args.update(kw)
    return build_host_env(job, **args)  # type: ignore[arg-type]


# --- length --------------------------------------------------------------------------------


def test_a_realistic_presigned_url_fits() -> None:
    script = build_onstart(agent_wheel_url=presigned_url(1800))
    assert len(script) <= VAST_ONSTART_LIMIT


def test_longest_url_that_fits_and_one_character_more() -> None:
    base = len(build_onstart(agent_wheel_url=presigned_url(1000))) - 1000
    room = VAST_ONSTART_LIMIT - base
    assert len(build_onstart(agent_wheel_url=presigned_url(room))) == VAST_ONSTART_LIMIT
    with pytest.raises(OnstartTooLong, match=rf"agent_wheel_url: .*at most {room}"):
        build_onstart(agent_wheel_url=presigned_url(room + 1))


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("ftp://host/x/" + WHEEL, "http"),
        ("https:///" + WHEEL, "http"),
        ("https://host/agent.tar.gz?sig=1", "wheel file name"),
        ("https://host/agent/", "wheel file name"),
    ],
)
def test_bad_wheel_urls_name_the_argument(url: str, needle: str) -> None:
    with pytest.raises(ValueError, match=rf"agent_wheel_url: .*{needle}"):
        build_onstart(agent_wheel_url=url)


def test_bad_paths_name_the_argument() -> None:
    with pytest.raises(ValueError, match="venv_dir"):
        build_onstart(agent_wheel_url=SHORT_URL, venv_dir="relative/dir")
    with pytest.raises(ValueError, match="default_work_dir"):
        build_onstart(agent_wheel_url=SHORT_URL, default_work_dir="/var/$(reboot)")


# --- shell validity ------------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["bash", "dash"])
def test_script_is_valid_shell(tmp_path: Path, shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    path = tmp_path / "onstart.sh"
    path.write_text(build_onstart(agent_wheel_url=presigned_url(1500)))
    result = subprocess.run([shell, "-n", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_url_is_quoted_not_interpolated() -> None:
    url = f"https://host/{WHEEL}?a=1&b='$(reboot)'&c=`id`"
    script = build_onstart(agent_wheel_url=url)
    (line,) = [ln for ln in script.splitlines() if ln.startswith("U=")]
    assert (
        subprocess.run(
            ["bash", "-c", line + '\nprintf %s "$U"'], capture_output=True, text=True, check=True
        ).stdout
        == url
    )


def test_script_holds_no_job_values() -> None:
    script = build_onstart(agent_wheel_url=SHORT_URL)
    job = load_job_file(ROOT / "examples/qlora-7b/job.yaml")
    assert host_env()[agent_env.AGENT_TOKEN] not in script
    assert job.run not in script


# --- the environment -----------------------------------------------------------------------


def test_every_tether_name_is_an_agent_env_name() -> None:
    job = load_job_file(ROOT / "examples/qlora-7b/job.yaml")
    env = host_env()
    ours = set(env) - set(job.env)
    assert ours <= set(agent_env.ALL)
    assert agent_env.CONTAINER_ID not in env and agent_env.CONTAINER_API_KEY not in env
    assert all(isinstance(v, str) for v in env.values())


def test_env_carries_only_what_bootstraps_the_agent() -> None:
    job = load_job_file(ROOT / "examples/qlora-7b/job.yaml")
    env = host_env(gpu_probe="none", vast_url="http://127.0.0.1:9999")
    assert env == {
        "TETHER_JOB_ID": "j-123",
        "TETHER_GENERATION": "2",
        "TETHER_API_URL": "https://abc.execute-api.us-east-1.amazonaws.com",
        "TETHER_AGENT_TOKEN": "per-generation-agent-token",
        "TETHER_LEASE_EXPIRES_AT": "1700010800",
        "TETHER_HEARTBEAT_INTERVAL_S": "15",
        "TETHER_GRACE_S": "120",
        "TETHER_ON_DEAD_MAN": job.policy.on_dead_man,
        "TETHER_VAST_URL": "http://127.0.0.1:9999",
        "TETHER_GPU_PROBE": "none",
    }
    assert set(env) <= set(agent_env.INSTANCE_ENV)
    assert not set(agent_env.INSTANCE_ENV) & set(agent_env.FROM_HEARTBEAT)


def test_no_account_wide_value_reaches_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    # The control plane holds these in its own environment; nothing may copy them over.
    for name, value in {
        "VAST_API_KEY": VAST_KEY,
        "CLOUDFLARE_API_TOKEN": CF_TOKEN,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "R2_PARENT_SECRET": R2_PARENT_SECRET,
    }.items():
        monkeypatch.setenv(name, value)
    script = build_onstart(agent_wheel_url=presigned_url(1500))
    env = host_env()
    blob = script + "\n".join(f"{k}={v}" for k, v in env.items())
    for secret in ACCOUNT_SECRETS:
        assert secret not in blob
    for name in env:
        assert not name.startswith(("AWS_", "VAST_", "CLOUDFLARE_", "R2_"))
    ensure_no_account_secrets(script=script, env=env, account_secrets=ACCOUNT_SECRETS)


def test_leak_check_refuses_a_job_that_smuggles_an_account_key() -> None:
    job = parse_job(
        {
            "name": "leaky",
            "image": "python:3.12-slim",
            "run": "python train.py",
            "expected_hours": 1,
            "budget_usd": 5,
            "env": {"MY_KEY": VAST_KEY},
        }
    )
    env = build_host_env(
        job, job_id="j-123", generation=1, api_url="https://api", agent_token="t",
        lease_expires_at=1.0,
    )  # fmt: skip
    # The job's env comes over the heartbeat: the check covers what the agent will receive.
    with pytest.raises(ValueError, match=r"env.MY_KEY: contains an account-wide secret"):
        ensure_no_account_secrets(script="", env=env, account_secrets=ACCOUNT_SECRETS, job=job)
    in_run = job.model_copy(update={"env": {}, "run": f"KEY={CF_TOKEN} python t.py"})
    with pytest.raises(ValueError, match=r"env.run: contains an account-wide secret"):
        ensure_no_account_secrets(script="", env=env, account_secrets=ACCOUNT_SECRETS, job=in_run)
    with pytest.raises(ValueError, match="onstart"):
        ensure_no_account_secrets(
            script=f"echo {CF_TOKEN}", env={}, account_secrets=ACCOUNT_SECRETS
        )


def test_reserved_prefixes_cover_what_the_agent_owns() -> None:
    # A job's own env can never shadow an agent variable (JobSpec refuses these prefixes).
    for name in agent_env.ALL:
        assert name.startswith(RESERVED_ENV_PREFIXES)


# --- running the script --------------------------------------------------------------------

HOSTILE_RUN = "echo \"$(touch PWNED_RUN)\"; touch PWNED_RUN2 && echo 'it''s' `touch PWNED_RUN3`"


def run_onstart(tmp_path: Path, script: str, env: dict[str, str], path_dirs: list[Path]) -> None:
    (tmp_path / "onstart.sh").write_text(script)
    wheels = tmp_path / "index"  # the only "index": pip finds the GPU extra's package here
    wheels.mkdir(exist_ok=True)
    build_fake_nvml_wheel(wheels)
    full_env = {
        "PATH": os.pathsep.join([*map(str, path_dirs), "/usr/bin", "/bin"]),
        "HOME": str(tmp_path),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        **env,
    }
    subprocess.run(
        ["sh", str(tmp_path / "onstart.sh")], cwd=tmp_path, env=full_env, check=True, timeout=120
    )


def wait_for(path: Path, timeout_s: float = 60) -> str:
    """The agent runs in the background: wait until it has written its record."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def test_starts_an_installed_agent_once_and_never_evaluates_the_run_command(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    record = tmp_path / "record.txt"
    agent = venv / "bin" / "tether-agent"
    agent.write_text(
        "#!/bin/sh\n"
        f'printf "%s|%s\\n" "$*" "$TETHER_RUN" >> {record}\n'
        # Stays alive like the real agent, so a second onstart sees it running.
        "trap 'kill $!; exit 0' TERM\nsleep 30 & wait\n"
    )
    agent.chmod(0o755)
    script = build_onstart(agent_wheel_url=SHORT_URL, venv_dir=str(venv))
    env = {
        agent_env.JOB_ID: "j-123",
        agent_env.WORK_DIR: str(tmp_path / "work"),
        agent_env.RUN: HOSTILE_RUN,
    }
    try:
        run_onstart(tmp_path, script, env, [])
        assert wait_for(record) == f"run|{HOSTILE_RUN}\n"
        run_onstart(tmp_path, script, env, [])  # a container restart: no second agent
        log = (tmp_path / "work" / "onstart.log").read_text()
        assert "agent already running" in log
        assert record.read_text().count("\n") == 1
        assert not list(tmp_path.glob("PWNED*"))
    finally:
        pid = int((tmp_path / "work" / "agent.pid").read_text())
        os.kill(pid, 15)


def write_wheel(path: Path, dist: str, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr(f"{dist}/RECORD", "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n")
    return path


WHEEL_META = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def build_fake_nvml_wheel(directory: Path) -> Path:
    """A stand-in for nvidia-ml-py (its `pynvml` module), so the GPU extra installs offline."""
    dist = "nvidia_ml_py-13.615.71.dist-info"
    return write_wheel(
        directory / "nvidia_ml_py-13.615.71-py3-none-any.whl",
        dist,
        {
            "pynvml.py": "FAKE = True\n",
            f"{dist}/METADATA": "Metadata-Version: 2.1\nName: nvidia-ml-py\nVersion: 13.615.71\n",
            f"{dist}/WHEEL": WHEEL_META,
        },
    )


def build_fake_agent_wheel(directory: Path) -> Path:
    """A real wheel named tether-agent whose `main` records how it ran; like the real one, its
    `[gpu]` extra requires nvidia-ml-py (and nothing else is required)."""
    path = directory / WHEEL
    dist = "tether_agent-0.1.0.dist-info"
    main = (
        "import os, sys\n"
        "def main():\n"
        "    with open(os.environ['RECORD'], 'a') as f:\n"
        "        f.write(' '.join(sys.argv[1:]) + '|' + os.environ['TETHER_RUN'] + '|'\n"
        "                + os.environ.get('PYTHONPATH', '') + '\\n')\n"
        "    return 0\n"
    )
    files = {
        "tether_agent/__init__.py": "",
        "tether_agent/main.py": main,
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: tether-agent\nVersion: 0.1.0\n"
        "Provides-Extra: gpu\nRequires-Dist: nvidia-ml-py==13.615.71; extra == 'gpu'\n",
        f"{dist}/WHEEL": WHEEL_META,
        f"{dist}/entry_points.txt": "[console_scripts]\ntether-agent = tether_agent.main:main\n",
    }
    return write_wheel(path, dist, files)


def fake_tools(tmp_path: Path, wheel: Path, *, venv_works: bool) -> Path:
    """A bin dir with a `curl` that serves the wheel and records the URL it was given, and a
    `python3` (this interpreter) that can refuse `-m venv` like an image without python3-venv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    curl = bin_dir / "curl"
    curl.write_text(
        '#!/bin/sh\nfor a; do url="$a"; done\n'
        f'printf "%s" "$url" > {tmp_path}/curl-url\n'
        'while [ "$1" != "-o" ]; do shift; done\n'
        f'cp {wheel} "$2"\n'
    )
    python = bin_dir / "python3"
    refuse = "" if venv_works else 'if [ "$1 $2" = "-m venv" ]; then exit 1; fi\n'
    python.write_text(f'#!/bin/sh\n{refuse}exec {sys.executable} "$@"\n')
    for tool in (curl, python):
        tool.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("venv_works", [True, False], ids=["venv", "no-python3-venv"])
def test_installs_the_wheel_and_starts_the_agent(tmp_path: Path, venv_works: bool) -> None:
    wheel = build_fake_agent_wheel(tmp_path)
    bin_dir = fake_tools(tmp_path, wheel, venv_works=venv_works)
    venv = tmp_path / "opt" / "tether-agent"
    url = f"https://artifacts.example/{WHEEL}?X-Amz-Signature=a&b='$(touch PWNED_URL)'"
    record = tmp_path / "record.txt"
    run_onstart(
        tmp_path,
        build_onstart(agent_wheel_url=url, venv_dir=str(venv)),
        {
            agent_env.JOB_ID: "j-123",
            agent_env.WORK_DIR: str(tmp_path / "work"),
            agent_env.RUN: HOSTILE_RUN,
            "RECORD": str(record),
        },
        [bin_dir],
    )
    # The agent gets `run`, the command verbatim, and no PYTHONPATH to pass on to training.
    assert wait_for(record) == f"run|{HOSTILE_RUN}|\n"
    assert (tmp_path / "curl-url").read_text() == url
    assert (venv / "bin" / "tether-agent").exists() is venv_works
    assert (venv / "lib" / "tether_agent").is_dir() is not venv_works
    # With its GPU extra: NVML's binding is where the agent's probe imports it.
    if venv_works:
        assert list(venv.glob("lib/python*/site-packages/pynvml.py"))
    else:
        assert (venv / "lib" / "pynvml.py").is_file()
    log = (tmp_path / "work" / "onstart.log").read_text()
    assert "agent started" in log
    assert ("python3-venv" in log) is not venv_works
    assert not list(tmp_path.glob("PWNED*"))
