"""`SimulatorState`: what the simulator holds behind its one lock (the offer book, the instances
and the machines they claim, the ledgers, the injected faults), how it is built, and the
helpers every control and route changes it through: claiming and releasing machines,
destroying, billing (`_accrue`), statuses and rendering records. Callers hold the lock."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from tether_local.vast_sim.billing import Ledger
from tether_local.vast_sim.instances import Hook, SimInstance, render
from tether_local.vast_sim.offers import generate_offers
from tether_local.vast_sim.wire import Reply, error

FaultKind = Literal[
    "rate_limit",
    "server_error",
    "offer_gone",
    "connection_error",
    "resources_unavailable",
    "no_instance_api_key",
    "bid_too_low",
    "invalid_args",
]
FAULT_KINDS: tuple[str, ...] = (
    "rate_limit",
    "server_error",
    "offer_gone",
    "connection_error",
    "resources_unavailable",
    "no_instance_api_key",
    "bid_too_low",
    "invalid_args",
)


class SimulatorState:
    """The simulator's state and constructor; `VastSimulator` adds the controls and routes."""

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
        self._charges_outage = False  # `charges_outage()`: the charges answer 502
        self._garbled: dict[int, dict[str, Any]] = {}  # instance id → fields Vast sends oddly
        self._last_accrued = self._clock()
        self.request_log: list[tuple[str, str]] = []  # (method, full URL), for tests

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
        running = instance.intended_status == "running" and not instance.outbid
        return running and instance.killed != "offline"

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
            ledger.bytes_down += round(ledger.down_bytes_per_s * elapsed)  # in any state
            ledger.bytes_up += round(ledger.up_bytes_per_s * elapsed)
            if self._gpu_billed(instance):
                ledger.gpu_seconds += elapsed

    def _status(self, instance: SimInstance, now: float) -> str | None:
        if instance.killed is not None:
            return instance.killed
        if instance.intended_status == "stopped" or instance.outbid:
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
