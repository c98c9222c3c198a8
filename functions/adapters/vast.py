"""The Vast.ai REST API, as tether uses it: search offers, rent, watch, stop, destroy.

Facts this code relies on (Vast's OpenAPI spec and official client; docs/vast.md):
- auth is `Authorization: Bearer <key>` only; the key never goes into a URL (URLs end up in logs);
- rate limits are per endpoint, answered with 429 and a plain-text body, no Retry-After;
- error bodies are `{success: false, error, msg}` JSON or plain text, and an offer that is gone
  shows up as 404, 410 or even 400 whose text carries the token `no_such_ask`.

Every call retries 429, 5xx and connection failures with jittered exponential backoff under an
overall deadline, then raises a typed error. Renting is not idempotent, so a rent is retried
only when the request surely did not reach Vast (429, connection refused). `bounded(seconds)`
gives a client whose calls all end within that time from now (for a caller with a deadline of
its own: the monitor's Lambda).

Listings (offers, instances, charges) are read one record at a time and come back as a `Listing`:
the records that were read, and `issues` naming those that were not (id as sent, fields). Odd
values ("n/a", numbers as text, ISO dates) are normalised first; one bad record never fails the
listing. A missing instance is None whether Vast answers 404 or 200 `{"instances": null}` (what it
really sends).

The errors, records and request checks are `vast_wire.py`; they are importable from here too, the
adapter's one public face.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from functions.adapters.vast_wire import (
    GONE_INSTANCE_CODES,
    INVALID_ARGS,
    INVALID_PRICE,
    NO_SUCH_ASK,
    RESOURCES_UNAVAILABLE,
    AuthFailed,
    BidTooLow,
    Instance,
    InstanceGone,
    Listing,
    OfferGone,
    RateLimited,
    RecordIssue,
    RentResult,
    ResourcesUnavailable,
    VastError,
    VastInvalidArgs,
    VastUnavailable,
    check_charge,
    check_id,
    check_label,
    check_rent_args,
    check_within_limits,
    describe_issues,
    error_fields,
    offer_query,
    parse_instance,
    parse_offer,
    parse_records,
    success_false,
    typed_error,
)
from functions.domain.jobspec import Resources
from functions.domain.offer import Offer
from functions.domain.vast_limits import MIN_DISK_GB

DEFAULT_BASE_URL = "https://console.vast.ai"
INSTANCES_PAGE_LIMIT = 25  # the most /api/v1/instances/ returns per page
CHARGES_PAGE_LIMIT = 500
FIRST_BACKOFF_S = 0.15
MAX_BACKOFF_S = 8.0

__all__ = [
    "AuthFailed",
    "BidTooLow",
    "Instance",
    "InstanceGone",
    "Listing",
    "OfferGone",
    "RateLimited",
    "RecordIssue",
    "RentResult",
    "ResourcesUnavailable",
    "VastClient",
    "VastError",
    "VastInvalidArgs",
    "VastUnavailable",
    "describe_issues",
    "offer_query",
]


class VastClient:
    """A small, typed client of the Vast REST API. Thread-compatible, not thread-safe."""

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        client: httpx.Client | None = None,
        timeout_s: float = 20,
        deadline_s: float = 60,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not api_key or not api_key.strip():
            raise ValueError("api_key must not be empty")
        if timeout_s <= 0 or deadline_s <= 0:
            raise ValueError("timeout_s and deadline_s must be > 0")
        self._api_key = api_key.strip()
        self._base_url = base_url.rstrip("/")
        self._client = client if client is not None else httpx.Client()
        self._timeout_s = timeout_s
        self._deadline_s = deadline_s
        self._sleep = sleep
        self._monotonic = monotonic
        self._rng = rng if rng is not None else random.Random()
        self._until: float | None = None  # self._monotonic() by which every call must end

    def bounded(self, seconds: float) -> VastClient:
        """This client (same connection pool and key), with every call from now on ending
        within `seconds`: a request gets at most the time left, no retry starts that cannot
        end in it, and a call made after it raises VastUnavailable at once."""
        bounded = copy.copy(self)
        bounded._until = self._monotonic() + max(0.0, seconds)
        return bounded

    # -- offers ---------------------------------------------------------------------------

    def search_offers(
        self, resources: Resources, *, disk_gb: float | None = None, limit: int = 256
    ) -> Listing[Offer]:
        """Offers that meet `resources` (bid offers, priced at `min_bid`, for
        `market: interruptible`; on-demand ones otherwise), cheapest `dph_total` first, priced for
        `disk_gb` of storage (default `resources.min_disk_gb`). Records that do not parse (an
        offer without a price among them) are skipped and named in `issues`, never fatal: one
        odd host must not hide the market."""
        disk = resources.min_disk_gb if disk_gb is None else disk_gb
        if disk < MIN_DISK_GB:
            raise ValueError(f"disk_gb must be at least {MIN_DISK_GB} (Vast's minimum), got {disk}")
        if not 1 <= limit <= 10_000:
            raise ValueError(f"limit must be between 1 and 10000, got {limit}")
        body = self._json("POST", "/api/v0/bundles/", json_body=offer_query(resources, disk, limit))
        records = body.get("offers") if isinstance(body, dict) else None
        if not isinstance(records, list):
            raise VastError("search answered without an `offers` list", status=200)
        return parse_records(records, parse_offer)

    # -- renting --------------------------------------------------------------------------

    def rent(
        self,
        offer_id: int,
        *,
        image: str,
        disk_gb: float,
        label: str,
        env: dict[str, str],
        onstart: str,
        runtype: str = "args",
        price: float | None = None,
    ) -> RentResult:
        """Rent `offer_id` (PUT /api/v0/asks/{id}/). Raises OfferGone when it was taken.

        With runtype "args" the image's entrypoint is kept and `onstart` runs as its command
        (`bash -c`), because Vast runs `onstart` itself only for ssh/jupyter launch modes
        (`functions.domain.onstart.launch_mode`).
        `price` (GPU $/h) rents an interruptible instance with that bid; a bid below the
        offer's current `min_bid` raises BidTooLow (400 `invalid_price`).

        A body over one of Vast's documented bounds (`functions/domain/vast_limits.py`) is not
        sent: VastInvalidArgs names the field, its bound and its size. A 400 `invalid_args`
        from Vast raises VastInvalidArgs with Vast's message. Neither is about this offer.
        """
        check_rent_args(offer_id, image, disk_gb, label, env, onstart, runtype)
        if price is not None and (isinstance(price, bool) or not isinstance(price, int | float)):
            raise ValueError(f"price must be a bid in $/h, got {price!r}")
        payload: dict[str, Any] = {
            "client_id": "me",
            "image": image,
            "disk": disk_gb,
            "label": label,
            "env": dict(env),
            "runtype": runtype,
            # Fail now (410) rather than create an instance that waits for the machine.
            "cancel_unavail": True,
        }
        if price is not None:
            payload["price"] = float(price)  # the bid: interruptible
        if runtype == "args":
            payload["args"] = ["bash", "-c", onstart]
        else:
            payload["onstart"] = onstart
        check_within_limits(payload)
        try:
            body = self._json(
                "PUT", f"/api/v0/asks/{offer_id}/", json_body=payload, idempotent=False
            )
        except InstanceGone as exc:  # a bare 404 on an ask: "offer not found or not available"
            raise OfferGone(exc.message, status=exc.status, code="no_such_ask") from None
        contract = body.get("new_contract") if isinstance(body, dict) else None
        if success_false(body) or not isinstance(contract, int):
            code, message = error_fields(body)
            if code == "no_such_ask" or NO_SUCH_ASK.search(message):
                raise OfferGone(message, status=200, code="no_such_ask")
            if code == INVALID_PRICE:
                raise BidTooLow(message, status=200, code=code)
            if code == INVALID_ARGS:
                raise VastInvalidArgs.from_answer(message, status=200, code=code)
            raise VastError(f"rent was not confirmed: {message}", status=200, code=code)
        key = body.get("instance_api_key")
        return RentResult(
            instance_id=contract, instance_api_key=key if isinstance(key, str) else None
        )

    # -- instances ------------------------------------------------------------------------

    def list_instances(
        self, *, label_range: tuple[str, str] | None = None, label: str | None = None
    ) -> Listing[Instance]:
        """Every instance of the account, following `next_token` through all pages. A record
        whose id, label or status cannot be read is skipped; one whose other fields cannot be
        read is kept without them; both are named in `issues`. `label_range=(low, high)`: only
        the labels `low <= label < high`; `label`: only that label (a `select_filters` on
        `label`, so that disjoint ranges can be listed side by side: keyset pages cannot).
        Callers still check each record's label: a filter narrows the pages, it does not
        vouch for what comes back."""
        wanted: dict[str, str] = {}
        if label_range is not None:
            wanted = {"gte": label_range[0], "lt": label_range[1]}
        if label is not None:
            wanted["eq"] = label
        params: dict[str, str] = {}
        if wanted:
            params["select_filters"] = json.dumps({"label": wanted}, separators=(",", ":"))
        return parse_records(
            self._pages("/api/v1/instances/", "instances", INSTANCES_PAGE_LIMIT, params),
            parse_instance,
        )

    def show_instance(self, instance_id: int) -> Instance | None:
        """One instance, or None when Vast says it does not exist: 200 `{"instances": null}` is
        how it says so (a 404 or 410 counts too). Raises VastError when the record it sends
        cannot be read."""
        check_id(instance_id, "instance_id")
        try:
            body = self._json("GET", f"/api/v0/instances/{instance_id}/")
        except (InstanceGone, OfferGone):  # 404, or 410 Gone
            return None
        record = body.get("instances") if isinstance(body, dict) else None
        if isinstance(record, list):  # some deployments answer with a one-element list
            record = record[0] if record else None
        if not isinstance(record, dict) or not record:
            return None
        record.setdefault("id", instance_id)
        instance, issue = parse_instance(record)
        if instance is None:
            fields = ", ".join(issue.fields) if issue else "record"
            raise VastError(f"instance {instance_id} cannot be read ({fields})", status=200)
        return instance

    def stop_instance(self, instance_id: int) -> None:
        """Stop (GPU billing ends, storage goes on). Raises InstanceGone if it does not exist."""
        self._manage(instance_id, {"state": "stopped"})

    def start_instance(self, instance_id: int) -> None:
        """Start a stopped instance. Raises ResourcesUnavailable when its machine's GPUs were
        taken meanwhile (it stays stopped), InstanceGone if it does not exist."""
        self._manage(instance_id, {"state": "running"})

    def set_label(self, instance_id: int, label: str) -> None:
        check_label(label)
        self._manage(instance_id, {"label": label})

    def destroy_instance(self, instance_id: int) -> None:
        """Destroy (all billing ends). Already gone counts as success: destroy is idempotent."""
        check_id(instance_id, "instance_id")
        try:
            body = self._json("DELETE", f"/api/v0/instances/{instance_id}/")
        except InstanceGone:
            return
        except VastError as exc:
            if exc.status == 410:
                return
            raise
        if success_false(body):
            code, message = error_fields(body)
            if code in GONE_INSTANCE_CODES:
                return
            raise VastError(f"destroy was refused: {message}", status=200, code=code)

    # -- billing --------------------------------------------------------------------------

    def charges(
        self, *, since: float | None = None, until: float | None = None
    ) -> Listing[dict[str, Any]]:
        """Raw per-contract charge items (GET /api/v0/charges/), default the last 7 days.

        Best effort, for reconciling spend (`functions.domain.spend.charges_by_instance`): each
        names its instance in `source` ("instance-<id>") and lists gpu, disk, bwd and bwu items.
        An item that should be an instance's but cannot be read is skipped and named in `issues`.
        """
        end = time.time() if until is None else until
        start = end - 7 * 86_400 if since is None else since
        if start > end:
            raise ValueError("since must not be after until")
        filters = {"day": {"gte": int(start), "lte": int(end) + 1}}
        return parse_records(
            self._pages(
                "/api/v0/charges/",
                "results",
                CHARGES_PAGE_LIMIT,
                {"select_filters": json.dumps(filters, separators=(",", ":"))},
            ),
            check_charge,
        )

    # -- plumbing -------------------------------------------------------------------------

    def _manage(self, instance_id: int, change: dict[str, str]) -> None:
        check_id(instance_id, "instance_id")
        body = self._json("PUT", f"/api/v0/instances/{instance_id}/", json_body=change)
        if success_false(body):
            code, message = error_fields(body)
            if code in GONE_INSTANCE_CODES:
                raise InstanceGone(message, status=200, code=code)
            if code == RESOURCES_UNAVAILABLE:
                raise ResourcesUnavailable(message, status=200, code=code)
            raise VastError(f"change {change} was refused: {message}", status=200, code=code)

    def _pages(
        self, path: str, items_key: str, limit: int, params: dict[str, str]
    ) -> Iterator[Any]:
        token: str | None = None
        seen: set[str] = set()
        while True:
            query = {**params, "limit": str(limit)}
            if token:
                query["after_token"] = token
            body = self._json("GET", path, params=query)
            items = body.get(items_key) if isinstance(body, dict) else None
            if not isinstance(items, list):
                raise VastError(f"{path} answered without an `{items_key}` list", status=200)
            yield from items
            next_token = body.get("next_token")
            if not isinstance(next_token, str) or not next_token or not items:
                return
            if next_token in seen:  # a server that loops must not loop us forever
                raise VastError(f"{path} returned the same next_token twice", status=200)
            seen.add(next_token)
            token = next_token

    def _json(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        idempotent: bool = True,
    ) -> Any:
        response = self._request(
            method, path, json_body=json_body, params=params, idempotent=idempotent
        )
        if response.status_code >= 400:
            raise typed_error(response)
        if not response.content:
            return {}
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            raise VastError(
                f"{method} {path} answered with non-JSON: {response.text[:200]!r}",
                status=response.status_code,
            ) from None

    def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any] | None,
        params: dict[str, str] | None,
        idempotent: bool,
    ) -> httpx.Response:
        started = self._monotonic()
        waited = 0.0  # counted separately so an injected (instant) sleep still ends the loop
        backoff = FIRST_BACKOFF_S * self._rng.uniform(1.0, 1.5)
        headers = {"Authorization": f"Bearer {self._api_key}", "Accept": "application/json"}
        url = self._base_url + path
        deadline_s = self._deadline_s
        if self._until is not None:
            deadline_s = min(deadline_s, self._until - started)
            if deadline_s <= 0:
                raise VastUnavailable(f"{method} {path}: no time left for this call")
        while True:
            failure: VastError
            timeout_s = self._timeout_s
            if self._until is not None:
                timeout_s = max(0.001, min(timeout_s, self._until - self._monotonic()))
            try:
                response = self._client.request(
                    method, url, json=json_body, params=params, headers=headers,
                    timeout=timeout_s,
                )  # fmt: skip
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # The request never left: safe to retry even a rent.
                failure = VastUnavailable(f"cannot connect to {self._base_url}: {exc}")
            except httpx.TransportError as exc:
                failure = VastUnavailable(
                    f"{method} {path} failed in flight: {type(exc).__name__}: {exc}",
                    maybe_applied=not idempotent,
                )
                if not idempotent:
                    raise failure from None
            else:
                status = response.status_code
                if status == 429 or (status >= 500 and idempotent):
                    failure = typed_error(response)
                elif status >= 500:
                    err = typed_error(response)
                    raise VastUnavailable(
                        err.message, status=status, code=err.code, maybe_applied=True
                    )
                else:
                    return response
            elapsed = max(self._monotonic() - started, waited)
            if elapsed + backoff > deadline_s:
                raise failure
            self._sleep(backoff)
            waited += backoff
            backoff = min(backoff * self._rng.uniform(1.5, 2.0), MAX_BACKOFF_S)
