"""Which AWS the CLI talks to, and as whom: one region rule for every command, the user's
credentials for AWS, the local stack's own for `--local`, and one line for each way AWS can be
missing.

The region (`resolve_region`, every command that reaches AWS: deploy, destroy, secrets and the
job commands): `--region`, else `AWS_REGION` (the CDK CLI's first choice), else
`AWS_DEFAULT_REGION` (boto3's), else the AWS config's profile.

Who: the user's credentials from boto3's default chain (environment, `AWS_PROFILE`, SSO,
instance role), looked for before the region, so a machine with neither is told about the
credentials first. `--local` never reads them: the local stack's API front checks the shape of
a SigV4 signature, not the signature (docs/local-stack.md#authentication-locally), and its moto
takes any key, so the CLI signs with `LOCAL_CREDENTIALS` and reads no AWS config at all.

What went wrong (`aws_failure`): no credentials, an unknown profile, credentials AWS refuses, no
region, a region AWS does not know, no network: each one line with the fix, never botocore's
"You must specify a region." or "Could not connect to the endpoint URL".
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.credentials import ReadOnlyCredentials

from tether_cli.output import EXIT_FAILURE, EXIT_USAGE, CliError

REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
# Where a region can come from, in the order the CDK CLI reads them (boto3 reads only the second).
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")

# The key the CLI signs with against the local stack (its front checks SigV4's shape, not its
# signature; its moto takes any key): every `--local` command, `tether demo`, `tether rehearse`.
LOCAL_CREDENTIALS = ReadOnlyCredentials("AKIDLOCALDEMO", "local-demo-secret", None)
LOCAL_REGION = "us-east-1"  # the local stack's moto region (tether_local.aws.local_aws)
LOCAL_UP_HINT = "start it with `tether local up` (it serves until Ctrl-C)"

NO_CREDENTIALS = (
    "no AWS credentials found: configure them (`aws configure`, AWS_PROFILE, or "
    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), or try tether without AWS: `tether local up`, "
    "then add --local to each command"
)
NO_REGION = "no AWS region: pass --region, set AWS_REGION, or `aws configure set region …`"
# Error codes with which AWS refuses the caller's credentials themselves.
REFUSED_CREDENTIALS = frozenset(
    {
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidAccessKeyId",
        "AuthFailure",
    }
)


# --- the region --------------------------------------------------------------------------------


def region_choice(
    given: str | None,
    environ: Mapping[str, str] | None = None,
    configured: Callable[[], str | None] | None = None,
) -> tuple[str, str] | None:
    """(region, where it came from) by the one rule, or None when no source names one."""
    env = os.environ if environ is None else environ
    if given:
        return given, "--region"
    for variable in REGION_VARIABLES:
        value = env.get(variable, "").strip()
        if value:
            if not REGION.match(value):
                raise CliError(f"{variable}: not an AWS region name (like eu-west-1): {value!r}")
            return value, variable
    region = (configured or profile_region)()
    if region:
        return region, f"profile {env.get('AWS_PROFILE') or 'default'} in the AWS config"
    return None


def resolve_region(
    given: str | None,
    environ: Mapping[str, str] | None = None,
    configured: Callable[[], str | None] | None = None,
) -> tuple[str, str]:
    """(region, where it came from): `--region`, else AWS_REGION, else AWS_DEFAULT_REGION, else
    the AWS config's profile; a CliError (exit 2) when none."""
    choice = region_choice(given, environ, configured)
    if choice is None:
        raise CliError(NO_REGION, EXIT_USAGE)
    return choice


def profile_region() -> str | None:
    return _session_region(user_session())


def region_argument(text: str) -> str:
    """argparse type of `--region`: a region's shape (whether AWS knows it is found on use)."""
    if not REGION.match(text):
        raise argparse.ArgumentTypeError(f"not an AWS region name (like eu-west-1): {text!r}")
    return text


def known_region(region: str) -> bool:
    """Whether this botocore's endpoint data lists `region` in any AWS partition."""
    import botocore.session

    endpoints = botocore.session.get_session().get_data("endpoints")
    return any(region in partition.get("regions", {}) for partition in endpoints["partitions"])


# --- the user's AWS ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AwsAccess:
    """The user's AWS session in the resolved region, with where the region came from."""

    session: Any  # boto3.session.Session
    region: str
    region_source: str

    def client(self, service: str, **kwargs: Any) -> Any:
        return self.session.client(service, region_name=self.region, **kwargs)


