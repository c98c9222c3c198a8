"""The training command's environment: the container's, minus the agent's secrets, plus what
the script needs to find its checkpoints and the hooks. agent/README.md documents each name
("Your command's environment"); a test compares that table with what this function does."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

HOOKS_DIR = Path(__file__).parent / "_hooks"  # tether_hooks.py (stdlib only) and its pyproject
SECRET_VARS = (
    "TETHER_AGENT_TOKEN",
    "TETHER_S3_ACCESS_KEY_ID",
    "TETHER_S3_SECRET_ACCESS_KEY",
    "TETHER_S3_SESSION_TOKEN",
    "TETHER_S3_WRITE_ACCESS_KEY_ID",
    "TETHER_S3_WRITE_SECRET_ACCESS_KEY",
    "TETHER_S3_WRITE_SESSION_TOKEN",
)


def training_env(
    parent: Mapping[str, str],
    *,
    checkpoint_dir: Path,
    marker: str,
    progress_file: Path,
    restored_step: int | None = None,
    resume_from: Path | None = None,
    code_dir: Path | None = None,
    outputs_dir: Path | None = None,
    checkpoint_interval_s: float | None = None,
) -> dict[str, str]:
    """`parent` (the agent's environment) without the agent's secrets, with the checkpoint
    variables set, the restored checkpoint named when there is one, and the hooks first on
    PYTHONPATH."""
    env = {k: v for k, v in parent.items() if k not in SECRET_VARS}
    env["TETHER_CHECKPOINT_DIR"] = str(checkpoint_dir)
    env["TETHER_MARKER"] = marker
    env["TETHER_PROGRESS_FILE"] = str(progress_file)
    if outputs_dir is not None:
        env["TETHER_OUTPUTS_DIR"] = str(outputs_dir)
    if restored_step is not None and resume_from is not None:
        env["TETHER_RESTORED_STEP"] = str(restored_step)
        env["TETHER_RESUME_FROM"] = str(resume_from)
    if code_dir is not None:
        env["TETHER_CODE_DIR"] = str(code_dir)
    if checkpoint_interval_s is not None:
        env["TETHER_CHECKPOINT_INTERVAL_S"] = str(max(1, round(checkpoint_interval_s)))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HOOKS_DIR), parent.get("PYTHONPATH", "")) if p
    )
    return env
