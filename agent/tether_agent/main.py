"""`tether-agent run [options] [-- CMD...]`: the agent's command line.

Configuration comes from the environment (see `settings.py`) and, on a rented host, the job
from the first heartbeat's reply (`bootstrap.py`); a bad or missing variable is printed by name
and the agent exits 2 before it touches anything.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from tether_agent.agent import Agent, ExitCode
from tether_agent.bootstrap import (
    environ_with_job,
    job_in_environ,
    load_bootstrap_settings,
    receive_job,
)
from tether_agent.settings import SettingsError, Tuning, load_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether-agent", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="restore, run the training command, upload, heartbeat")
    defaults = Tuning()
    run.add_argument(
        "--upload-concurrency",
        type=int,
        default=defaults.upload_concurrency,
        help="parallel part transfers (default %(default)s)",
    )
    run.add_argument(
        "--file-concurrency",
        type=int,
        default=defaults.file_concurrency,
        help="files transferred at once (default %(default)s)",
    )
    run.add_argument(
        "--part-size-mb",
        type=int,
        default=defaults.part_size_mb,
        help="preferred multipart part size in MiB (default %(default)s)",
    )
    run.add_argument(
        "--bandwidth-limit-mb-s",
        type=float,
        default=None,
        help="cap transfers at this many MB/s (default: no cap)",
    )
    run.add_argument(
        "--prune-local",
        action="store_true",
        help="delete local checkpoints once uploaded (the newest is kept)",
    )
    run.add_argument(
        "--poll-interval-s",
        type=float,
        default=defaults.poll_interval_s,
        help="rescan the checkpoint dir this often besides inotify",
    )
    run.add_argument(
        "--upload-nice",
        type=int,
        default=defaults.upload_nice,
        help="niceness of transfer threads (default %(default)s)",
    )
    run.add_argument(
        "--secrets-wait-s",
        type=float,
        default=defaults.secrets_wait_s,
        help="how long training waits for the job's secrets (default %(default)s)",
    )
    run.add_argument(
        "command", nargs=argparse.REMAINDER, help='-- CMD...; default: bash -c "$TETHER_RUN"'
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s tether-agent %(levelname)s %(message)s",
        stream=sys.stderr,
    )  # fmt: skip
    args = _parser().parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    try:
        tuning = Tuning(
            upload_concurrency=args.upload_concurrency,
            file_concurrency=args.file_concurrency,
            part_size_mb=args.part_size_mb,
            bandwidth_limit_mb_s=args.bandwidth_limit_mb_s,
            prune_local=args.prune_local,
            poll_interval_s=args.poll_interval_s,
            upload_nice=args.upload_nice,
            secrets_wait_s=args.secrets_wait_s,
        )
    except ValidationError as exc:
        return _config_error(
            [f"--{'-'.join(str(e['loc'][0]).split('_'))}: {e['msg']}" for e in exc.errors()]
        )
    environ: Mapping[str, str] = os.environ
    lease = None
    try:
        if not job_in_environ(environ):  # a rented host: the job comes over the heartbeat
            host = load_bootstrap_settings(environ)
            received = receive_job(host)
            if isinstance(received, int):
                return received
            lease = received.lease
            environ = environ_with_job(environ, received.job, host.path_root)
        settings = load_settings(environ)
    except SettingsError as exc:
        return _config_error(exc.lines)
    if not command:
        if not settings.run:
            return _config_error(["TETHER_RUN: required when no command follows --"])
        command = ["bash", "-c", settings.run]
    return int(Agent(settings, tuning, command, lease=lease, environ=environ).run())


def _config_error(lines: list[str]) -> int:
    print("tether-agent: bad configuration:", file=sys.stderr)
    for line in lines:
        print(f"  {line}", file=sys.stderr)
    return ExitCode.BAD_CONFIG


if __name__ == "__main__":
    sys.exit(main())
