"""The example jobs every planner benchmark prices: `examples/<name>/job.yaml`, parsed by the
project's own job-spec parser (`functions.domain.jobspec.load_job_file`)."""

from __future__ import annotations

from pathlib import Path

from functions.domain.jobspec import JobSpec, load_job_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_jobs(examples: Path = EXAMPLES) -> dict[str, JobSpec]:
    """Each example's job spec by its folder's name, in name order."""
    return {path.parent.name: load_job_file(path) for path in sorted(examples.glob("*/job.yaml"))}
