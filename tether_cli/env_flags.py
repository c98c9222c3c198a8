"""`tether submit --env NAME=VALUE` (repeatable): variables merged over the spec's `env`.

The merged spec is validated again as a whole, by the same model as the file (`parse_job`): a
name the spec's `env` would refuse (not a variable name, reserved for tether, also listed under
`secrets:`) or a value it would refuse is an error naming `--env` (exit 2), before anything is
packed, uploaded or stored. A value that looks like a credential draws the same warning as in
the file: `env` is stored with the job; a token belongs in `tether secrets set`.
"""

from __future__ import annotations

from collections.abc import Sequence

from functions.domain.jobspec import JobSpec, SpecError, parse_job
from functions.domain.secrets import token_warnings
from tether_cli.output import EXIT_USAGE, CliError, warn

ENV_FLAG_HELP = (
    "set a variable of the job's env, over the spec's (repeatable; e.g. --env QLORA_TINY=1); "
    "stored with the job, so a token belongs in `tether secrets set`"
)


def parse_env_flags(items: Sequence[str]) -> dict[str, str]:
    """`["A=1", "B=x=y"]` → `{"A": "1", "B": "x=y"}` (a later one wins); exit 2 for an item
    without `=` or a name."""
    found: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            shown = name if sep else item
            raise CliError(
                f"--env {shown[:64]!r}: must be NAME=VALUE (a variable name, =, then the value)",
                EXIT_USAGE,
            )
        found[name] = value
    return found


def with_env_flags(job: JobSpec, items: Sequence[str]) -> JobSpec:
    """`job` with the `--env` items merged over its `env`, validated as the spec is."""
    given = parse_env_flags(items)
    if not given:
        return job
    data = job.model_dump(mode="json", exclude_unset=True)
    data["env"] = {**job.env, **given}
    try:
        merged = parse_job(data)
    except SpecError as exc:
        # The spec alone was valid: every problem is the flags'. Values are never echoed.
        lines = [_flag_problem(error.path, error.reason) for error in exc.errors]
        if len(lines) == 1:
            raise CliError(lines[0], EXIT_USAGE) from None
        raise CliError(f"--env: {len(lines)} problems:", EXIT_USAGE, lines) from None
    for line in token_warnings(given):
        warn(f"--env: {line}")
    return merged


def _flag_problem(path: str, reason: str) -> str:
    """`env.NAME` → `--env NAME=…: reason`; `env` or the whole spec → `--env: reason`."""
    if path.startswith("env."):
        return f"--env {path.removeprefix('env.')}=…: {reason}"
    return f"--env: {reason}"
