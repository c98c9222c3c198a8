"""`VastSimulator`: the simulator's state, its Python controls (chaos included), and its HTTP
routes with their authentication. Every public method and `handle` are thread-safe; hooks run
outside the lock.

What it models is in the package docstring. Its parts live next to it: `instances` (records,
rent checks, rendering, the paged list), `billing` (the ledger and charges), `search` (offers and
Vast's filter language) and `wire` (replies, errors, tokens).

Why one file of ~560 lines: it is one object's state behind one lock (the instances, the
machines they claim, the ledgers, the injected faults); the controls and the routes both read
and change it, and the pure parts have already moved out. Splitting the class by caller would
spread the lock's discipline over two files.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

import httpx

from tether_local.offers import HOURS_PER_MONTH, generate_offers
from tether_local.vast_sim.billing import Ledger, charge, charges_page
from tether_local.vast_sim.instances import (
    MAX_LABEL_CHARS,
    PULLING,
    Hook,
    SimInstance,
    list_page,
    parse_rent,
    render,
)
from tether_local.vast_sim.search import search
from tether_local.vast_sim.wire import (
    RATE_LIMIT_TEXT,
    Reply,
    error,
    json_response,
    request_body,
)

FaultKind = Literal[
    "rate_limit",
    "server_error",
    "offer_gone",
    "connection_error",
    "resources_unavailable",
    "no_instance_api_key",
]
FAULT_KINDS: tuple[str, ...] = (
    "rate_limit",
    "server_error",
    "offer_gone",
    "connection_error",
    "resources_unavailable",
    "no_instance_api_key",
)
_MANAGE_PATH = re.compile(r"^/api/v0/instances/(\d+)/?$")
_ASK_PATH = re.compile(r"^/api/v0/asks/(\d+)/?$")


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
        # offer id → record, while a live instance holds the machine (a stopped one does not)
        self._rented_offers: dict[int, dict[str, Any]] = {}
        self._instances: dict[int, SimInstance] = {}
        self._ledgers: dict[int, Ledger] = {}
        self._instance_keys: dict[str, int] = {}
        self._next_id = 30_000_000 + self._rng.randint(0, 9_999_999)
        self._faults: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)
        self._outage = False
        self._garbled: dict[int, dict[str, Any]] = {}  # instance id → fields Vast sends oddly
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
        """The offer is taken by someone else (renting it then answers no_such_ask; starting a
        stopped instance on that machine answers resources_unavailable)."""
        with self._lock:
            self._book.pop(offer_id, None)

    def inject(self, kind: FaultKind, count: int = 1) -> None:
        """Make the next `count` matching requests fail: `rate_limit` (429, plain text),
        `server_error` (502), `connection_error` (httpx.ConnectError) on any request;
        `offer_gone` on rents (404 no_such_ask, and the offer leaves the book);
        `resources_unavailable` on starts (400 `resources_unavailable`, the instance stays
        stopped); `no_instance_api_key` on rents (the reply leaves out `instance_api_key`, as
        some real replies do; the container still gets its key)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"kind must be one of {', '.join(FAULT_KINDS)}, got {kind!r}")
        if count < 0:
            raise ValueError("count must be ≥ 0")
        with self._lock:
            self._faults[kind] += count

    def outage(self, on: bool = True) -> None:
        """Chaos: Vast is down. Until `outage(False)` every API request answers 502 Bad Gateway
        (after any injected fault it consumes); instances keep running and billing."""
        with self._lock:
            self._outage = on

    @property
    def in_outage(self) -> bool:
        return self._outage

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
            if status == "offline" and not instance.holds_machine:
                self._book.pop(int(instance.offer["id"]), None)  # a dead host offers nothing
            instance.gpu_util = None
            instance.status_msg = (
                "container exited" if status == "exited" else "host is not responding"
            )

    def fail_pull(self, instance_id: int, message: str) -> None:
        """The host cannot pull the instance's image (the local stack has no stand-in for it):
        as on Vast, the instance never reaches `running`; it stays `loading` with `message` as
        its `status_msg` until it is destroyed. Billing goes on as for any loading instance."""
        with self._lock:
            self._accrue()
            instance = self._live(instance_id)
            instance.pull_error = message
            instance.status_msg = message

    def garble(self, instance_id: int, **fields: Any) -> None:
        """Chaos for parsers: from now on, what the HTTP API sends for this instance has these
        fields replaced by the values given, as odd as real records get (`gpu_util="n/a"`, an
        ISO `start_date`, a numeric `label`, the `id` as text) or worse. The Python view
        (`instance()`, `instances()`) keeps the true record; filters and pages use it too."""
        with self._lock:
            self._live(instance_id)
            self._garbled.setdefault(instance_id, {}).update(fields)

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
            now = self._clock()
            return [charge(ledger, now) for ledger in self._ledgers.values()]

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
            if self._take_fault("server_error") or self._outage:
                return httpx.Response(
                    502, text="<html><body>502 Bad Gateway</body></html>",
                    headers={"content-type": "text/html"},
                )  # fmt: skip
            try:
                response = self._route(request, hooks)
            except Reply as reply:
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
            return search(self._book.values(), request_body(request) if method != "GET" else {})
        if match := _ASK_PATH.match(path):
            if method != "PUT":
                raise error(405, "method_not_allowed", f"{method} is not allowed here")
            self._require_account(caller)
            return self._rent(int(match.group(1)), request_body(request), hooks)
        if path.rstrip("/") == "/api/v0/instances" and method == "GET":
            self._require_account(caller)
            return json_response(200, {"instances": [self._sent(r) for r in self.instances()]})
        if path.rstrip("/") == "/api/v1/instances" and method == "GET":
            self._require_account(caller)
            return list_page(self.instances(), request.url.params, self._sent)
        if path.rstrip("/") == "/api/v0/charges" and method == "GET":
            self._require_account(caller)
            return charges_page(self._ledgers.values(), request.url.params, self._clock())
        if match := _MANAGE_PATH.match(path):
            instance_id = int(match.group(1))
            if method == "GET":
                self._require_account(caller)
                live = self._instances.get(instance_id)
                # Vast answers a missing instance with 200 and null, not 404 (the official
                # client's `show instance` returns None on it).
                shown = self._sent(self._render(live)) if live else None
                return json_response(200, {"instances": shown})
            if method == "PUT":
                return self._manage(caller, instance_id, request_body(request), hooks)
            if method == "DELETE":
                self._require_owner(caller, instance_id)
                instance = self._existing(instance_id)
                self._destroy(instance)
                hooks.append((self.on_destroy, instance))
                return json_response(200, {"success": True})
            raise error(405, "method_not_allowed", f"{method} is not allowed here")
        raise error(404, "not_found", f"no such endpoint: {method} {path}")

    # -- auth -----------------------------------------------------------------------------

    def _authenticate(self, request: httpx.Request) -> int | None:
        """None for the account key, the instance id for an instance key; 401 otherwise."""
        header = request.headers.get("authorization", "")
        key = header[7:].strip() if header.lower().startswith("bearer ") else ""
        key = key or request.url.params.get("api_key", "")  # Vast accepts it; tether never sends it
        if not key:
            raise error(401, "auth_error", "Authentication required: no API key given")
        if key == self._api_key:
            return None
        instance_id = self._instance_keys.get(key)
        if instance_id is None:
            raise error(401, "auth_error", "Invalid API key")
        return instance_id

    def _require_account(self, caller: int | None) -> None:
        if caller is not None:
            raise error(
                403, "forbidden",
                f"This key belongs to instance {caller}: it may only start, stop or destroy it",
            )  # fmt: skip

    def _require_owner(self, caller: int | None, instance_id: int) -> None:
        if caller is not None and caller != instance_id:
            raise error(
                403, "forbidden",
                f"This key belongs to instance {caller}, not instance {instance_id}",
            )  # fmt: skip

    # -- routes ---------------------------------------------------------------------------

    def _rent(
        self,
        offer_id: int,
        body: dict[str, Any],
        hooks: list[tuple[Hook | None, SimInstance]],
    ) -> httpx.Response:
        wanted = parse_rent(body)
        gone = error(
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
        if float(offer.get("disk_space") or 0) < wanted.disk:
            raise error(
                400, "invalid_args",
                f"disk {wanted.disk} GB exceeds the {offer.get('disk_space')} GB this offer has",
                ask_id=offer_id,
            )  # fmt: skip
        now = self._clock()
        instance_id = self._next_id
        self._next_id += self._rng.randint(1, 40)
        instance = SimInstance(
            id=instance_id,
            offer=dict(offer),
            image=wanted.image,
            disk_gb=float(wanted.disk),
            label=wanted.label,
            env=dict(wanted.env),
            onstart=wanted.script,
            runtype=wanted.runtype,
            args=[str(a) for a in wanted.args],
            api_key=f"{self._rng.getrandbits(256):064x}",
            created_at=now,
            boot_started_at=now,
            boot_s=self.startup_s,
            status_msg=PULLING,
        )
        self._rented_offers[offer_id] = self._book.pop(offer_id)
        self._instances[instance_id] = instance
        self._instance_keys[instance.api_key] = instance_id
        self._ledgers[instance_id] = Ledger(
            instance_id=instance_id,
            label=wanted.label,
            gpu_name=str(offer.get("gpu_name", "")),
            gpu_usd_per_hour=float(offer.get("dph_base") or 0.0),
            storage_usd_per_hour=float(offer.get("storage_cost") or 0.0)
            * wanted.disk
            / HOURS_PER_MONTH,
            download_usd_per_gb=float(offer.get("inet_down_cost") or 0.0),
            upload_usd_per_gb=float(offer.get("inet_up_cost") or 0.0),
            opened_at=now,
        )
        hooks.append((self.on_rent, instance))
        reply: dict[str, Any] = {"success": True, "new_contract": instance_id}
        if not self._take_fault("no_instance_api_key"):
            reply["instance_api_key"] = instance.api_key
        return json_response(200, reply)

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
            raise error(400, "invalid_args", "give 'state' (running|stopped) or 'label'")
        if label is not None:
            self._require_account(caller)  # an instance key may not relabel
        else:
            self._require_owner(caller, instance_id)
        instance = self._existing(instance_id)
        if label is not None:
            if not isinstance(label, str) or len(label) > MAX_LABEL_CHARS:
                raise error(400, "invalid_args", f"label must be a string ≤ {MAX_LABEL_CHARS}")
            instance.label = label
            self._ledgers[instance_id].label = label
        if state == "stopped":
            if instance.intended_status != "stopped":
                instance.intended_status = "stopped"
                instance.gpu_util = None
                instance.status_msg = "stopped by request"
                self._release_machine(instance)
                hooks.append((self.on_stop, instance))
        elif state == "running":
            if instance.intended_status != "running" or instance.killed == "exited":
                self._claim_machine(instance)
                instance.intended_status = "running"
                instance.boot_started_at = self._clock()
                instance.boot_s = self.restart_s
                instance.restarted = True
                instance.status_msg = PULLING
                if instance.killed == "exited":
                    instance.killed = None  # a restart recreates the container
                hooks.append((self.on_start, instance))
        elif state is not None:
            raise error(400, "invalid_args", f"state must be 'running' or 'stopped', not {state!r}")
        return json_response(200, {"success": True})

    # -- state ----------------------------------------------------------------------------

    def _release_machine(self, instance: SimInstance) -> None:
        """A stopped instance frees its machine's GPUs: the offer is back in the book, for
        anyone to rent (a host that went offline offers nothing)."""
        offer_id = int(instance.offer["id"])
        if instance.holds_machine and offer_id in self._rented_offers:
            offer = self._rented_offers.pop(offer_id)
            if instance.killed != "offline":
                self._book[offer_id] = offer
        instance.holds_machine = False

    def _claim_machine(self, instance: SimInstance) -> None:
        """A start takes the machine back, or fails with resources_unavailable when someone
        else rented it meanwhile (or a fault says so); the instance then stays stopped."""
        offer_id = int(instance.offer["id"])
        if instance.holds_machine:
            if self._take_fault("resources_unavailable"):
                raise self._unavailable(instance)
            return
        if self._take_fault("resources_unavailable") or offer_id not in self._book:
            raise self._unavailable(instance)
        self._rented_offers[offer_id] = self._book.pop(offer_id)
        instance.holds_machine = True

    @staticmethod
    def _unavailable(instance: SimInstance) -> Reply:
        machine = instance.offer.get("machine_id")
        return error(
            400, "resources_unavailable",
            f"Required resources are unavailable on machine {machine}: its GPUs are rented by "
            "another instance. Try again later, or destroy this instance and rent another.",
        )  # fmt: skip

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
            raise error(404, "no_such_instance", f"Instance {instance_id} not found.")
        return instance

    def _destroy(self, instance: SimInstance) -> None:
        del self._instances[instance.id]
        self._garbled.pop(instance.id, None)
        self._instance_keys.pop(instance.api_key, None)
        self._ledgers[instance.id].closed_at = self._clock()
        if instance.holds_machine:  # the machine is free again; a dead host is not
            self._release_machine(instance)

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
        if instance.pull_error is not None:
            return "loading"
        booted = now - instance.boot_started_at
        if booted >= instance.boot_s:
            return "running"
        if not instance.restarted and booted < min(self.created_s, instance.boot_s):
            return self.first_status
        return "loading"

    def _sent(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record as the HTTP API sends it: `garble()`d fields replaced."""
        return {**record, **self._garbled.get(int(record["id"]), {})}

    def _render(self, instance: SimInstance) -> dict[str, Any]:
        now = self._clock()
        return render(instance, self._ledgers[instance.id], self._status(instance, now), now)


__all__ = ["FAULT_KINDS", "FaultKind", "VastSimulator"]
