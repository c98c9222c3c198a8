"""`SimulatorRoutes`: the simulator's HTTP side: `handle` (faults and outage first), the routes
(search, rent, list, charges, show, manage, destroy) and their authentication (the account
key, or an instance's own key for its start, stop and destroy)."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tether_local.vast_sim.billing import Ledger, charges_page
from tether_local.vast_sim.instances import (
    MAX_LABEL_CHARS,
    PULLING,
    Hook,
    SimInstance,
    check_bid,
    list_page,
    parse_rent,
)
from tether_local.vast_sim.offers import HOURS_PER_MONTH
from tether_local.vast_sim.search import search
from tether_local.vast_sim.state import SimulatorState
from tether_local.vast_sim.wire import (
    RATE_LIMIT_TEXT,
    Reply,
    error,
    json_response,
    request_body,
)

_MANAGE_PATH = re.compile(r"^/api/v0/instances/(\d+)/?$")
_ASK_PATH = re.compile(r"^/api/v0/asks/(\d+)/?$")


class SimulatorRoutes(SimulatorState):
    """The Vast HTTP API over the simulator's state; thread-safe, hooks run outside the lock."""

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
            if self._charges_outage:
                raise error(502, "server_error", "simulated: charges unavailable")
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
        if self._take_fault("invalid_args"):
            raise error(
                400, "invalid_args",
                "env: refused (simulated: a bound tighter than Vast's documented ones)",
            )  # fmt: skip
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
        outbid = wanted.price is not None and self._take_fault("bid_too_low")
        check_bid(offer, wanted.price, offer_id, outbid=outbid)
        if float(offer.get("disk_space") or 0) < wanted.disk:
            raise error(
                400, "invalid_args",
                f"disk: {wanted.disk} GB exceeds the {offer.get('disk_space')} GB this offer has",
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
            bid=None if wanted.price is None else float(wanted.price),
        )
        self._rented_offers[offer_id] = self._book.pop(offer_id)
        self._instances[instance_id] = instance
        self._instance_keys[instance.api_key] = instance_id
        self._ledgers[instance_id] = Ledger(
            instance_id=instance_id,
            label=wanted.label,
            gpu_name=str(offer.get("gpu_name", "")),
            gpu_usd_per_hour=float(
                wanted.price if wanted.price is not None else offer.get("dph_base") or 0.0
            ),
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
                raise error(400, "invalid_args", f"label: must be a string ≤ {MAX_LABEL_CHARS}")
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
