"""An in-memory Vast.ai API that speaks the real HTTP shapes the adapter uses.

`VastSimulator.handle(request) -> response` is an httpx handler: tests plug it into
`httpx.MockTransport(sim.handle)`, the local stack serves it over loopback HTTP. It keeps
- an offer book (from `tether_local.offers`); a rented offer leaves the book until its instance is
  destroyed, so renting it again answers 404 `no_such_ask` like Vast;
- instances whose `actual_status` moves created → loading → running on an injectable clock,
  stopped on request, and exited/offline on `kill()` (which, as on Vast, never heals by itself);
- the account key and one key per instance (`instance_api_key`, the container's
  `CONTAINER_API_KEY`) that may only start, stop or destroy its own instance;
- a billing ledger per instance: GPU seconds while it should run (not while stopped or offline),
  storage seconds while it exists, bytes recorded with `record_traffic()`; `charges()` and
  `GET /api/v0/charges/` show it;
- fault injection (`inject()`: 429 storms with Vast's plain-text body, 5xx, offers gone,
  dropped connections) and hooks (`on_rent`, `on_start`, `on_stop`, `on_destroy`) that the local
  stack uses to start and stop host processes.

Every public method and `handle` are thread-safe; hooks run outside the lock.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from tether_local.offers import HOURS_PER_MONTH, generate_offers, price_for_storage

InstanceStatus = Literal["created", "loading", "running", "stopped", "exited", "offline"]
FaultKind = Literal["rate_limit", "server_error", "offer_gone", "connection_error"]
FAULT_KINDS: tuple[str, ...] = ("rate_limit", "server_error", "offer_gone", "connection_error")
BYTES_PER_GB = 1024**3  # Vast's $/GB figures are $/TB ÷ 1024
PAGE_LIMIT = 25  # /api/v1/instances/ returns at most 25 per page
CHARGES_PAGE_LIMIT = 500
MIN_DISK_GB = 8
MAX_LABEL_CHARS = 256
MAX_ONSTART_CHARS = 4048
MAX_ONSTART_AND_ARGS_CHARS = 4096
RATE_LIMIT_TEXT = "API requests too frequent: endpoint threshold=4.5*1.0"
# Offer fields a real instance record repeats from the machine it runs on.
_MACHINE_FIELDS = (
    "machine_id", "host_id", "gpu_name", "num_gpus", "gpu_ram", "gpu_frac",
    "gpu_arch", "gpu_lanes", "gpu_mem_bw", "compute_cap", "cpu_name", "cpu_cores",
    "cpu_cores_effective", "cpu_ram", "cpu_arch", "cuda_max_good", "driver_version",
    "disk_bw", "disk_name", "dlperf", "dlperf_per_dphtotal", "flops_per_dphtotal", "total_flops",
    "geolocation", "has_avx", "inet_down", "inet_up", "inet_down_cost", "inet_up_cost",
    "internet_down_cost_per_tb", "internet_up_cost_per_tb", "mobo_name", "pci_gen", "pcie_bw",
    "public_ipaddr", "reliability2", "storage_cost", "min_bid", "direct_port_count", "logo",
    "rentable", "verification", "bw_nvlink", "webpage", "external", "hosting_type", "os_version",
)  # fmt: skip
_PULLING = "Pulling image"
_RUNNING_MSG = "success, running"
_FILTER_IGNORED = frozenset({"order", "limit", "type", "allocated_storage"})
_MANAGE_PATH = re.compile(r"^/api/v0/instances/(\d+)/?$")
_ASK_PATH = re.compile(r"^/api/v0/asks/(\d+)/?$")


@dataclass
class Ledger:
    """What one instance has cost so far. Rates are the offer's at rent time."""

    instance_id: int
    label: str | None
    gpu_name: str
    gpu_usd_per_hour: float  # dph_base
    storage_usd_per_hour: float  # storage_cost × disk GB / 720
    download_usd_per_gb: float
    upload_usd_per_gb: float
    opened_at: float
    closed_at: float | None = None
    gpu_seconds: float = 0.0
    storage_seconds: float = 0.0
    bytes_down: int = 0
    bytes_up: int = 0

    @property
    def gpu_usd(self) -> float:
        return self.gpu_seconds / 3600 * self.gpu_usd_per_hour

    @property
    def storage_usd(self) -> float:
        return self.storage_seconds / 3600 * self.storage_usd_per_hour

    @property
    def download_usd(self) -> float:
        return self.bytes_down / BYTES_PER_GB * self.download_usd_per_gb

    @property
    def upload_usd(self) -> float:
        return self.bytes_up / BYTES_PER_GB * self.upload_usd_per_gb

    @property
    def total_usd(self) -> float:
        return self.gpu_usd + self.storage_usd + self.download_usd + self.upload_usd


