"""`tether secrets set NAME | list | delete NAME`: the user's own secrets (e.g. `HF_TOKEN`).

One `secrets` group serves two kinds of secret that cannot be confused: `vast` and `cloudflare`
(lower case) are the control plane's account keys under /tether/account/ (`account_secrets.py`);
a user secret's name is an upper-case environment-variable name (`HF_TOKEN`), the name a spec
lists under `secrets:` and the variable the training command gets. User secrets are SSM Parameter
Store SecureStrings under `/tether/secrets/` (standard tier: free at rest; docs/deploy.md).
The value comes from a hidden prompt or stdin, never an argument; `list` prints names only.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from typing import Any

from functions.domain.jobspec import RESERVED_ENV_PREFIXES
from functions.domain.secrets import (
    MAX_SECRET_BYTES,
    parameter_name,
    secret_name_of,
    secret_name_problem,
)
from functions.domain.secrets import SECRET_PREFIX as SECRET_PREFIX
from tether_cli import output
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


def _ssm(region: str) -> Any:
    import boto3

    return boto3.client("ssm", region_name=region)


def _calling(action: str, call: Callable[[], Any]) -> Any:
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return call()
    except NoCredentialsError:
        raise CliError("no AWS credentials found: configure them first", EXIT_FAILURE) from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") == "ParameterNotFound":
            raise CliError(f"cannot {action}: no such secret", EXIT_FAILURE) from None
        raise CliError(f"cannot {action}: {error.get('Message', str(exc))}", EXIT_FAILURE) from None
    except BotoCoreError as exc:
        raise CliError(f"cannot {action}: {exc}", EXIT_FAILURE) from None


def set_secret(name: str, value: str, region: str) -> int:
    reply = _calling(
        f"store {name}",
        lambda: _ssm(region).put_parameter(
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


def list_secrets(region: str) -> list[str]:
    found: list[str] = []
    token: str | None = None
    client = _ssm(region)
    while True:
        extra = {"NextToken": token} if token else {}
        reply = _calling(
            "list secrets",
            lambda extra=extra: client.get_parameters_by_path(  # type: ignore[misc]
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


def delete_secret(name: str, region: str) -> None:
    _calling(f"delete {name}", lambda: _ssm(region).delete_parameter(Name=parameter_name(name)))


def run_set(args: argparse.Namespace, region: str) -> int:
    name = check_name(args.name)
    version = set_secret(name, read_secret_value(name), region)
    if args.json:
        output.print_json({"secret": name, "version": version})
    else:
        output.stdout_console().print(f"stored secret {name} in {region} (version {version})")
    return EXIT_OK


def run_list(args: argparse.Namespace, region: str) -> int:
    found = list_secrets(region)
    if args.json:
        output.print_json({"secrets": found})
    else:
        console = output.stdout_console()
        for name in found:
            console.print(name)
        if not found:
            console.print("no secrets stored (store one with `tether secrets set NAME`)")
    return EXIT_OK


def run_delete(args: argparse.Namespace, region: str) -> int:
    name = check_name(args.name)
    delete_secret(name, region)
    if args.json:
        output.print_json({"deleted": name})
    else:
        output.stdout_console().print(f"deleted secret {name} in {region}")
    return EXIT_OK
