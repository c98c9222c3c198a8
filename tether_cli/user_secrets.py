"""`tether secrets set NAME | list | delete NAME`: the user's own secrets (e.g. `HF_TOKEN`).

One `secrets` group serves two kinds of secret that cannot be confused: `vast` and `cloudflare`
(lower case) are the control plane's account keys under /tether/account/ (`account_secrets.py`);
a user secret's name is an upper-case environment-variable name (`HF_TOKEN`), the name a spec
lists under `secrets:` and the variable the training command gets. User secrets are SSM Parameter
Store SecureStrings under `/tether/secrets/` (standard tier: free at rest; docs/deploy.md).
The value comes from a hidden prompt or stdin, never an argument; `list` prints names only.

Where: the user's AWS account in the region of the one rule (`aws_context.resolve_region`), or,
with `--local`, the local stack's SSM (its moto, found through the state file `tether local up`
writes), under the same parameter names, with the local stack's own key: no AWS account needed.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from functions.domain.jobspec import RESERVED_ENV_PREFIXES
from functions.domain.secrets import (
    MAX_SECRET_BYTES,
    parameter_name,
    secret_name_of,
    secret_name_problem,
)
from functions.domain.secrets import SECRET_PREFIX as SECRET_PREFIX
from tether_cli import aws_context, output
from tether_cli.api_client import local_aws_url
from tether_cli.output import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError


def check_name(name: str) -> str:
    problem = secret_name_problem(name, RESERVED_ENV_PREFIXES)
    if problem:
        raise CliError(
            f"secrets: {problem}; `vast` and `cloudflare` are the control plane's own keys",
            EXIT_USAGE,
        )
    return name


def read_secret_value(
    name: str,
    *,
    stdin_is_tty: bool | None = None,
    prompt: Callable[[str], str] = getpass.getpass,
) -> str:
    """The value: a hidden prompt on a terminal, else all of stdin less one trailing newline."""
    tty = sys.stdin.isatty() if stdin_is_tty is None else stdin_is_tty
    value = prompt(f"{name} (hidden): ") if tty else sys.stdin.read()
    value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise CliError(f"{name}: the value is empty", EXIT_USAGE)
    if len(value.encode()) > MAX_SECRET_BYTES:
        raise CliError(f"{name}: the value is over {MAX_SECRET_BYTES} bytes", EXIT_USAGE)
    return value


@dataclass(frozen=True)
class SecretPlace:
    """The SSM that holds the user's secrets, and how to say where it is."""

    ssm: Any  # a boto3 SSM client
    where: str  # "in eu-west-1", "in the local stack"
    region: str | None = None  # AWS's, for naming an unknown region
    region_source: str = ""
    local: bool = False


def secret_place(args: argparse.Namespace) -> SecretPlace:
    """The local stack's SSM with `--local`; else the user's, in the resolved region."""
    if getattr(args, "local", False):
        return SecretPlace(
            aws_context.local_client("ssm", local_aws_url()), "in the local stack", local=True
        )
    access = aws_context.aws_access(getattr(args, "region", None))
    return SecretPlace(
        access.client("ssm"),
        f"in {access.region}",
        region=access.region,
        region_source=access.region_source,
    )


def _calling(place: SecretPlace, action: str, call: Callable[[], Any]) -> Any:
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

    try:
        return call()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
            raise CliError(f"cannot {action}: no such secret", EXIT_FAILURE) from None
        raise aws_context.aws_failure(
            exc, action=action, region=place.region, region_source=place.region_source
        ) from None
    except BotoCoreError as exc:
        if place.local and isinstance(exc, EndpointConnectionError):
            raise CliError(
                f"cannot {action}: no local stack is running (its state file is stale): "
                + aws_context.LOCAL_UP_HINT,
                EXIT_FAILURE,
            ) from None
        raise aws_context.aws_failure(
            exc, action=action, region=place.region, region_source=place.region_source
        ) from None


def set_secret(place: SecretPlace, name: str, value: str) -> int:
    reply = _calling(
        place,
        f"store {name}",
        lambda: place.ssm.put_parameter(
            Name=parameter_name(name),
            Value=value,
            Type="SecureString",
            Tier="Standard",
            Overwrite=True,
            Description="tether user secret",
        ),
    )
    version: int = reply.get("Version", 0)
    return version


def list_secrets(place: SecretPlace) -> list[str]:
    found: list[str] = []
    token: str | None = None
    while True:
        extra = {"NextToken": token} if token else {}
        reply = _calling(
            place,
            "list secrets",
            lambda extra=extra: place.ssm.get_parameters_by_path(  # type: ignore[misc]
                Path=SECRET_PREFIX.rstrip("/"), WithDecryption=False, **extra
            ),
        )
        for parameter in reply.get("Parameters", []):
            name = secret_name_of(parameter["Name"])
            if name:
                found.append(name)
        token = reply.get("NextToken")
        if not token:
            return sorted(found)


def delete_secret(place: SecretPlace, name: str) -> None:
    _calling(place, f"delete {name}", lambda: place.ssm.delete_parameter(Name=parameter_name(name)))


def run_set(args: argparse.Namespace) -> int:
    name = check_name(args.name)
    place = secret_place(args)  # before the prompt: no value typed for nowhere to store it
    version = set_secret(place, name, read_secret_value(name))
    if args.json:
        output.print_json({"secret": name, "version": version})
    else:
        output.stdout_console().print(f"stored secret {name} {place.where} (version {version})")
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    found = list_secrets(secret_place(args))
    if args.json:
        output.print_json({"secrets": found})
    else:
        console = output.stdout_console()
        for name in found:
            console.print(name)
        if not found:
            flag = " --local" if getattr(args, "local", False) else ""
            console.print(f"no secrets stored (store one with `tether secrets set NAME{flag}`)")
    return EXIT_OK


def run_delete(args: argparse.Namespace) -> int:
    name = check_name(args.name)
    place = secret_place(args)
    delete_secret(place, name)
    if args.json:
        output.print_json({"deleted": name})
    else:
        output.stdout_console().print(f"deleted secret {name} {place.where}")
    return EXIT_OK
