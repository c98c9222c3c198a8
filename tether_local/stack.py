"""The local stack: the whole of tether on one machine (docs/architecture.md#local-stack). One
composition, used by `tether local up`, the demo and the end-to-end tests.

    with LocalStack(LocalStackConfig()) as stack:
        stack.api_url      # the API front (API Gateway HTTP API on loopback)
        stack.s3_url       # the R2 front (R2's checks) before rclone serve s3, the R2 stand-in
        stack.vast         # the Vast simulator (chaos: stack.vast.inject("rate_limit", 5))
        stack.hosts        # the local hosts (chaos: destroy, hang_gpu, freeze, zombie)
        stack.tick()       # fire the monitor schedules once, now

What `start()` does, in order:
1. moto in process (`LocalAws`) with the synthesized template deployed (with the config's
   `parameters`, as `cdk deploy --parameters` gives them): DynamoDB, Step Functions running the
   real definition, SNS, SSM (the provider keys, set after deploy); each Lambda
   execution environment a worker process (`tether_local.aws.lambda_process`) with its function's
   environment and timeout, logging to `<root>/logs/<function>.log` (`log_dir`).
2. The Vast simulator (offers from `tether_local.vast_sim.offers`) and the Cloudflare simulator,
   each served over loopback HTTP; renting starts a local host (`tether_local.hosts.local_hosts`).
3. `rclone serve s3` over `<root>/s3` (anonymous, on a loopback port only the front knows) behind
   the R2 front (`tether_local.r2.front`), which checks every request against the key the
   Cloudflare simulator minted — signature, session token, expiry, revocation, bucket, prefixes,
   permission — at the time of the request, and refuses with R2's errors.
4. The account secrets (`tether/vast-api-key`, `tether/cloudflare`) get the simulators' keys,
   and every deployed function's environment is pointed away from the internet: Vast and
   Cloudflare base URLs → the simulators, R2 endpoint → the R2 front, API URL → the API front.
5. The API front on loopback, dispatching by the template's routes.
6. The stack's clock: fires the template's schedules every `monitor_interval_s`, each firing on
   its own thread, as EventBridge Scheduler fires whether or not the last run has ended (a
   monitor run longer than the interval overlaps the next one, as in AWS).

`close()` stops the clock, kills every host's processes, stops the servers, every Lambda
environment and moto.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from functions import settings as function_settings
from functions.adapters import factory
from infra import names
from tether_local.aws.lambda_runtime import RuntimeKind
from tether_local.aws.local_aws import Deployed, LocalAws, Schedule
from tether_local.hosts.local_hosts import LocalHosts
from tether_local.http import ApiFront, LoopbackServer
from tether_local.r2.cloudflare_sim import CloudflareSim
from tether_local.r2.front import R2Front
from tether_local.r2.s3server import S3Server
from tether_local.vast_sim import VastSimulator
from tether_local.vast_sim.offers import generate_offers

LOG = logging.getLogger(__name__)

R2_BUCKET = "tether"
CLOUDFLARE_ACCOUNT_ID = "local-account"
CLOUDFLARE_PARENT_KEY = "local-parent-key"


class LocalStackConfig(BaseModel):
    """Every timer and knob of the local stack. Times are seconds of real time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: Path | None = Field(
        default=None, description="Working directory (hosts' disks, S3 data); default: a temp dir"
    )
    keep_root: bool = Field(default=False, description="Keep a temp root after close")
    api_port: int = Field(default=0, ge=0, le=65535, description="API front port; 0: any free")
    s3_port: int = Field(
        default=0, ge=0, le=65535, description="S3 endpoint (the R2 front) port; 0: any free"
    )
    offers: int = Field(default=200, ge=1, le=10_000, description="Offers in the Vast book")
    seed: int = Field(default=0, description="Seed of the offer generator and the simulator")
    time_scale: float = Field(
        default=1e-3,
        ge=0,
        description="Step Functions Wait states, Retry back-offs and execution timeouts × this",
    )
    lambda_runtime: RuntimeKind = Field(
        default="process",
        description="Lambda execution environments: worker processes, or in this process (for "
        "meters and hooks installed in it; tether_local.aws.lambda_runtime)",
    )
    monitor_interval_s: float = Field(
        default=2.0,
        ge=0,
        description="The stack's clock fires the monitor schedules this often; 0: only tick()",
    )
    startup_s: float = Field(
        default=1.0, ge=0, description="Rent → running on Vast, and the host's boot delay"
    )
    created_s: float = Field(default=0.2, ge=0, description="How long Vast shows 'created'")
    restart_s: float = Field(default=0.5, ge=0, description="Start of a stopped instance")
    stop_grace_s: float = Field(
        default=2.0, ge=0, description="Container stop: SIGTERM, then SIGKILL after this"
    )
    function_env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra variables for every deployed function (e.g. agent timers)",
    )
    host_env: dict[str, str] = Field(
        default_factory=dict, description="Extra process variables for every local host"
    )
    parameters: dict[str, str] = Field(
        default_factory=dict,
        description="The stack's parameters, as `cdk deploy --parameters Name=value` sets them "
        "(docs/deploy.md); checked against the template as CloudFormation checks them",
    )