@dataclass
class SimInstance:
    """One rented instance. Hooks receive it; treat it as read-only."""

    id: int
    offer: dict[str, Any]
    image: str
    disk_gb: float
    label: str | None
    env: dict[str, str]
    onstart: str  # the script: `onstart`, or the command of `args: [bash, -c, script]`
    runtype: str
    args: list[str]
    api_key: str
    created_at: float
    intended_status: Literal["running", "stopped"] = "running"
    boot_started_at: float = 0.0  # when the current start began
    boot_s: float = 0.0  # how long this start takes to reach running
    restarted: bool = False  # a restart skips the first ("created") phase
    killed: Literal["exited", "offline"] | None = None
    gpu_util: float | None = None
    disk_usage: float | None = None
    status_msg: str | None = None

    def container_env(self) -> dict[str, str]:
        """The environment Vast gives the container: the rent's env plus Vast's own."""
        return {
            **self.env,
            "CONTAINER_ID": str(self.id),
            "CONTAINER_API_KEY": self.api_key,
            "VAST_CONTAINERLABEL": f"C.{self.id}",
            "GPU_COUNT": str(self.offer.get("num_gpus", 1)),
            "PUBLIC_IPADDR": str(self.offer.get("public_ipaddr", "127.0.0.1")),
        }


Hook = Callable[[SimInstance], None]


