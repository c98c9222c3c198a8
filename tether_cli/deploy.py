"""`tether deploy | destroy | secrets`: the stack in the user's AWS account.

`deploy` and `destroy` synthesize the app (`python -m infra.synth`, as `make synth`) and run a
pinned CDK CLI through `npx`; every prerequisite is checked first with a message that says what
to install or configure (`deploy_checks.py`). The region is resolved once (`--region`, else
`AWS_REGION`, else `AWS_DEFAULT_REGION`, else the AWS config's profile), used for every boto3
call and given to the CDK CLI as both variables, so the checks and the deploy cannot land in
different regions. Before each deploy the provider keys' SSM parameters are created if missing
(moving an older stack's Secrets Manager secrets over: `provider_keys.py`). `secrets set
vast|cloudflare` is `account_secrets.py`; a user's own secrets are `user_secrets.py`.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from functions.domain.shards import MAX_SHARDS
from infra import names
from infra.concurrency import MONITOR_RUNS_PER_SHARD, RESERVABLE
from tether_cli import output, provider_keys, user_secrets
from tether_cli.account_secrets import run_secrets_set
from tether_cli.deploy_checks import (
    BOOTSTRAP_PARAMETER,
    REGION,
    SOURCE_MARKERS,
    active_jobs,
    check_aws,
    check_node,
    is_bootstrapped,
    region_environment,
    resolve_region,
    source_root,
)
from tether_cli.output import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError

__all__ = [  # the checks are named here too: tests and callers reach them as `deploy.…`
    "BOOTSTRAP_PARAMETER",
    "SOURCE_MARKERS",
    "active_jobs",
    "check_aws",
    "check_node",
    "deploy_parameters",
    "is_bootstrapped",
    "next_steps",
    "region_environment",
    "register",
    "resolve_region",
    "run_command",
    "run_deploy",
    "run_destroy",
    "source_root",
    "synth",
]

CDK_CLI = "aws-cdk@2.1148.1"  # the same pin as docs/deploy.md
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")

Runner = Callable[..., int]


def _run(
    command: Sequence[str], cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> int:
    """Run a step with its output on the terminal (CDK's progress is the user's feedback)."""
    try:
        environ = None if env is None else dict(env)
        return subprocess.run(list(command), check=False, cwd=cwd, env=environ).returncode
    except FileNotFoundError:
        raise CliError(f"{command[0]}: not found", EXIT_FAILURE) from None


run_command: Runner = _run  # the seam for tests


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    deploy = subparsers.add_parser(
        "deploy",
        help="deploy (or update) the tether stack in your AWS account",
        description="Synthesize and deploy the tether stack with a pinned CDK CLI (npx). Needs "
        "Node.js, AWS credentials and a region; --bootstrap prepares a new account/region.",
    )
    _region_argument(deploy)
    deploy.add_argument(
        "--alarm-email",
        "--email",
        dest="email",
        type=_email,
        help="send alarms and job notifications to this address (the AlarmEmail parameter)",
    )
    deploy.add_argument(
        "--heartbeat-rate",
        type=_limit(names.ACCOUNT_RATE_LIMIT),
        metavar="RPS",
        help="the heartbeat route's throttle, requests a second (default 50: about 75 agents "
        "at a 15 s interval, with tenfold headroom; see docs/deploy.md#throttles)",
    )
    deploy.add_argument(
        "--heartbeat-burst",
        type=_limit(names.ACCOUNT_BURST_LIMIT),
        metavar="N",
        help="the heartbeat route's burst, requests at once (default 100)",
    )
    deploy.add_argument(
        "--monitor-shards",
        type=_limit(MAX_SHARDS, "shards"),
        metavar="N",
        help="split the fleet across N monitor schedules (1 to 16; default: what the deployed "
        "stack has, else 1; see docs/deploy.md#monitor-shards-large-fleets)",
    )
    deploy.add_argument(
        "--dashboard",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--no-dashboard leaves the CloudWatch dashboard out ($3 a month beyond an "
        "account's 3 free dashboards; the alarms stay); default: what the deployed stack has, "
        "else a dashboard (see docs/observability.md)",
    )
    for setting in CONCURRENCY_SETTINGS:
        deploy.add_argument(
            setting.flag,
            type=_limit(RESERVABLE, "concurrent executions"),
            metavar="N",
            help=f"the {setting.function} function's reserved concurrency (default: what the "
            "deployed stack has, else tether's; see docs/deploy.md#reserved-concurrency)",
        )
    deploy.add_argument(
        "--bootstrap",
        action="store_true",
        help="run `cdk bootstrap` first if this account/region is not bootstrapped",
    )
    deploy.add_argument("--json", action="store_true", help="print the stack outputs as JSON")
    deploy.set_defaults(handler=run_deploy)

    destroy = subparsers.add_parser(
        "destroy",
        help="delete the tether stack (the job table and checkpoints are kept)",
        description="Delete the tether stack. The DynamoDB table is retained (a redeploy creates "
        "a new, empty one), the provider keys in SSM are kept, and R2 is not touched. "
        "Refuses while jobs are active, or when it cannot check, unless --force.",
    )
    _region_argument(destroy)
    destroy.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    destroy.add_argument(
        "--force",
        action="store_true",
        help="destroy even while jobs are still active, or without checking for them",
    )
    destroy.add_argument("--json", action="store_true", help="print the result as JSON")
    destroy.set_defaults(handler=run_destroy)

    secrets = subparsers.add_parser(
        "secrets",
        help="your job secrets (HF_TOKEN…) and the control plane's Vast/Cloudflare keys",
        description="`set NAME` with an upper-case name (HF_TOKEN) stores a secret a job spec "
        f"may list under `secrets:` (an SSM Parameter Store SecureString under "
        f"{user_secrets.SECRET_PREFIX}, delivered only to the job's current host). `set vast` / "
        f"`set cloudflare` store the control plane's account keys as SSM Parameter Store "
        f"SecureStrings ({names.VAST_KEY_PARAMETER}, {names.CLOUDFLARE_PARAMETER}; never on a "
        "rented host).",
    )
    actions = secrets.add_subparsers(title="actions", metavar="ACTION", dest="secrets_action")
    set_ = actions.add_parser(
        "set",
        help="prompt for a secret (no echo) and store it",
        description="NAME (upper case, e.g. HF_TOKEN): a job secret; the value comes from a "
        "hidden prompt or stdin, never an argument. vast: your Vast.ai API key. cloudflare: "
        "account id, an API token that can create R2 temporary credentials, the access key "
        "id of an R2 token (the parent), and "
        "the bucket. Prompts without echo; reads one value per line from stdin when it is "
        "not a terminal.",
    )
    set_.add_argument(
        "which", metavar="NAME", help="a job secret's name (HF_TOKEN), or vast | cloudflare"
    )
    _region_argument(set_)
    _local_argument(set_)
    set_.add_argument("--json", action="store_true", help="print the result as JSON")
    set_.set_defaults(handler=run_secrets_set)
    list_ = actions.add_parser(
        "list", help="the names of your job secrets", description="Names only, never values."
    )
    _region_argument(list_)
    _local_argument(list_)
    list_.add_argument("--json", action="store_true", help="print the result as JSON")
    list_.set_defaults(handler=user_secrets.run_list)
    delete = actions.add_parser("delete", help="delete a job secret", description="By name.")
    delete.add_argument("name", metavar="NAME", help="the job secret's name, e.g. HF_TOKEN")
    _region_argument(delete)
    _local_argument(delete)
    delete.add_argument("--json", action="store_true", help="print the result as JSON")
    delete.set_defaults(handler=user_secrets.run_delete)
    secrets.set_defaults(handler=_missing_action)


def _missing_action(_args: argparse.Namespace) -> int:
    raise CliError("secrets: name an action, e.g. `tether secrets set vast` (see --help)")


def _region_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--region",
        type=_region,
        help="the AWS region (default: AWS_REGION, else AWS_DEFAULT_REGION, else your AWS "
        "config's profile)",
    )


def _local_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--local",
        action="store_true",
        help="the job secrets of `tether local up` instead of your AWS account's",
    )


def _region(text: str) -> str:
    if not REGION.match(text):
        raise argparse.ArgumentTypeError(f"not an AWS region name (like eu-west-1): {text!r}")
    return text


def _limit(maximum: int, what: str = "") -> Callable[[str], int]:
    """A whole number from 1 to `maximum` (a throttle: API Gateway's default account quota)."""

    def parse(text: str) -> int:
        if not text.isdigit() or not 1 <= int(text) <= maximum:
            unit = f" of {what}" if what else ""
            raise argparse.ArgumentTypeError(f"must be a whole number{unit} from 1 to {maximum}")
        return int(text)

    return parse


def _email(text: str) -> str:
    if not EMAIL.match(text):
        raise argparse.ArgumentTypeError(f"not an e-mail address: {text!r}")
    return text


def synth(
    root: Path,
    monitor_shards: int | None = None,
    concurrency: Mapping[str, int] | None = None,
    dashboard: bool | None = None,
) -> Path:
    """Synthesize the clone at `root` into `root/cdk.out` (its own infra, functions and agent:
    `python -m` puts the working directory first on the import path), with `monitor_shards`
    monitor schedules if given (a synth-time setting: `TETHER_MONITOR_SHARDS`) and the reserved
    concurrency in `concurrency` (environment variable → number), and with or without the
    dashboard (`TETHER_DASHBOARD`) if given."""
    out = root / "cdk.out"
    settings: dict[str, int | str] = dict(concurrency or {})
    if monitor_shards is not None:
        settings[names.MONITOR_SHARDS_ENV] = monitor_shards
    if dashboard is not None:
        settings[names.DASHBOARD_ENV] = "true" if dashboard else "false"
    env = {**os.environ, **{k: str(v) for k, v in settings.items()}} if settings else None
    command = [sys.executable, "-m", "infra.synth", "--out", str(out)]
    code = run_command(command, cwd=root, env=env)
    if code != 0:
        raise CliError(f"synthesis failed (exit {code}); see the output above", EXIT_FAILURE)
    return out


def cdk(npx: str, *args: str) -> list[str]:
    return [npx, "--yes", CDK_CLI, *args]


# --- deploy / destroy ------------------------------------------------------------------------


def deploy_parameters(args: argparse.Namespace) -> list[str]:
    """`--parameters` for the values given; the stack keeps earlier values of the others (CDK
    deploys with `--previous-parameters`), so a raised throttle stays raised."""
    given = {
        "AlarmEmail": args.email,
        names.HEARTBEAT_RATE_PARAMETER: args.heartbeat_rate,
        names.HEARTBEAT_BURST_PARAMETER: args.heartbeat_burst,
    }
    out: list[str] = []
    for key, value in given.items():
        if value is not None and value != "":
            out += ["--parameters", f"{key}={value}"]
    return out


def monitor_shards(
    given: int | None, environ: Mapping[str, str], deployed: Mapping[str, str]
) -> tuple[int, str]:
    """How many monitor shards to deploy, and why: `--monitor-shards`, else
    `TETHER_MONITOR_SHARDS`, else what the deployed stack has (a synth-time setting, unlike the
    stack's parameters, so a plain redeploy must not quietly fold a sharded fleet into one),
    else 1."""
    if given is not None:
        return given, "--monitor-shards"
    for value, source in (
        (environ.get(names.MONITOR_SHARDS_ENV), names.MONITOR_SHARDS_ENV),
        (deployed.get(names.OUTPUT_MONITOR_SHARDS), "the deployed stack"),
    ):
        if value:
            try:
                return _limit(MAX_SHARDS, "shards")(value), source
            except argparse.ArgumentTypeError as exc:
                raise CliError(f"{source}: {value!r} {exc}", EXIT_USAGE) from None
    return 1, "the default"


def dashboard_setting(
    given: bool | None, environ: Mapping[str, str], deployed: Mapping[str, str]
) -> tuple[bool, str]:
    """Whether to deploy the dashboard, and why: `--dashboard`/`--no-dashboard`, else
    `TETHER_DASHBOARD`, else what the deployed stack has (a synth-time setting, like the shard
    count: a plain redeploy keeps a dashboard left out), else on."""
    if given is not None:
        return given, "--dashboard" if given else "--no-dashboard"
    for value, source in (
        (environ.get(names.DASHBOARD_ENV), names.DASHBOARD_ENV),
        (deployed.get(names.OUTPUT_DASHBOARD), "the deployed stack"),
    ):
        if value:
            try:
                return names.dashboard_wanted(value), source
            except ValueError:
                raise CliError(f"{source}: {value!r} is not true or false", EXIT_USAGE) from None
    return True, "the default"


@dataclass(frozen=True)
class ConcurrencySetting:
    """One function's reserved concurrency as `tether deploy` takes it (infra/concurrency.py)."""

    function: str
    flag: str
    env: str
    output: str


CONCURRENCY_SETTINGS = (
    ConcurrencySetting(
        "monitor", "--monitor-concurrency", names.MONITOR_CONCURRENCY_ENV,
        names.OUTPUT_MONITOR_CONCURRENCY,
    ),
    ConcurrencySetting(
        "lifecycle", "--lifecycle-concurrency", names.LIFECYCLE_CONCURRENCY_ENV,
        names.OUTPUT_LIFECYCLE_CONCURRENCY,
    ),
    ConcurrencySetting(
        "heartbeat", "--heartbeat-concurrency", names.HEARTBEAT_CONCURRENCY_ENV,
        names.OUTPUT_HEARTBEAT_CONCURRENCY,
    ),
    ConcurrencySetting(
        "jobs", "--jobs-concurrency", names.JOBS_CONCURRENCY_ENV, names.OUTPUT_JOBS_CONCURRENCY
    ),
)  # fmt: skip


def reserved_concurrency(
    args: argparse.Namespace, environ: Mapping[str, str], deployed: Mapping[str, str]
) -> tuple[dict[str, int], list[str]]:
    """The reserved concurrency to synthesize with (environment variable → number) and a line
    per function saying where it came from: the flag, else the environment variable, else what
    the deployed stack has (a synth-time setting like the shard count: a plain redeploy keeps a
    raised one), else tether's default (left out: infra/concurrency.py decides). The deployed
    monitor number is kept only where it was not the default for the deployed shard count, so
    a new shard count brings its own default."""
    chosen: dict[str, int] = {}
    lines: list[str] = []
    old_shards = deployed.get(names.OUTPUT_MONITOR_SHARDS, "")
    for setting in CONCURRENCY_SETTINGS:
        given = getattr(args, setting.flag[2:].replace("-", "_"), None)
        kept = deployed.get(setting.output)
        if (
            setting.function == "monitor"
            and kept
            and old_shards.isdigit()
            and kept == str(MONITOR_RUNS_PER_SHARD * int(old_shards))
        ):
            kept = None
        candidates = (
            (str(given) if given is not None else None, setting.flag),
            (environ.get(setting.env), setting.env),
            (kept, "the deployed stack"),
        )
        for value, source in candidates:
            if value:
                try:
                    chosen[setting.env] = _limit(RESERVABLE, "concurrent executions")(value)
                except argparse.ArgumentTypeError as exc:
                    raise CliError(f"{source}: {value!r} {exc}", EXIT_USAGE) from None
                lines.append(f"{setting.function} concurrency: {value} ({source})")
                break
        else:
            lines.append(f"{setting.function} concurrency: tether's default")
    return chosen, lines


def _deployed_outputs(region: str) -> dict[str, str]:
    """The stack's outputs before this deploy; none when it is not deployed yet."""
    from tether_cli.api_client import stack_outputs

    try:
        return stack_outputs(os.environ.get("TETHER_STACK_NAME") or names.STACK_NAME, region)
    except CliError:
        return {}


def run_deploy(args: argparse.Namespace) -> int:
    root = source_root()
    npx = check_node()
    region, source = resolve_region(args.region)
    account = check_aws(region)
    output.stderr_console().print(f"deploying to account {account}, region {region} ({source})")
    env = region_environment(region)
    if not is_bootstrapped(region):
        if not args.bootstrap:
            raise CliError(
                f"account {account} is not CDK-bootstrapped in {region}: run "
                "`tether deploy --bootstrap` (once per account and region)",
                EXIT_FAILURE,
            )
        if run_command(cdk(npx, "bootstrap", f"aws://{account}/{region}"), env=env) != 0:
            raise CliError("cdk bootstrap failed; see the output above", EXIT_FAILURE)
    # Before the deploy: an older stack's secrets are still readable (this deploy deletes them).
    for line in provider_keys.prepare(region):
        output.stderr_console().print(line)
    deployed = _deployed_outputs(region)
    shards, shards_from = monitor_shards(args.monitor_shards, os.environ, deployed)
    output.stderr_console().print(f"monitor shards: {shards} ({shards_from})")
    concurrency, concurrency_from = reserved_concurrency(args, os.environ, deployed)
    for line in concurrency_from:
        output.stderr_console().print(line)
    dashboard, dashboard_from = dashboard_setting(args.dashboard, os.environ, deployed)
    output.stderr_console().print(f"dashboard: {'on' if dashboard else 'off'} ({dashboard_from})")
    assembly = synth(root, shards, concurrency, dashboard)
    command = cdk(npx, "deploy", "--app", str(assembly), names.STACK_NAME)
    command += ["--require-approval", "never"]
    command += deploy_parameters(args)
    code = run_command(command, env=env)
    if code != 0:
        raise CliError(f"cdk deploy failed (exit {code}); see the output above", EXIT_FAILURE)
    from tether_cli.api_client import stack_outputs

    outputs = stack_outputs(os.environ.get("TETHER_STACK_NAME") or names.STACK_NAME, region=region)
    to_set = provider_keys.keys_to_set(region)
    if args.json:
        output.print_json(
            {
                "account": account,
                "region": region,
                "region_from": source,
                "outputs": outputs,
                "keys_to_set": to_set,
            }
        )
        return EXIT_OK
    console = output.stdout_console()
    console.print(f"deployed {names.STACK_NAME} to account {account}, region {region} ({source})")
    for key, value in sorted(outputs.items()):
        console.print(f"  {key}: {value}")
    console.print(next_steps(to_set))
    if args.email:
        console.print(f"confirm the SNS subscription e-mails sent to {args.email}")
    return EXIT_OK


def next_steps(keys_to_set: Sequence[str]) -> str:
    """What is left after a deploy: the provider keys that hold no key yet, else nothing to do."""
    if not keys_to_set:
        return "the provider keys are set (vast, cloudflare): submit a job with `tether submit`"
    return "next: " + "   ·   ".join(f"tether secrets set {which}" for which in keys_to_set)


def run_destroy(args: argparse.Namespace) -> int:
    root = source_root()
    region, source = resolve_region(args.region)
    if not args.force:
        active = active_jobs(region)
        if active:
            raise CliError(
                f"{len(active)} job(s) still active ({', '.join(active[:5])}): cancel them "
                "first (`tether cancel JOB`) or pass --force; without the control plane their "
                "hosts bill until the agent's lease runs out",
                EXIT_USAGE,
            )
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError("destroy: pass --yes to confirm when not on a terminal")
        output.stderr_console().print(destroy_consequences(region))
        answer = input(f"delete stack {names.STACK_NAME} in {region} ({source})? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            output.stderr_console().print("not destroyed")
            return EXIT_USAGE
    npx = check_node()
    account = check_aws(region)
    assembly = synth(root)
    command = cdk(npx, "destroy", "--app", str(assembly), names.STACK_NAME, "--force")
    code = run_command(command, env=region_environment(region))
    if code != 0:
        raise CliError(f"cdk destroy failed (exit {code}); see the output above", EXIT_FAILURE)
    if args.json:
        output.print_json(
            {
                "destroyed": names.STACK_NAME,
                "account": account,
                "region": region,
                "region_from": source,
                "kept": [names.VAST_KEY_PARAMETER, names.CLOUDFLARE_PARAMETER, "job table"],
            }
        )
    else:
        console = output.stdout_console()
        console.print(f"destroyed {names.STACK_NAME} in account {account}, region {region}")
        console.print(destroy_consequences(region))
    return EXIT_OK


def destroy_consequences(region: str) -> str:
    """What a destroy leaves behind, said before asking and after destroying."""
    keys = f"{names.VAST_KEY_PARAMETER} and {names.CLOUDFLARE_PARAMETER}"
    return (
        f"the job table is retained with its history, and a redeploy creates a new, empty "
        f"table; the provider keys {keys} (SSM parameters, free) are kept for a redeploy "
        f"(`aws ssm delete-parameters --region {region} --names {names.VAST_KEY_PARAMETER} "
        f"{names.CLOUDFLARE_PARAMETER}` deletes them); checkpoints in R2 are not touched "
        "(docs/deploy.md#teardown)"
    )