def aws_access(given_region: str | None, environ: Mapping[str, str] | None = None) -> AwsAccess:
    """The user's credentials (checked first), then the region by the one rule."""
    session = user_session()
    user_credentials(session)
    region, source = resolve_region(given_region, environ, lambda: _session_region(session))
    return AwsAccess(session, region, source)  # one session: its credentials resolved once


def user_session(region: str | None = None) -> Any:
    """boto3's default session (in `region`); an unknown AWS_PROFILE is one line."""
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        return boto3.session.Session(region_name=region)
    except BotoCoreError as exc:
        raise aws_failure(exc) from None


def user_credentials(session: Any = None) -> ReadOnlyCredentials:
    """The default chain's credentials, frozen; a CliError saying how to get some when none."""
    from botocore.exceptions import BotoCoreError

    try:
        found = (session or user_session()).get_credentials()
        frozen = found.get_frozen_credentials() if found is not None else None
    except BotoCoreError as exc:  # an unknown AWS_PROFILE, a broken SSO cache, …
        raise aws_failure(exc) from None
    if frozen is None:
        raise CliError(NO_CREDENTIALS, EXIT_FAILURE)
    return frozen


def _session_region(session: Any) -> str | None:
    from botocore.exceptions import ProfileNotFound

    try:
        region: str | None = session.region_name
    except ProfileNotFound as exc:
        raise aws_failure(exc) from None
    return region


def aws_failure(
    exc: Exception, *, action: str = "", region: str | None = None, region_source: str = ""
) -> CliError:
    """One line for a botocore failure that says its cause and the fix. `action` ("read stack
    Tether") heads the lines that are not about the account or the region."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ProfileNotFound,
    )

    head = f"cannot {action}: " if action else ""
    if isinstance(exc, NoCredentialsError):
        return CliError(NO_CREDENTIALS, EXIT_FAILURE)
    if isinstance(exc, PartialCredentialsError):
        return CliError(f"incomplete AWS credentials: {exc}", EXIT_FAILURE)
    if isinstance(exc, ProfileNotFound):
        profile = exc.kwargs.get("profile", "?")
        return CliError(
            f"AWS profile {profile!r} is not in your AWS config: create it (`aws configure "
            f"--profile {profile}`) or set AWS_PROFILE to one that exists",
            EXIT_FAILURE,
        )
    if isinstance(exc, NoRegionError):
        return CliError(NO_REGION, EXIT_USAGE)
    if isinstance(exc, EndpointConnectionError):
        if region and not known_region(region):
            source = f" (from {region_source})" if region_source else ""
            return CliError(
                f"{region!r}{source} is not an AWS region: pass --region with a real one, "
                "e.g. eu-west-1",
                EXIT_USAGE,
            )
        return CliError(
            f"{head}could not reach AWS at {exc.kwargs.get('endpoint_url', '?')}: check the "
            "network (or a proxy)",
            EXIT_FAILURE,
        )
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code, message = str(error.get("Code", "")), str(error.get("Message", exc))
        if code in REFUSED_CREDENTIALS:
            return CliError(
                f"AWS refused your credentials ({code}: {message}): refresh them "
                "(`aws sso login`, `aws configure`) or check AWS_PROFILE",
                EXIT_FAILURE,
            )
        return CliError(f"{head}{message}", EXIT_FAILURE)
    return CliError(f"{head}{exc}", EXIT_FAILURE)


# --- the local stack's AWS ---------------------------------------------------------------------


def local_client(service: str, endpoint_url: str) -> Any:
    """A boto3 client for the local stack's moto at `endpoint_url`, with the local stack's key
    and region: no AWS config, profile or environment credential of the user's is read."""
    import boto3
    import botocore.session

    isolated = botocore.session.Session(
        session_vars={
            "profile": (None, None, None, None),
            "config_file": (None, None, os.devnull, None),
            "credentials_file": (None, None, os.devnull, None),
        }
    )
    session = boto3.session.Session(
        botocore_session=isolated,
        aws_access_key_id=LOCAL_CREDENTIALS.access_key,
        aws_secret_access_key=LOCAL_CREDENTIALS.secret_key,
        region_name=LOCAL_REGION,
    )
    return session.client(service, endpoint_url=endpoint_url)
