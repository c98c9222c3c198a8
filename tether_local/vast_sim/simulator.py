"""`VastSimulator`: the simulator's Python controls (chaos included) over its state and HTTP
routes. Every public method and `handle` are thread-safe; hooks run outside the lock.

What it models is in the package docstring. Its parts live next to it: `state` (what it holds
behind its lock, the constructor, the helpers that change it), `routes` (`handle`, the HTTP
routes and their authentication), `instances` (records, rent checks, rendering, the paged
list), `billing` (the ledger and charges), `search` (offers and Vast's filter language) and
`wire` (replies, errors, tokens).
"""

from __future__ import annotations

from typing import Any, Literal

from tether_local.vast_sim.billing import Ledger, charge
from tether_local.vast_sim.instances import PULLING, SimInstance
from tether_local.vast_sim.routes import SimulatorRoutes
from tether_local.vast_sim.state import FAULT_KINDS, FaultKind


class VastSimulator(SimulatorRoutes):
    """The Vast API in memory. See the module docstring for what it models."""

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
        some real replies do; the container still gets its key); `bid_too_low` on rents with a
        bid (400 `invalid_price`: the offer's `min_bid` rose past it since the search);
        `invalid_args` on rents (400 `invalid_args` naming `env`, as when Vast bounds a request
        tighter than it documents; nothing is rented and the offer stays)."""
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

    def charges_outage(self, on: bool = True) -> None:
        """Until `charges_outage(False)`, `GET /api/v0/charges/` answers 502 while every other
        route answers: the charges cannot be read, the instances can (and bill on)."""
        with self._lock:
            self._charges_outage = on

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

    def outbid(self, instance_id: int, *, by_usd_per_hour: float | None = None) -> None:
        """Chaos: a higher bid takes an interruptible instance's machine. As Vast reports it,
        `actual_status` goes `stopped` while `intended_status` stays `running`; the machine's
        `min_bid` rises to the winning bid (default 10 % over ours), its GPUs are the other
        renter's (not on offer), GPU billing stops and storage goes on. The `on_stop` hook runs
        (the local host's processes are killed as on a real stop, its disk kept)."""
        with self._lock:
            self._accrue()
            instance = self._live(instance_id)
            if instance.bid is None:
                raise ValueError(f"instance {instance_id} is on-demand: only a bid is outbid")
            if instance.outbid or instance.intended_status != "running" or instance.killed:
                raise ValueError(f"instance {instance_id} is not running: nothing to outbid")
            winning = by_usd_per_hour if by_usd_per_hour is not None else instance.bid * 1.1
            if winning <= instance.bid:
                raise ValueError("the winning bid must be above the instance's own")
            offer_id = int(instance.offer["id"])
            self._rented_offers.pop(offer_id, None)  # the other renter holds it now
            self._book.pop(offer_id, None)
            instance.holds_machine = False
            instance.outbid = True
            instance.offer["min_bid"] = winning
            instance.gpu_util = None
            instance.status_msg = "stopped: outbid"
        if self.on_stop is not None:
            self.on_stop(instance)

    def win(self, instance_id: int) -> None:
        """Chaos: an outbid instance wins its machine back (the higher bid ended): it starts
        again by itself, as after a restart (`restart_s` to `running`); the `on_start` hook runs
        (the local host's container restarts: onstart and the agent of the same generation run
        again on the kept disk)."""
        with self._lock:
            self._accrue()
            instance = self._live(instance_id)
            if not instance.outbid:
                raise ValueError(f"instance {instance_id} is not outbid")
            instance.outbid = False
            offer_id = int(instance.offer["id"])
            instance.offer["min_bid"] = min(
                float(instance.offer.get("min_bid") or 0.0), float(instance.bid or 0.0)
            )
            if instance.intended_status != "running":
                return  # stopped by request meanwhile: it stays stopped
            self._book.pop(offer_id, None)
            self._rented_offers[offer_id] = dict(instance.offer)
            instance.holds_machine = True
            instance.boot_started_at = self._clock()
            instance.boot_s = self.restart_s
            instance.restarted = True
            instance.status_msg = PULLING
        if self.on_start is not None:
            self.on_start(instance)

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

    def set_traffic_rate(
        self, instance_id: int, *, down_bytes_per_s: float = 0.0, up_bytes_per_s: float = 0.0
    ) -> None:
        """Bill traffic in and out of an instance at a steady rate from now on (Vast bills
        bytes in any state, whatever the host reports), until set again."""
        if down_bytes_per_s < 0 or up_bytes_per_s < 0:
            raise ValueError("traffic rates must be ≥ 0")
        with self._lock:
            self._accrue()
            ledger = self._ledgers.get(instance_id)
            if ledger is None or ledger.closed_at is not None:
                raise KeyError(f"no live instance {instance_id}")
            ledger.down_bytes_per_s = down_bytes_per_s
            ledger.up_bytes_per_s = up_bytes_per_s

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


__all__ = ["FAULT_KINDS", "FaultKind", "VastSimulator"]
