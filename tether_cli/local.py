"""`tether local up [--port P]`: the whole control plane on this machine, in the foreground.

Starts the local stack (`tether_local.stack.LocalStack`), prints `API: <url>` and `S3: <url>`
(and the simulators' URLs, and where the functions' logs go), records the API URL in the local
state file (`build/local-stack.json`, or `TETHER_LOCAL_STATE`) that `tether <command> --local`
reads, then serves until Ctrl-C, when it removes that file and stops every host process and
server it started.

While it serves, the terminal shows the jobs' timeline, the demo's (`tether_local.demo.timeline`:
rented, training, dead, replaced, finished…, each line with its job id). The functions' own
logs — Powertools' JSON lines, EMF metrics, START/END/REPORT, timeouts — go to
`<root>/logs/<function>.log`, one file per function.

While it serves, the chaos controls act on a job's host from another terminal, through the
stack's control endpoint (`tether_local.control`; its URL and token are in the state file):
`tether local kill-host JOB` (the machine dies: processes killed, disk deleted, Vast shows it
offline), `hang-gpu`, `idle-gpu`, `heal-gpu`, `freeze`, `thaw`, `cut-heartbeats`,
`restore-heartbeats`, `outbid`, `zombie`, and `vast-outage on|off`, `vast-fault KIND`.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import secrets
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from tether_cli import output
from tether_cli.api_client import local_state_path, write_local_state
from tether_cli.output import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError, import_local

LOG = logging.getLogger(__name__)
TIMELINE_POLL_S = 1.0
CONTROL_TIMEOUT_S = 60.0  # a kill waits for the host's processes to die
# The control endpoint's host actions (`tether_local.control.HOST_ACTIONS`, which a test holds
# equal): the command, what it does.
HOST_ACTIONS = {
    "kill-host": ("kill", "the machine dies: processes killed, disk deleted, Vast: offline"),
    "hang-gpu": ("hang-gpu", "the GPU hangs: the probe times out"),
    "idle-gpu": ("idle-gpu", "the GPU reads idle (no utilisation)"),
    "heal-gpu": ("heal-gpu", "the GPU answers again"),
    "freeze": ("freeze", "every process of the host stops (SIGSTOP)"),
    "thaw": ("thaw", "every process of the host continues (SIGCONT)"),
    "cut-heartbeats": ("cut-heartbeats", "the API front drops the host's heartbeats"),
    "restore-heartbeats": ("restore-heartbeats", "the host's heartbeats reach the API again"),
    "outbid": ("outbid", "a higher bid takes an interruptible host: Vast stops it"),
    "zombie": ("zombie", "the newest destroyed host runs its old agent again (empty disk)"),
}


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "local",
        help="run the control plane on this machine (moto, simulators, local hosts)",
        description="Run tether's control plane locally: the real handlers and state machine "
        "on moto, a Vast simulator whose hosts run the real agent, and an S3 stand-in.",
    )
    actions = parser.add_subparsers(title="actions", metavar="ACTION", dest="local_action")
    up = actions.add_parser(
        "up",
        help="start the local stack in the foreground until Ctrl-C",
        description="Start the local stack, print its URLs, serve until Ctrl-C.",
    )
    up.add_argument("--port", type=int, default=8787, help="API port (default %(default)s; 0: any)")
    up.add_argument(
        "--s3-port", type=int, default=0, help="S3 stand-in port (default: any free port)"
    )
    up.add_argument(
        "--root", type=Path, default=None, help="working directory (default: a temporary one)"
    )
    up.add_argument(
        "--monitor-interval",
        type=float,
        default=5.0,
        help="seconds between monitor runs (default %(default)s)",
    )
    up.add_argument(
        "--startup", type=float, default=3.0, help="seconds from rent to a running host"
    )
    up.add_argument("--offers", type=int, default=200, help="offers in the simulated Vast book")
    up.add_argument("--seed", type=int, default=0, help="seed of the simulated offer book")
    up.set_defaults(handler=run_up)
    for command, (action, what) in HOST_ACTIONS.items():
        chaos = actions.add_parser(
            command,
            help=f"the job's newest host: {what}",
            description=f"On the local stack `tether local up` serves: {what}. Acts on the "
            "job's host of the highest generation.",
        )
        chaos.add_argument("job_id", metavar="JOB", help="the job id")
        if action == "kill":
            chaos.add_argument(
                "--exited",
                action="store_true",
                help="Vast shows the instance `exited` (its container died) instead of "
                "`offline` (the machine dropped off)",
            )
        chaos.add_argument("--json", action="store_true", help="print the result as JSON")
        chaos.set_defaults(handler=run_host_action, host_action=action)
    outage = actions.add_parser(
        "vast-outage",
        help="Vast goes down (every request 502) or comes back",
        description="On the local stack: `on` makes every Vast API request answer 502 Bad "
        "Gateway (instances keep running and billing) until `off`.",
    )
    outage.add_argument("switch", choices=("on", "off"))
    outage.add_argument("--json", action="store_true", help="print the result as JSON")
    outage.set_defaults(handler=run_vast_outage)
    fault = actions.add_parser(
        "vast-fault",
        help="the next Vast requests of a kind fail (429 storms, 5xx, offers gone, …)",
        description="On the local stack: make the next COUNT matching Vast requests fail. "
        "KIND: rate_limit, server_error, connection_error (any request); offer_gone, "
        "bid_too_low, invalid_args, no_instance_api_key (rents); resources_unavailable "
        "(starts).",
    )
    fault.add_argument("kind", metavar="KIND")
    fault.add_argument("--count", type=int, default=1, help="how many (default %(default)s)")
    fault.add_argument("--json", action="store_true", help="print the result as JSON")
    fault.set_defaults(handler=run_vast_fault)
    parser.set_defaults(handler=lambda _args: _missing_action(parser))


def _missing_action(parser: argparse.ArgumentParser) -> int:
    raise CliError("local: name an action, e.g. `tether local up` (see --help)", EXIT_USAGE)


def _check_port(name: str, port: int) -> None:
    if not 0 <= port <= 65535:
        raise CliError(f"--{name}: must be a port number from 0 to 65535 (got {port})")
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CliError(
                    f"--{name}: port {port} is already in use (choose another, or 0 for any)"
                ) from None
            raise CliError(f"--{name}: cannot listen on 127.0.0.1:{port}: {exc}") from None


def _remove_local_state(path: Path, api_url: str) -> None:
    """Remove the state file if it still names our API (another `local up` may have taken it
    over since), so `--local` never points at a stack that has stopped."""
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("api_url") == api_url:
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass  # gone or not ours: nothing to clean up


def _show_timeline(stack: Any, timeline: Any, started: float, stop: threading.Event) -> None:
    """Print every job's new timeline lines each second until `stop` (the demo's source)."""
    from functions.adapters.store import JobStore
    from tether_local.demo.timeline import StackTimeline

    jobs = StackTimeline(JobStore(stack.table_name()), timeline, started)
    while not stop.wait(TIMELINE_POLL_S):
        try:
            jobs.poll()
        except Exception as exc:  # the stack is stopping, or moto hiccuped: try next second
            LOG.debug("timeline poll failed: %s", exc)


# --- the control endpoint's client -------------------------------------------------------


def control_request(path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call the serving stack's control endpoint (GET without a body, POST with one); its
    answer, or a CliError with its message."""
    import httpx

    state = local_state_path()
    try:
        recorded = json.loads(state.read_text(encoding="utf-8"))
        url, token = str(recorded["control_url"]), str(recorded["control_token"])
    except (OSError, ValueError, KeyError, TypeError):
        raise CliError(
            f"no local stack is serving ({state} names none): start one with `tether local up`",
            EXIT_FAILURE,
        ) from None
    headers = {"authorization": f"Bearer {token}"}
    try:
        if body is None:
            reply = httpx.get(url + path, headers=headers, timeout=CONTROL_TIMEOUT_S)
        else:
            reply = httpx.post(url + path, json=body, headers=headers, timeout=CONTROL_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise CliError(
            f"the local stack at {url} does not answer ({exc}): is `tether local up` running?",
            EXIT_FAILURE,
        ) from None
    try:
        answer = reply.json()
    except ValueError:
        answer = {}
    if reply.status_code != 200 or not isinstance(answer, dict):
        message = answer.get("message") if isinstance(answer, dict) else None
        code = EXIT_USAGE if reply.status_code in (400, 404, 409) else EXIT_FAILURE
        raise CliError(f"local: {message or f'HTTP {reply.status_code}'}", code)
    return answer


def _said(args: argparse.Namespace, answer: dict[str, Any], line: str) -> int:
    if args.json:
        output.print_json(answer)
    else:
        output.stdout_console().print(line, highlight=False)
    return EXIT_OK


def run_host_action(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    if getattr(args, "exited", False):
        body["status"] = "exited"
    answer = control_request(f"/jobs/{args.job_id}/host/{args.host_action}", body)
    return _said(args, answer, str(answer.get("done", "")))


def run_vast_outage(args: argparse.Namespace) -> int:
    on = args.switch == "on"
    answer = control_request("/vast/outage", {"on": on})
    line = "Vast is down: every request answers 502" if on else "Vast answers again"
    return _said(args, answer, line)


def run_vast_fault(args: argparse.Namespace) -> int:
    answer = control_request("/vast/faults", {"kind": args.kind, "count": args.count})
    pending = ", ".join(f"{k} ×{v}" for k, v in answer.get("vast_faults", {}).items())
    return _said(args, answer, f"Vast faults pending: {pending or 'none'}")


def run_up(args: argparse.Namespace) -> int:
    import_local("local up")
    from pydantic import ValidationError

    from tether_cli.demo import timeline_printer
    from tether_local.control import StackControl
    from tether_local.http import LoopbackServer
    from tether_local.stack import LocalStack, LocalStackConfig

    _check_port("port", args.port)
    _check_port("s3-port", args.s3_port)
    try:
        config = LocalStackConfig(
            root=args.root,
            api_port=args.port,
            s3_port=args.s3_port,
            monitor_interval_s=args.monitor_interval,
            startup_s=args.startup,
            offers=args.offers,
            seed=args.seed,
        )
    except ValidationError as exc:
        lines = [f"--{'-'.join(str(e['loc'][0]).split('_'))}: {e['msg']}" for e in exc.errors()]
        raise CliError("local up: bad option", EXIT_USAGE, details=lines) from None
    # The functions log to files under the root; on the terminal, this process's warnings.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    # Both explicitly: a shell starts background jobs with SIGINT ignored.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    print("starting the local stack (first start synthesizes the template: ~20 s)…", flush=True)
    started = time.time()
    try:
        with (
            LocalStack(config) as stack,
            LoopbackServer(
                StackControl(stack, token := secrets.token_urlsafe(32)).handle, name="control"
            ) as control,
        ):
            state = write_local_state(
                stack.api_url,
                aws_url=stack.aws.endpoint_url,
                control={"control_url": control.url, "control_token": token},
            )
            watcher: threading.Thread | None = None
            try:
                print(f"API: {stack.api_url}")
                print(f"S3: {stack.s3_url}")
                print(f"Vast: {stack.vast_url}")
                print(f"Cloudflare: {stack.cloudflare_url}")
                print(f"Root: {stack.root}")
                print(f"Logs: {stack.log_dir}/<function>.log (the functions' JSON logs, metrics)")
                print(f"State: {state} (`tether <command> --local` reads it)")
                print(f"Control: {control.url} (`tether local kill-host JOB`, … use it)")
                print("serving; Ctrl-C stops every host and server", flush=True)
                timeline = timeline_printer(output.console(sys.stdout))
                watcher = threading.Thread(
                    target=_show_timeline,
                    args=(stack, timeline, started, stop),
                    name="local-up-timeline",
                    daemon=True,
                )
                watcher.start()
                while not stop.wait(0.5):
                    pass
                print("stopping…", flush=True)
            finally:
                stop.set()
                if watcher is not None:
                    watcher.join(timeout=10)
                _remove_local_state(state, stack.api_url)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("stopped")
    return EXIT_OK