class _Reply(Exception):
    """Raised inside a route to answer at once with an error response."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


def _json(status: int, body: Any) -> httpx.Response:
    return httpx.Response(status, json=body)


def _error(status: int, error: str, msg: str, **extra: Any) -> _Reply:
    return _Reply(_json(status, {"success": False, "error": error, "msg": msg, **extra}))


def _matches(record: dict[str, Any], filters: dict[str, Any]) -> bool:
    """Vast's `{"field": {"op": value}}` filters; absent or null fields never pass a
    comparison, except that `eq false` accepts null (Vast stores `external: null`)."""
    for name, ops in filters.items():
        if name in _FILTER_IGNORED or not isinstance(ops, dict):
            continue
        value = record.get(name)
        if name == "verified":  # the API's alias for verification == "verified"
            value = record.get("verification") == "verified"
        for op, wanted in ops.items():
            if not _compare(value, op, wanted):
                return False
    return True


def _compare(value: Any, op: str, wanted: Any) -> bool:
    if op == "eq":
        return bool(value == wanted) or (wanted is False and value is None)
    if op == "neq":
        return bool(value != wanted)
    if op == "in":
        return isinstance(wanted, list) and value in wanted
    if op == "notin":
        return isinstance(wanted, list) and value not in wanted
    if value is None or not isinstance(wanted, int | float):
        return False
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    if op == "gte":
        return number >= wanted
    if op == "gt":
        return number > wanted
    if op == "lte":
        return number <= wanted
    if op == "lt":
        return number < wanted
    raise _error(400, "invalid_args", f"unknown filter operator {op!r}")


def _sort_key(order: list[list[str]]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    def key(record: dict[str, Any]) -> tuple[Any, ...]:
        parts: list[Any] = []
        for name, direction in order:
            value = record.get(name)
            number = float(value) if isinstance(value, int | float) else float("inf")
            parts.append(-number if direction == "desc" else number)
        return tuple(parts)

    return key


def _encode_token(last_id: int) -> str:
    raw = json.dumps({"values": {"id": last_id}}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_token(token: str) -> int:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        last_id = data["values"]["id"]
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise _error(400, "invalid_args", "after_token is not a token this API issued") from None
    if not isinstance(last_id, int):
        raise _error(400, "invalid_args", "after_token is not a token this API issued")
    return last_id


class VastSimulator:
    """The Vast API in memory. See the module docstring for what it models."""

    def __init__(
        self,
        offers: list[dict[str, Any]] | None = None,
        *,
        api_key: str = "sim-account-key",
        clock: Callable[[], float] = time.time,
        startup_s: float = 30.0,
        created_s: float = 3.0,
        restart_s: float = 5.0,
        first_status: Literal["created"] | None = "created",
        seed: int = 0,
        on_rent: Hook | None = None,
        on_start: Hook | None = None,
        on_stop: Hook | None = None,
        on_destroy: Hook | None = None,
    ) -> None:
        if min(startup_s, created_s, restart_s) < 0:
            raise ValueError("startup_s, created_s and restart_s must be ≥ 0")
        self._lock = threading.RLock()
        self._clock = clock
        self._rng = random.Random(seed)
        self._api_key = api_key
        self.startup_s = startup_s
        self.created_s = created_s
        self.restart_s = restart_s
        # Real records show actual_status null right after a rent; "created" is the default here.
        self.first_status = first_status
        self.on_rent = on_rent
        self.on_start = on_start
        self.on_stop = on_stop
        self.on_destroy = on_destroy
        book = offers if offers is not None else generate_offers(200, seed)
        self._book: dict[int, dict[str, Any]] = {int(o["id"]): dict(o) for o in book}
        self._rented_offers: dict[int, dict[str, Any]] = {}  # offer id → record, while rented
        self._instances: dict[int, SimInstance] = {}
        self._ledgers: dict[int, Ledger] = {}
        self._instance_keys: dict[str, int] = {}
        self._next_id = 30_000_000 + self._rng.randint(0, 9_999_999)
        self._faults: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)
        self._last_accrued = self._clock()
        self.request_log: list[tuple[str, str]] = []  # (method, full URL), for tests

    # -- Python controls ------------------------------------------------------------------

    @property
    def api_key(self) -> str:
        return self._api_key

    def offers(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(o) for o in self._book.values()]

    def add_offers(self, records: list[dict[str, Any]]) -> None:
        with self._lock:
            for record in records:
                self._book[int(record["id"])] = dict(record)

    def remove_offer(self, offer_id: int) -> None:
        """The offer is taken by someone else (renting it then answers no_such_ask)."""
        with self._lock:
            self._book.pop(offer_id, None)

    def inject(self, kind: FaultKind, count: int = 1) -> None:
        """Make the next `count` matching requests fail: `rate_limit` (429, plain text),
        `server_error` (502), `connection_error` (httpx.ConnectError) on any request;
        `offer_gone` on rents (404 no_such_ask, and the offer leaves the book)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"kind must be one of {', '.join(FAULT_KINDS)}, got {kind!r}")
        if count < 0:
            raise ValueError("count must be ≥ 0")
        with self._lock:
            self._faults[kind] += count

    def pending_faults(self) -> dict[str, int]:
        with self._lock:
            return {k: v for k, v in self._faults.items() if v}

    def kill(self, instance_id: int, status: Literal["exited", "offline"] = "exited") -> None:
        """Chaos: the container exits or the host drops off. Neither heals by itself.

        GPU billing goes on while exited (the GPU stays reserved) and stops while offline."""
        if status not in ("exited", "offline"):
            raise ValueError("status must be 'exited' or 'offline'")
        with self._lock:
            self._accrue()
            instance = self._live(instance_id)
            instance.killed = status
            instance.gpu_util = None
            instance.status_msg = (
                "container exited" if status == "exited" else "host is not responding"
            )

    def set_metrics(
        self,
        instance_id: int,
        *,
        gpu_util: float | None = None,
        disk_usage: float | None = None,
        status_msg: str | None = None,
    ) -> None:
        """What the host reports (gpu_util in %, disk_usage in GB)."""
        with self._lock:
            instance = self._live(instance_id)
            if gpu_util is not None:
                instance.gpu_util = gpu_util
            if disk_usage is not None:
                instance.disk_usage = disk_usage
            if status_msg is not None:
                instance.status_msg = status_msg

    def record_traffic(self, instance_id: int, *, down_bytes: int = 0, up_bytes: int = 0) -> None:
        """Bill traffic in and out of an instance (Vast bills bytes in any state)."""
        if down_bytes < 0 or up_bytes < 0:
            raise ValueError("byte counts must be ≥ 0")
        with self._lock:
            ledger = self._ledgers.get(instance_id)
            if ledger is None or ledger.closed_at is not None:
                raise KeyError(f"no live instance {instance_id}")
            ledger.bytes_down += down_bytes
            ledger.bytes_up += up_bytes

    def instance(self, instance_id: int) -> dict[str, Any] | None:
        """The instance record as `GET /api/v0/instances/{id}/` shows it; None once destroyed."""
        with self._lock:
            self._accrue()
            live = self._instances.get(instance_id)
            return None if live is None else self._render(live)

    def instances(self) -> list[dict[str, Any]]:
        with self._lock:
            self._accrue()
            return [self._render(i) for i in sorted(self._instances.values(), key=lambda i: i.id)]

    def sim_instance(self, instance_id: int) -> SimInstance:
        """The live instance object (image, env, onstart, api key) for the local stack."""
        with self._lock:
            return self._live(instance_id)

    def ledger(self, instance_id: int) -> Ledger:
        """A snapshot of one instance's billing, destroyed instances included."""
        with self._lock:
            self._accrue()
            ledger = self._ledgers.get(instance_id)
            if ledger is None:
                raise KeyError(f"instance {instance_id} was never rented here")
            return Ledger(**vars(ledger))

    def total_spend_usd(self) -> float:
        with self._lock:
            self._accrue()
            return sum(ledger.total_usd for ledger in self._ledgers.values())

    def gpu_billing_instances(self) -> list[int]:
        """Ids of instances billing GPU time right now (invariant 1 counts these)."""
        with self._lock:
            return sorted(i.id for i in self._instances.values() if self._gpu_billed(i))

    def charges(self) -> list[dict[str, Any]]:
        """Per-instance charges as `GET /api/v0/charges/` lists them, oldest first."""
        with self._lock:
            self._accrue()
            return [self._charge(ledger) for ledger in self._ledgers.values()]

    # -- HTTP -----------------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        hooks: list[tuple[Hook | None, SimInstance]] = []
        with self._lock:
            self._accrue()
            self.request_log.append((request.method, str(request.url)))
            if self._take_fault("connection_error"):
                raise httpx.ConnectError("simulated: connection refused", request=request)
            if self._take_fault("rate_limit"):
                return httpx.Response(
                    429, text=RATE_LIMIT_TEXT, headers={"content-type": "text/plain"}
                )
            if self._take_fault("server_error"):
                return httpx.Response(
                    502, text="<html><body>502 Bad Gateway</body></html>",
                    headers={"content-type": "text/html"},
                )  # fmt: skip
            try:
                response = self._route(request, hooks)
            except _Reply as reply:
                response = reply.response
        for hook, instance in hooks:
            if hook is not None:
                hook(instance)
        return response

    def _route(
        self, request: httpx.Request, hooks: list[tuple[Hook | None, SimInstance]]
    ) -> httpx.Response:
        method, path = request.method, request.url.path
        caller = self._authenticate(request)
        if path.rstrip("/") == "/api/v0/bundles" and method in ("POST", "PUT", "GET"):
            self._require_account(caller)
            return self._search(self._body(request) if method != "GET" else {})
        if match := _ASK_PATH.match(path):
            if method != "PUT":
                raise _error(405, "method_not_allowed", f"{method} is not allowed here")
            self._require_account(caller)
            return self._rent(int(match.group(1)), self._body(request), hooks)
        if path.rstrip("/") == "/api/v0/instances" and method == "GET":
            self._require_account(caller)
            return _json(200, {"instances": self.instances()})
        if path.rstrip("/") == "/api/v1/instances" and method == "GET":
            self._require_account(caller)
            return self._list_page(request.url.params)
        if path.rstrip("/") == "/api/v0/charges" and method == "GET":
            self._require_account(caller)
            return self._charges_page(request.url.params)
        if match := _MANAGE_PATH.match(path):
            instance_id = int(match.group(1))
            if method == "GET":
                self._require_account(caller)
                instance = self._existing(instance_id)
                return _json(200, {"instances": self._render(instance)})
            if method == "PUT":
                return self._manage(caller, instance_id, self._body(request), hooks)
            if method == "DELETE":
                self._require_owner(caller, instance_id)
                instance = self._existing(instance_id)
                self._destroy(instance)
                hooks.append((self.on_destroy, instance))
                return _json(200, {"success": True})
            raise _error(405, "method_not_allowed", f"{method} is not allowed here")
        raise _error(404, "not_found", f"no such endpoint: {method} {path}")

    # -- auth -----------------------------------------------------------------------------

    def _authenticate(self, request: httpx.Request) -> int | None:
        """None for the account key, the instance id for an instance key; 401 otherwise."""
        header = request.headers.get("authorization", "")
        key = header[7:].strip() if header.lower().startswith("bearer ") else ""
        key = key or request.url.params.get("api_key", "")  # Vast accepts it; tether never sends it
        if not key:
            raise _error(401, "auth_error", "Authentication required: no API key given")
        if key == self._api_key:
            return None
        instance_id = self._instance_keys.get(key)
        if instance_id is None:
            raise _error(401, "auth_error", "Invalid API key")
        return instance_id

    def _require_account(self, caller: int | None) -> None:
        if caller is not None:
            raise _error(
                403, "forbidden",
                f"This key belongs to instance {caller}: it may only start, stop or destroy it",
            )  # fmt: skip

    def _require_owner(self, caller: int | None, instance_id: int) -> None:
        if caller is not None and caller != instance_id:
            raise _error(
                403, "forbidden",
                f"This key belongs to instance {caller}, not instance {instance_id}",
            )  # fmt: skip

    # -- routes ---------------------------------------------------------------------------

    def _body(self, request: httpx.Request) -> dict[str, Any]:
        if not request.content:
            return {}
        try:
            body = json.loads(request.content)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _error(400, "invalid_args", "request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise _error(400, "invalid_args", "request body must be a JSON object")
        return body

    def _search(self, query: dict[str, Any]) -> httpx.Response:
        if isinstance(query.get("q"), dict):  # the newer client wraps the filters in "q"
            query = query["q"]
        storage = query.get("allocated_storage", 8.0)
        if not isinstance(storage, int | float) or storage < 0:
            raise _error(400, "invalid_args", "allocated_storage must be a number ≥ 0")
        limit = query.get("limit", 64)
        if not isinstance(limit, int) or limit < 1:
            raise _error(400, "invalid_args", "limit must be a positive integer")
        order = query.get("order", [["score", "desc"]])
        if not (
            isinstance(order, list) and all(isinstance(o, list) and len(o) == 2 for o in order)
        ):
            raise _error(400, "invalid_args", 'order must look like [["dph_total", "asc"]]')
        priced = [price_for_storage(o, float(storage)) for o in self._book.values()]
        found = [o for o in priced if _matches(o, query)]
        found.sort(key=_sort_key(order))
        return _json(200, {"offers": found[:limit]})

    def _rent(
        self,
        offer_id: int,
        body: dict[str, Any],
        hooks: list[tuple[Hook | None, SimInstance]],
    ) -> httpx.Response:
        image = body.get("image")
        if not isinstance(image, str) or not image.strip():
            raise _error(400, "invalid_args", "error 400/3467: Invalid args: 'image' is required")
        disk = body.get("disk", 10)
        if isinstance(disk, bool) or not isinstance(disk, int | float) or disk < MIN_DISK_GB:
            raise _error(400, "invalid_args", f"disk must be a number ≥ {MIN_DISK_GB} (GB)")
        label = body.get("label")
        if label is not None and (not isinstance(label, str) or len(label) > MAX_LABEL_CHARS):
            raise _error(400, "invalid_args", f"label must be a string ≤ {MAX_LABEL_CHARS} chars")
        env = body.get("env") or {}
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise _error(400, "invalid_args", "env must be an object of strings")
        onstart = body.get("onstart") or ""
        args = body.get("args") or []
        if not isinstance(onstart, str) or not isinstance(args, list):
            raise _error(400, "invalid_args", "onstart must be a string and args a list")
        if len(onstart) > MAX_ONSTART_CHARS:
            raise _error(400, "invalid_args", f"onstart exceeds {MAX_ONSTART_CHARS} characters")
        if len(onstart) + sum(len(str(a)) for a in args) > MAX_ONSTART_AND_ARGS_CHARS:
            raise _error(
                400, "invalid_args", f"onstart and args exceed {MAX_ONSTART_AND_ARGS_CHARS} chars"
            )
        runtype = body.get("runtype", "ssh")
        if not isinstance(runtype, str):
            raise _error(400, "invalid_args", "runtype must be a string")
        gone = _error(
            404, "invalid_args",
            f"error 404/3603: no_such_ask Instance type by id {offer_id} is not available.",
            ask_id=offer_id,
        )  # fmt: skip
        if self._take_fault("offer_gone"):
            self._book.pop(offer_id, None)
            raise gone
        offer = self._book.get(offer_id)
        if offer is None:
            raise gone
        if float(offer.get("disk_space") or 0) < disk:
            raise _error(
                400, "invalid_args",
                f"disk {disk} GB exceeds the {offer.get('disk_space')} GB this offer has",
                ask_id=offer_id,
            )  # fmt: skip
        now = self._clock()
        instance_id = self._next_id
        self._next_id += self._rng.randint(1, 40)
        script = onstart
        if not script and len(args) >= 3 and args[:2] == ["bash", "-c"]:
            script = str(args[2])
        instance = SimInstance(
            id=instance_id,
            offer=dict(offer),
            image=image,
            disk_gb=float(disk),
            label=label,
            env=dict(env),
            onstart=script,
            runtype=runtype,
            args=[str(a) for a in args],
            api_key=f"{self._rng.getrandbits(256):064x}",
            created_at=now,
            boot_started_at=now,
            boot_s=self.startup_s,
            status_msg=_PULLING,
        )
        self._rented_offers[offer_id] = self._book.pop(offer_id)
        self._instances[instance_id] = instance
        self._instance_keys[instance.api_key] = instance_id
        self._ledgers[instance_id] = Ledger(
            instance_id=instance_id,
            label=label,
            gpu_name=str(offer.get("gpu_name", "")),
            gpu_usd_per_hour=float(offer.get("dph_base") or 0.0),
            storage_usd_per_hour=float(offer.get("storage_cost") or 0.0) * disk / HOURS_PER_MONTH,
            download_usd_per_gb=float(offer.get("inet_down_cost") or 0.0),
            upload_usd_per_gb=float(offer.get("inet_up_cost") or 0.0),
            opened_at=now,
        )
        hooks.append((self.on_rent, instance))
        return _json(
            200,
            {"success": True, "new_contract": instance_id, "instance_api_key": instance.api_key},
        )

    def _manage(
        self,
        caller: int | None,
        instance_id: int,
        body: dict[str, Any],
        hooks: list[tuple[Hook | None, SimInstance]],
    ) -> httpx.Response:
        state = body.get("state")
        label = body.get("label")
        if state is None and label is None:
            raise _error(400, "invalid_args", "give 'state' (running|stopped) or 'label'")
        if label is not None:
            self._require_account(caller)  # an instance key may not relabel
        else:
            self._require_owner(caller, instance_id)
        instance = self._existing(instance_id)
        if label is not None:
            if not isinstance(label, str) or len(label) > MAX_LABEL_CHARS:
                raise _error(400, "invalid_args", f"label must be a string ≤ {MAX_LABEL_CHARS}")
            instance.label = label
            self._ledgers[instance_id].label = label
        if state == "stopped":
            if instance.intended_status != "stopped":
                instance.intended_status = "stopped"
                instance.gpu_util = None
                instance.status_msg = "stopped by request"
                hooks.append((self.on_stop, instance))
        elif state == "running":
            if instance.intended_status != "running" or instance.killed == "exited":
                instance.intended_status = "running"
                instance.boot_started_at = self._clock()
                instance.boot_s = self.restart_s
                instance.restarted = True
                instance.status_msg = _PULLING
                if instance.killed == "exited":
                    instance.killed = None  # a restart recreates the container
                hooks.append((self.on_start, instance))
        elif state is not None:
            raise _error(
                400, "invalid_args", f"state must be 'running' or 'stopped', not {state!r}"
            )
        return _json(200, {"success": True})

    def _list_page(self, params: httpx.QueryParams) -> httpx.Response:
        try:
            limit = int(params.get("limit", str(PAGE_LIMIT)))
        except ValueError:
            raise _error(400, "invalid_args", "limit must be an integer") from None
        limit = max(1, min(limit, PAGE_LIMIT))
        filters: dict[str, Any] = {}
        raw_filters = params.get("select_filters")
        if raw_filters:
            try:
                filters = json.loads(raw_filters)
            except json.JSONDecodeError:
                raise _error(400, "invalid_args", "select_filters is not valid JSON") from None
            if not isinstance(filters, dict):
                raise _error(400, "invalid_args", "select_filters must be a JSON object")
        token = params.get("after_token")
        after = _decode_token(token) if token else 0
        matching = [r for r in self.instances() if _matches(r, filters)]
        page = [r for r in matching if r["id"] > after][:limit]
        more = bool(page) and any(r["id"] > page[-1]["id"] for r in matching)
        return _json(
            200,
            {
                "success": True,
                "instances": page,
                "next_token": _encode_token(page[-1]["id"]) if more else None,
                "total_instances": len(matching),
            },
        )

    def _charges_page(self, params: httpx.QueryParams) -> httpx.Response:
        raw = params.get("select_filters")
        try:
            filters = json.loads(raw) if raw else {}
            day = filters["day"]
            since, until = float(day["gte"]), float(day["lte"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise _error(
                400, "invalid_args",
                "Must provide both 'day' gte and lte filters for instance charges",
            ) from None  # fmt: skip
        try:
            limit = max(1, min(int(params.get("limit", "100")), CHARGES_PAGE_LIMIT))
        except ValueError:
            raise _error(400, "invalid_args", "limit must be an integer") from None
        token = params.get("after_token")
        after = _decode_token(token) if token else 0
        now = self._clock()
        rows = [
            self._charge(ledger)
            for ledger in sorted(self._ledgers.values(), key=lambda entry: entry.instance_id)
            if ledger.opened_at <= until and (ledger.closed_at or now) >= since
        ]
        page = [r for r in rows if r["metadata"]["instance_id"] > after][:limit]
        more = bool(page) and rows[-1] is not page[-1]
        return _json(
            200,
            {
                "success": True,
                "count": len(page),
                "total": len(rows),
                "results": page,
                "next_token": _encode_token(page[-1]["metadata"]["instance_id"]) if more else None,
            },
        )

    # -- state ----------------------------------------------------------------------------

    def _take_fault(self, kind: str) -> bool:
        if self._faults[kind] > 0:
            self._faults[kind] -= 1
            return True
        return False

    def _live(self, instance_id: int) -> SimInstance:
        instance = self._instances.get(instance_id)
        if instance is None:
            raise KeyError(f"no live instance {instance_id}")
        return instance

    def _existing(self, instance_id: int) -> SimInstance:
        instance = self._instances.get(instance_id)
        if instance is None:
            raise _error(404, "no_such_instance", f"Instance {instance_id} not found.")
        return instance

    def _destroy(self, instance: SimInstance) -> None:
        del self._instances[instance.id]
        self._instance_keys.pop(instance.api_key, None)
        self._ledgers[instance.id].closed_at = self._clock()
        offer_id = int(instance.offer["id"])
        offer = self._rented_offers.pop(offer_id, None)
        if offer is not None and instance.killed != "offline":
            self._book[offer_id] = offer  # the machine is free again; a dead host is not

    @staticmethod
    def _gpu_billed(instance: SimInstance) -> bool:
        return instance.intended_status == "running" and instance.killed != "offline"

    def _accrue(self) -> None:
        """Bill the time since the last call. Billing only changes at mutations, and every
        mutation calls this first, so the integral is exact."""
        now = self._clock()
        elapsed = max(now - self._last_accrued, 0.0)
        self._last_accrued = max(now, self._last_accrued)
        if elapsed == 0:
            return
        for instance in self._instances.values():
            ledger = self._ledgers[instance.id]
            ledger.storage_seconds += elapsed
            if self._gpu_billed(instance):
                ledger.gpu_seconds += elapsed

    def _status(self, instance: SimInstance, now: float) -> str | None:
        if instance.killed is not None:
            return instance.killed
        if instance.intended_status == "stopped":
            return "stopped"
        booted = now - instance.boot_started_at
        if booted >= instance.boot_s:
            return "running"
        if not instance.restarted and booted < min(self.created_s, instance.boot_s):
            return self.first_status
        return "loading"

    def _render(self, instance: SimInstance) -> dict[str, Any]:
        now = self._clock()
        offer = instance.offer
        ledger = self._ledgers[instance.id]
        status = self._status(instance, now)
        record = {name: offer[name] for name in _MACHINE_FIELDS if name in offer}
        record["gpu_totalram"] = offer.get("gpu_total_ram")
        end_date = offer.get("end_date")
        dph_base = ledger.gpu_usd_per_hour
        disk_hour = ledger.storage_usd_per_hour
        running = status == "running"
        record.update(
            {
                "id": instance.id,
                "bundle_id": offer.get("bundle_id"),
                "actual_status": status,
                "intended_status": instance.intended_status,
                "cur_state": instance.intended_status,
                "next_state": instance.intended_status,
                "status_msg": _RUNNING_MSG
                if running and instance.status_msg == _PULLING
                else instance.status_msg,
                "label": instance.label,
                "start_date": instance.created_at,
                "end_date": end_date,
                "duration": (end_date - now) if isinstance(end_date, int | float) else None,
                "dph_base": dph_base,
                "dph_total": dph_base + disk_hour,
                "storage_total_cost": disk_hour,
                "disk_space": instance.disk_gb,
                "disk_usage": instance.disk_usage,
                "gpu_util": instance.gpu_util if running else None,
                "gpu_temp": None,
                "image_uuid": instance.image,
                "image_runtype": instance.runtype,
                "image_args": list(instance.args),
                "onstart": instance.onstart,
                "extra_env": [[k, v] for k, v in instance.env.items()],
                "is_bid": False,
                "inet_down_billed": ledger.bytes_down / 1024**2,  # MB, as Vast shows it
                "inet_up_billed": ledger.bytes_up / 1024**2,
                "ssh_host": f"ssh{instance.id % 9 + 1}.vast.ai",
                "ssh_port": 10_000 + instance.id % 50_000,
                "ssh_idx": str(instance.id % 9 + 1),
                "instance": {
                    "gpuCostPerHour": dph_base,
                    "diskHour": disk_hour,
                    "totalHour": dph_base + disk_hour,
                    "discountTotalHour": 0,
                    "discountedTotalPerHour": 0,
                },
            }
        )
        return record

    def _charge(self, ledger: Ledger) -> dict[str, Any]:
        end = ledger.closed_at if ledger.closed_at is not None else self._clock()
        gb_down = ledger.bytes_down / BYTES_PER_GB
        gb_up = ledger.bytes_up / BYTES_PER_GB
        return {
            "type": "instance",
            "source": f"instance-{ledger.instance_id}",
            "description": f"Instance {ledger.instance_id} ({ledger.gpu_name})",
            "start": ledger.opened_at,
            "end": end,
            "amount": ledger.total_usd,
            "metadata": {"instance_id": ledger.instance_id, "label": ledger.label},
            "items": [
                {"type": "gpu", "quantity": ledger.gpu_seconds / 3600,
                 "rate": ledger.gpu_usd_per_hour, "amount": ledger.gpu_usd},
                {"type": "disk", "quantity": ledger.storage_seconds / 3600,
                 "rate": ledger.storage_usd_per_hour, "amount": ledger.storage_usd},
                {"type": "bwd", "quantity": gb_down,
                 "rate": ledger.download_usd_per_gb, "amount": ledger.download_usd},
                {"type": "bwu", "quantity": gb_up,
                 "rate": ledger.upload_usd_per_gb, "amount": ledger.upload_usd},
            ],
        }  # fmt: skip
