"""The training command's environment as the agent builds it, and agent/README.md's table of
it ("Your command's environment"): every name the agent sets or removes is documented, and
nothing documented is left undone."""

from __future__ import annotations

import re
from pathlib import Path

from tether_agent.training_env import HOOKS_DIR, training_env

from tests.paths import ROOT

PARENT = {
    "PATH": "/usr/bin",
    "PYTHONPATH": "/mine",
    "HF_HOME": "/cache",
    "TETHER_JOB_ID": "j1",
    "TETHER_CHECKPOINT_DIR": "/ignored",
    "TETHER_AGENT_TOKEN": "t",
    "TETHER_S3_ACCESS_KEY_ID": "a",
    "TETHER_S3_SECRET_ACCESS_KEY": "s",
    "TETHER_S3_SESSION_TOKEN": "st",
    "TETHER_S3_WRITE_ACCESS_KEY_ID": "wa",
    "TETHER_S3_WRITE_SECRET_ACCESS_KEY": "ws",
    "TETHER_S3_WRITE_SESSION_TOKEN": "wst",
    "CONTAINER_API_KEY": "k",
}


def _documented() -> tuple[set[str], set[str]]:
    """(names set, names removed) from the README's table."""
    text = (ROOT / "agent" / "README.md").read_text()
    section = text.split("## Your command's environment", 1)[1].split("\n## ", 1)[0]
    set_names: set[str] = set()
    removed: set[str] = set()
    for row in re.findall(r"^\| (.+?) \| (.+?) \|$", section, flags=re.M):
        names = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", row[1] if row[0] == "removed" else row[0]))
        (removed if row[0] == "removed" else set_names).update(names)
    return set_names, removed


def test_a_restored_run_sees_every_documented_variable_and_none_of_the_agents_secrets() -> None:
    env = training_env(
        PARENT,
        checkpoint_dir=Path("/workspace/checkpoints"),
        marker=".done",
        progress_file=Path("/var/lib/tether/progress.json"),
        restored_step=400,
        resume_from=Path("/workspace/checkpoints/checkpoint-400"),
        code_dir=Path("/var/lib/tether/code"),
        outputs_dir=Path("/workspace/outputs"),
        checkpoint_interval_s=1696.8,
    )
    assert {k: v for k, v in env.items() if k.startswith("TETHER_") or k == "PYTHONPATH"} == {
        "TETHER_JOB_ID": "j1",
        "TETHER_CHECKPOINT_DIR": "/workspace/checkpoints",
        "TETHER_MARKER": ".done",
        "TETHER_PROGRESS_FILE": "/var/lib/tether/progress.json",
        "TETHER_RESTORED_STEP": "400",
        "TETHER_RESUME_FROM": "/workspace/checkpoints/checkpoint-400",
        "TETHER_CODE_DIR": "/var/lib/tether/code",
        "TETHER_OUTPUTS_DIR": "/workspace/outputs",
        "TETHER_CHECKPOINT_INTERVAL_S": "1697",
        "PYTHONPATH": f"{HOOKS_DIR}:/mine",
    }
    assert env["HF_HOME"] == "/cache" and env["CONTAINER_API_KEY"] == "k"
    changed = {k for k in env if env[k] != PARENT.get(k)}
    removed = set(PARENT) - set(env)
    assert _documented() == (changed, removed)


def test_a_fresh_run_has_no_restored_checkpoint_variables() -> None:
    env = training_env(
        {"PATH": "/usr/bin"},
        checkpoint_dir=Path("/c"),
        marker=".m",
        progress_file=Path("/p"),
    )
    assert "TETHER_RESTORED_STEP" not in env and "TETHER_RESUME_FROM" not in env
    assert "TETHER_CODE_DIR" not in env  # no code named: the command runs in the image as is
    assert "TETHER_OUTPUTS_DIR" not in env  # the spec names no outputs dir
    assert "TETHER_CHECKPOINT_INTERVAL_S" not in env  # the control plane sent none
    assert env["PYTHONPATH"] == str(HOOKS_DIR)


def test_the_hooks_folder_holds_the_modules_and_their_distribution_only() -> None:
    """Everything here is importable by the training process: the hooks, and the auto hooks
    that Python's start-up runs (sitecustomize)."""
    files = {p.name for p in HOOKS_DIR.iterdir() if p.name != "__pycache__"}
    assert files == {"tether_hooks.py", "tether_autohooks.py", "sitecustomize.py", "pyproject.toml"}
