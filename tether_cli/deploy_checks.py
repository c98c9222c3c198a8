"""What `tether deploy` and `destroy` check before they change anything: Node.js for the CDK
CLI, the one region (`--region`, else `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the AWS
config's profile) and the environment that gives it to the CDK CLI, working AWS credentials,
the CDK bootstrap, the tether checkout to synthesize from, and, for destroy, the jobs still
active."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from tether_cli.aws_context import REGION as REGION
from tether_cli.aws_context import REGION_VARIABLES
from tether_cli.aws_context import resolve_region as resolve_region
from tether_cli.output import EXIT_FAILURE, CliError

MIN_NODE_MAJOR = 22  # jsii (under the CDK) supports maintained Node.js releases only
# What a checkout has that an installed wheel lacks: synth builds the Lambda bundle from
# functions/ and the agent wheel from agent/, so deploy and destroy run from a clone.
SOURCE_MARKERS = ("infra/synth.py", "functions/requirements.txt", "agent/pyproject.toml")
BOOTSTRAP_PARAMETER = "/cdk-bootstrap/hnb659fds/version"  # the default CDK qualifier


def check_node(which: Callable[[str], str | None] = shutil.which) -> str:
    """The npx to run, or a CliError saying how to get Node.js."""
    npx, node = which("npx"), which("node")
    if not npx or not node:
        raise CliError(
            f"Node.js is needed for the CDK CLI: install Node.js {MIN_NODE_MAJOR}+ "
            "(https://nodejs.org) so that `node` and `npx` are on PATH",
            EXIT_FAILURE,
        )
    try:
        version = subprocess.run(
            [node, "--version"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise CliError(f"`node --version` failed: {exc}", EXIT_FAILURE) from None
    match = re.match(r"^v(\d+)\.", version)
    if not match or int(match.group(1)) < MIN_NODE_MAJOR:
        raise CliError(
            f"Node.js {MIN_NODE_MAJOR}+ is needed for the CDK CLI (found {version or '?'})",
            EXIT_FAILURE,
        )
    return npx


def region_environment(region: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the CDK CLI: the resolved region under both names it may read."""
    env = dict(os.environ if environ is None else environ)
    env.update({variable: region for variable in REGION_VARIABLES})
    return env


def check_aws(region: str) -> str:
    """The account id of the default credentials in `region`, or a CliError saying what is
    missing."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    session = boto3.session.Session(region_name=region)
    try:
        account = session.client("sts").get_caller_identity()["Account"]
    except NoCredentialsError:
        raise CliError(
            "no AWS credentials found: configure them (`aws configure`, AWS_PROFILE, or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
            EXIT_FAILURE,
        ) from None
    except (ClientError, BotoCoreError) as exc:
        raise CliError(f"AWS credentials do not work: {exc}", EXIT_FAILURE) from None
    return str(account)


def is_bootstrapped(region: str) -> bool:
    import boto3
    from botocore.exceptions import ClientError

    try:
        boto3.client("ssm", region_name=region).get_parameter(Name=BOOTSTRAP_PARAMETER)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
            return False
        raise
    return True


def source_root(start: Path | None = None) -> Path:
    """The tether checkout to synthesize from: the working directory or a folder above it, else
    the one this CLI was installed from in editable mode; a CliError when there is none."""
    here = (start or Path.cwd()).resolve()
    installed = Path(__file__).resolve().parent.parent
    for candidate in (here, *here.parents, installed):
        if all((candidate / marker).is_file() for marker in SOURCE_MARKERS):
            return candidate
    raise CliError(
        "deploy and destroy build the Lambda bundle and the agent wheel from tether's source: "
        "run them inside a clone of the repository (git clone …; cd tether; make venv)",
        EXIT_FAILURE,
    )


def active_jobs(region: str) -> list[str]:
    """Ids of jobs that are not in a terminal state; a CliError when the API cannot be asked
    (destroying then would leave any running host billing unwatched: --force skips the check)."""
    from functions.domain.job import ACTIVE_STATES
    from tether_cli.api_client import TetherApi, resolve_api_url, stack_outputs

    try:
        target = resolve_api_url(
            local=False, describe_stacks=lambda stack: stack_outputs(stack, region=region)
        )
        with TetherApi(target, region=region) as api:
            jobs = api.list_jobs(limit=200).get("jobs") or []
    except CliError as exc:
        raise CliError(
            f"not destroying: cannot check for active jobs ({exc.message}); a job still running "
            "would bill until its agent's lease runs out. Fix the access, or pass --force to "
            "destroy without checking",
            EXIT_FAILURE,
        ) from None
    active = {s.value for s in ACTIVE_STATES}
    return [str(j["job_id"]) for j in jobs if j.get("state") in active]
