"""`tether secrets set vast | cloudflare`: the control plane's account keys, SSM SecureString
parameters (`provider_keys.py`).

The values are prompted for without echo (or read from stdin when it is not a terminal),
checked, and written with `PutParameter` (overwriting the placeholder `tether deploy` created);
they never reach argv or a log. An upper-case name is a user's own secret (`user_secrets.py`).
"""

from __future__ import annotations

import argparse
import getpass
import json
import re
import sys
from collections.abc import Callable, Sequence

from infra import names
from tether_cli import aws_context, output, provider_keys, user_secrets
from tether_cli.output import EXIT_OK, EXIT_USAGE, CliError

BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
CLOUDFLARE_ID = re.compile(r"^[0-9a-f]{32}$")


def read_values(
    prompts: Sequence[tuple[str, bool]],
    *,
    stdin_is_tty: bool | None = None,
    prompt: Callable[[str], str] = getpass.getpass,
    ask: Callable[[str], str] = input,
) -> list[str]:
    """One value per (label, secret) prompt: hidden for secrets; from stdin lines without a TTY."""
    tty = sys.stdin.isatty() if stdin_is_tty is None else stdin_is_tty
    if not tty:
        lines = sys.stdin.read().splitlines()
        if len(lines) < len(prompts):
            labels = ", ".join(label for label, _ in prompts)
            raise CliError(f"stdin: expected {len(prompts)} line(s): {labels}")
        return [line.strip() for line in lines[: len(prompts)]]
    return [
        (prompt if secret else ask)(f"{label}{' (hidden)' if secret else ''}: ").strip()
        for label, secret in prompts
    ]


def vast_secret(values: Sequence[str]) -> str:
    (key,) = values
    if not key or any(c.isspace() for c in key) or key == names.SECRET_PLACEHOLDER:
        raise CliError("Vast API key: must be the key from https://cloud.vast.ai/account/")
    return key


def cloudflare_secret(values: Sequence[str]) -> str:
    account_id, api_token, parent_key, bucket = values
    problems = []
    if not CLOUDFLARE_ID.match(account_id):
        problems.append("account_id: must be the 32 hex digits of your Cloudflare account id")
    if not api_token or any(c.isspace() for c in api_token):
        problems.append("api_token: must be a Cloudflare API token (no spaces)")
    if not CLOUDFLARE_ID.match(parent_key):
        problems.append(
            "parent_access_key_id: must be the 32 hex digit access key id of an R2 token"
        )
    if not BUCKET.match(bucket):
        problems.append("bucket: must be an R2 bucket name (3–63 of a-z, 0-9, -)")
    if problems:
        raise CliError("the Cloudflare settings are not valid:", EXIT_USAGE, problems)
    return json.dumps(
        dict(zip(names.CLOUDFLARE_SECRET_FIELDS, values, strict=True)), separators=(",", ":")
    )


PROMPTS: dict[str, tuple[list[tuple[str, bool]], Callable[[Sequence[str]], str]]] = {
    "vast": ([("Vast API key", True)], vast_secret),
    "cloudflare": (
        [
            ("Cloudflare account id", False),
            ("Cloudflare API token (R2 temporary credentials)", True),
            ("R2 parent access key id", False),
            ("R2 bucket", False),
        ],
        cloudflare_secret,
    ),
}


def run_secrets_set(args: argparse.Namespace) -> int:
    if args.which not in PROMPTS:  # an upper-case name: the user's own secret
        user_secrets.check_name(args.which)
        args.name = args.which
        return user_secrets.run_set(args)
    if getattr(args, "local", False):
        raise CliError(
            f"--local: the local stack's {args.which} key is its simulator's own (`tether local "
            "up` stores it); --local stores job secrets only (HF_TOKEN…)",
            EXIT_USAGE,
        )
    parameter, _ = provider_keys.KEYS[args.which]
    prompts, build = PROMPTS[args.which]
    access = aws_context.aws_access(args.region)  # before the prompts
    region = access.region
    value = build(read_values(prompts))
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        version = provider_keys.store(access.client("ssm"), args.which, value)
    except (BotoCoreError, ClientError) as exc:
        raise aws_context.aws_failure(
            exc, action=f"write {parameter}", region=region, region_source=access.region_source
        ) from None
    if args.json:
        output.print_json({"secret": parameter, "version": version})
    else:
        output.stdout_console().print(
            f"stored {parameter} in {region} (SSM SecureString, version {version})"
        )
    return EXIT_OK
