"""User secrets (docs/job-spec.md#secrets): the names a spec may list, where their values live, and
the warning for `env` values that look like tokens.

Values live in SSM Parameter Store as standard-tier SecureStrings under `SECRET_PREFIX` (free at
rest; Secrets Manager would cost $0.40 per secret a month, see docs/deploy.md). A spec names
them (`secrets: [HF_TOKEN]`); the heartbeat reply to the current generation carries the values,
never the table, a job view, the host's instance environment or the onstart script.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping

SECRET_PREFIX = "/tether/secrets/"  # noqa: S105 (a path) - the parameter of HF_TOKEN is /tether/secrets/HF_TOKEN
MAX_SECRETS = 32  # names one spec may list
MAX_SECRET_BYTES = 4096  # a standard-tier parameter's limit
# Upper-case environment-variable names: disjoint from the account's own `vast` / `cloudflare`.
SECRET_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
NAME_RULE = "upper-case letters, digits and _, not starting with a digit, at most 128"

# `env` names and values that look like a credential (a warning, never an error).
_SECRETISH_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|PRIVATE_?KEY|CREDENTIAL")
_TOKEN_PREFIXES = ("hf_", "sk-", "ghp_", "gho_", "github_pat_", "xox", "AKIA", "ASIA", "glpat-")
_HIGH_ENTROPY_MIN_LENGTH = 24
_HIGH_ENTROPY_BITS = 3.5  # per character: random base64/hex-ish text, not words or paths


def secret_name_problem(name: str, reserved_prefixes: tuple[str, ...] = ()) -> str | None:
    """Why `name` cannot be a user secret's name; None when it can."""
    if not SECRET_NAME.match(name):
        return f"{name!r} is not a valid secret name ({NAME_RULE})"
    if name.startswith(reserved_prefixes):
        return f"{name!r} is reserved for tether (prefixes {', '.join(reserved_prefixes)})"
    return None


def parameter_name(name: str) -> str:
    return SECRET_PREFIX + name


def secret_name_of(parameter: str) -> str | None:
    """`/tether/secrets/HF_TOKEN` → `HF_TOKEN`; None for a parameter outside the prefix."""
    if not parameter.startswith(SECRET_PREFIX):
        return None
    name = parameter[len(SECRET_PREFIX) :]
    return name if SECRET_NAME.match(name) else None


def _entropy_bits(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def looks_like_token(name: str, value: str) -> str | None:
    """Why `env.name = value` looks like a credential that belongs in `secrets`; None if not."""
    if not value:
        return None
    if _SECRETISH_NAME.search(name.upper()):
        return f"its name {name!r} suggests a credential"
    if value.startswith(_TOKEN_PREFIXES):
        return "its value starts like an access token"
    if (
        len(value) >= _HIGH_ENTROPY_MIN_LENGTH
        and not any(c.isspace() for c in value)
        and "/" not in value
        and _entropy_bits(value) >= _HIGH_ENTROPY_BITS
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
    ):
        return "its value is a long random-looking string"
    return None


def token_warnings(env: Mapping[str, str]) -> list[str]:
    """One line per `env` entry that looks like a credential: a warning for validate/submit."""
    return [
        f"env.{name}: {why}; env is stored with the job and shown to anyone who can read it: "
        f"store it with `tether secrets set {name}` and list it under `secrets:` instead"
        for name, value in sorted(env.items())
        if (why := looks_like_token(name, value)) is not None
    ]