class LocalStack:
    """See the module docstring. A context manager; one per process (moto is process-wide)."""

    def __init__(self, config: LocalStackConfig | None = None) -> None:
        self.config = config or LocalStackConfig()
        self.stack_id = uuid.uuid4().hex[:12]
        self._own_root = self.config.root is None
        self.root = self.config.root or Path(tempfile.mkdtemp(prefix="tether-local-"))
        self.aws = LocalAws(
            time_scale=self.config.time_scale,
            runtime=self.config.lambda_runtime,
            log_dir=self.log_dir if self.config.lambda_runtime == "process" else None,
        )
        self.vast = VastSimulator(
            generate_offers(self.config.offers, self.config.seed),
            seed=self.config.seed,
            startup_s=self.config.startup_s,
            created_s=min(self.config.created_s, self.config.startup_s),
            restart_s=self.config.restart_s,
        )
        self.cloudflare = CloudflareSim(
            account_id=CLOUDFLARE_ACCOUNT_ID,
            parents={CLOUDFLARE_PARENT_KEY: "admin-read-write"},
            buckets=(R2_BUCKET,),
        )
        self.deployed: Deployed | None = None
        self.front: ApiFront | None = None
        self.hosts: LocalHosts | None = None
        self.s3: S3Server | None = None  # rclone, the data plane: reached only by the front
        self.r2: R2Front | None = None
        self._servers: list[LoopbackServer] = []
        self._api_server: LoopbackServer | None = None
        self._vast_server: LoopbackServer | None = None
        self._cloudflare_server: LoopbackServer | None = None
        self._clock_thread: threading.Thread | None = None
        self._firings: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._tick_lock = threading.Lock()
        self.ticks = 0
        self.tick_errors: list[str] = []
        self._billed: dict[tuple[str, int], tuple[int, int]] = {}
        self._billed_lock = threading.Lock()

    # --- URLs -------------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return _url(self._api_server)

    @property
    def vast_url(self) -> str:
        return _url(self._vast_server)

    @property
    def cloudflare_url(self) -> str:
        """The Cloudflare API base URL (what the adapter calls `base_url`)."""
        return _url(self._cloudflare_server) + "/client/v4"

    @property
    def log_dir(self) -> Path:
        """Where the functions' logs go: `<function name>.log`, one per function."""
        return self.root / "logs"

    @property
    def s3_url(self) -> str:
        """The S3/R2 endpoint every client uses: the R2 front, never rclone directly."""
        if self.r2 is None:
            raise RuntimeError("the local stack is not started")
        return self.r2.url

    # --- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> LocalStack:
        from infra.synth import synth_template

        try:
            self.root.mkdir(parents=True, exist_ok=True)
            _cold_start_functions()
            template = synth_template(bundle=False)
            self.aws.start()
            self.deployed = self.aws.deploy(
                template, parameters=self.config.parameters, stack_name=names.STACK_NAME
            )
            # Looked up per request, so a test can wrap `stack.vast.handle` (a slow Vast).
            self._vast_server = self._serve(lambda r: self.vast.handle(r), "vast")
            self._cloudflare_server = self._serve(self.cloudflare.handle, "cloudflare")
            self.s3 = self._start_s3()
            self.r2 = R2Front(
                self.s3.endpoint_url, self.cloudflare.live_key, port=self.config.s3_port
            ).start()
            self.front = ApiFront(self.deployed.http_routes, invoke=self.aws.run_function)
            self.front.observe_heartbeats(self._bill_traffic)
            self._api_server = self._serve(self.front.handle, "api", port=self.config.api_port)
            self._set_secrets()
            self._upload_agent_wheel()
            self._point_functions_here()
            self.aws.prewarm(self._own_functions())
            # The handlers' "now" and back-off sleeps: real time (the seam for a faster clock).
            factory.install_hooks(factory.Hooks(clock=time.time))
            self.hosts = LocalHosts(
                self.vast,
                root=self.root / "hosts",
                vast_url=self.vast_url,
                stack_id=self.stack_id,
                stop_grace_s=self.config.stop_grace_s,
                extra_env=self.config.host_env,
            )
            self.hosts.attach()
            if self.config.monitor_interval_s > 0 and self.schedules():
                self._clock_thread = threading.Thread(
                    target=self._run_clock, name="local-stack-clock", daemon=True
                )
                self._clock_thread.start()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        self._stopping.set()
        if self._clock_thread is not None:
            self._clock_thread.join(timeout=30)
            self._clock_thread = None
        for firing in self._firings:  # a monitor run in flight ends, or its timeout ends it
            firing.join(timeout=10)
        self._firings.clear()
        if self.hosts is not None:
            self.hosts.close()
        for server in reversed(self._servers):
            server.stop()
        self._servers.clear()
        if self.r2 is not None:
            self.r2.stop()
            self.r2 = None
        if self.s3 is not None:
            self.s3.__exit__(None, None, None)
        factory.reset()
        _cold_start_functions()
        self.aws.close()
        if self._own_root and not self.config.keep_root:
            shutil.rmtree(self.root, ignore_errors=True)

    # --- pieces -----------------------------------------------------------------------------

    def _serve(self, handler: Any, name: str, port: int = 0) -> LoopbackServer:
        server = LoopbackServer(handler, port=port, name=name).start()
        self._servers.append(server)
        return server

    def _start_s3(self) -> S3Server:
        """rclone over `<root>/s3`, anonymous: the R2 front in front of it does every check."""
        data = self.root / "s3"
        (data / R2_BUCKET).mkdir(parents=True, exist_ok=True)
        return S3Server(data).start()

    def _set_secrets(self) -> None:
        assert self.deployed is not None
        # What `tether deploy` + `tether secrets set` leave: SSM SecureStrings (provider_keys.py).
        ssm = self.aws.client("ssm")
        cloudflare = {
            "account_id": CLOUDFLARE_ACCOUNT_ID,
            "api_token": next(iter(self.cloudflare_api_tokens())),
            "parent_access_key_id": CLOUDFLARE_PARENT_KEY,
            "bucket": R2_BUCKET,
        }
        for name, value in (
            (names.VAST_KEY_PARAMETER, self.vast.api_key),
            (names.CLOUDFLARE_PARAMETER, json.dumps(cloudflare)),
        ):
            ssm.put_parameter(Name=name, Value=value, Type="SecureString", Overwrite=True)

    def _upload_agent_wheel(self) -> None:
        """What the deploy's bucket deployment does: the agent wheel into the artifacts bucket
        (the lifecycle presigns it for the onstart script; local hosts run the same wheel)."""
        from infra.synth import build_agent_wheel

        assert self.deployed is not None
        bucket = self.deployed.outputs.get(names.OUTPUT_ARTIFACTS_BUCKET)
        if not bucket:
            return
        s3 = self.aws.client("s3")
        for wheel in sorted(build_agent_wheel(bundle=True).glob("*.whl")):
            s3.upload_file(str(wheel), str(bucket), names.AGENT_WHEEL_PREFIX + wheel.name)

    def cloudflare_api_tokens(self) -> tuple[str, ...]:
        return ("local-api-token",)  # CloudflareSim's default API token

    def account_secrets(self) -> list[str]:
        """Every account-wide secret in play: none may reach a host (invariant 6)."""
        return [
            self.vast.api_key,
            *self.cloudflare_api_tokens(),
            CLOUDFLARE_PARENT_KEY,
            os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
        ]

    def function_overrides(self) -> dict[str, str]:
        """What every deployed function's environment gets instead of internet endpoints."""
        overrides = {
            function_settings.VAST_BASE_URL_ENV: self.vast_url,
            function_settings.CLOUDFLARE_BASE_URL_ENV: self.cloudflare_url,
            function_settings.R2_ENDPOINT_ENV: self.s3_url,
            function_settings.API_URL_ENV: self.api_url,
            function_settings.MONITOR_INTERVAL_ENV: _number(self.config.monitor_interval_s or 60),
        }
        overrides.update(self.config.function_env)
        return overrides

    def _point_functions_here(self) -> None:
        assert self.deployed is not None
        client = self.aws.client("lambda")
        overrides = self.function_overrides()
        for resource in self.deployed.resources.values():
            if resource.type != "AWS::Lambda::Function":
                continue
            current = client.get_function_configuration(FunctionName=resource.physical_id)
            variables = dict(current.get("Environment", {}).get("Variables", {}))
            variables.update(overrides)
            client.update_function_configuration(
                FunctionName=resource.physical_id, Environment={"Variables": variables}
            )

    def _own_functions(self) -> list[str]:
        """The functions whose handlers are tether's (not CDK's custom resources)."""
        assert self.deployed is not None
        client = self.aws.client("lambda")
        found = []
        for resource in self.deployed.resources.values():
            if resource.type == "AWS::Lambda::Function":
                config = client.get_function_configuration(FunctionName=resource.physical_id)
                if str(config.get("Handler", "")).startswith("functions."):
                    found.append(resource.physical_id)
        return found

    def _bill_traffic(self, heartbeat: dict[str, Any]) -> None:
        """Heartbeats report cumulative bytes; bill the increase to the host's Vast ledger."""
        if self.hosts is None:
            return
        key = (str(heartbeat["job_id"]), int(heartbeat["generation"]))
        down = _count(heartbeat.get("bytes_downloaded"))
        up = _count(heartbeat.get("bytes_uploaded"))
        hosts = [
            h
            for h in self.hosts.for_job(key[0])
            if h.generation == key[1] and h.state != "destroyed"
        ]
        if not hosts:
            return
        with self._billed_lock:
            seen_down, seen_up = self._billed.get(key, (0, 0))
            self._billed[key] = (max(down, seen_down), max(up, seen_up))
        with contextlib.suppress(KeyError):  # destroyed meanwhile
            self.vast.record_traffic(
                hosts[-1].instance_id,
                down_bytes=max(down - seen_down, 0),
                up_bytes=max(up - seen_up, 0),
            )

    # --- the clock ----------------------------------------------------------------------------

    def schedules(self) -> list[Schedule]:
        assert self.deployed is not None
        return [s for s in self.deployed.schedules if s.enabled]

    def tick(self) -> list[str]:
        """Fire every enabled schedule once (what EventBridge does each interval) and wait for
        the targets; returns the execution ARNs or function names. A failing target is
        recorded, not raised. Ticks do not wait for each other: two at once overlap."""
        fired: list[str] = []
        with self._tick_lock:
            self.ticks += 1
        for schedule in self.schedules():
            try:
                fired.append(self.aws.fire_schedule(schedule))
            except Exception as exc:
                LOG.warning("schedule %s failed: %s", schedule.name, exc)
                with self._tick_lock:
                    self.tick_errors.append(f"{schedule.name}: {exc}")
        return fired

    def _run_clock(self) -> None:
        interval = self.config.monitor_interval_s
        while not self._stopping.wait(interval):
            firing = threading.Thread(target=self.tick, name="local-stack-tick", daemon=True)
            firing.start()
            self._firings = [f for f in self._firings if f.is_alive()] + [firing]

    # --- conveniences for tests and the demo --------------------------------------------------

    def table_name(self) -> str:
        assert self.deployed is not None
        return str(self.deployed.outputs[names.OUTPUT_TABLE_NAME])

    def state_machine_arn(self) -> str:
        assert self.deployed is not None
        return str(self.deployed.outputs[names.OUTPUT_STATE_MACHINE_ARN])


def _cold_start_functions() -> None:
    """A new stack means new Lambda containers: clear the handlers' module-level caches
    (`@cache`d dependencies hold boto3 clients bound to the previous moto endpoint)."""
    for name, module in list(sys.modules.items()):
        if name == "functions" or name.startswith("functions."):
            for value in list(vars(module).values()):
                clear = getattr(value, "cache_clear", None)
                if callable(clear) and getattr(value, "__module__", None) == name:
                    clear()


def _url(server: LoopbackServer | None) -> str:
    if server is None:
        raise RuntimeError("the local stack is not started")
    return server.url


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


__all__ = ["R2_BUCKET", "LocalStack", "LocalStackConfig"]
