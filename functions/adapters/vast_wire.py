"""What Vast's REST API sends and accepts, apart from the client that calls it (`vast.py`).

Its errors, typed from the answer (status, `{success: false, error, msg}` JSON or plain text, and
the `no_such_ask` token that marks an offer gone whatever the status), its records (offers are
`functions/domain/offer.py`), the offer search body, and the checks that refuse a request before
it is sent when Vast would refuse it. Facts: Vast's OpenAPI spec and official client (docs/vast.md).

Records are read one at a time (`parse_instance`, `parse_offer`, `check_charge`): odd values are
normalised first (`functions.domain.vast_values`); a record that still cannot be read is left out of
its `Listing` and named in `Listing.issues` (kind, id as sent, fields), so one bad host never
fails a whole listing. An instance keeps its place when only a field nothing decides on is
unreadable (that field is dropped): hiding an instance would hide an orphan that bills.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from functions.domain.jobspec import Resources
from functions.domain.offer import Offer
from functions.domain.spend import UnreadableCharge, instance_charge
from functions.domain.vast_limits import (
    MAX_LABEL_CHARS,
    LimitBreach,
    create_instance_breaches,
)
from functions.domain.vast_values import normalise

NO_SUCH_ASK = re.compile(r"\bno_such_ask\b")
_RUNTYPES = frozenset({"args", "ssh", "ssh_direc", "ssh_proxy", "jupyter", "jupyter_direc"})
GONE_INSTANCE_CODES = frozenset({"no_such_instance", "no_such_contract", "not_found"})
RESOURCES_UNAVAILABLE = "resources_unavailable"
INVALID_PRICE = "invalid_price"  # a bid below the offer's current min_bid (or no valid price)
INVALID_ARGS = "invalid_args"  # a request Vast refuses whatever the offer (its bounds, its fields)
# The field a refusal names: `<field>: …` at the start of its message, else a quoted name.
_REFUSED_FIELD = re.compile(r"^(?P<lead>[A-Za-z_][\w.+]*):\s|'(?P<quoted>[A-Za-z_]\w*)'")
# The instance fields the monitor decides on: a record without a readable one is skipped.
INSTANCE_ESSENTIAL_FIELDS = frozenset({"id", "label", "actual_status"})


class VastError(Exception):
    """A Vast API call that failed. `status` is the HTTP status (None: no response),
    `code` Vast's error token (e.g. "no_such_ask", "invalid_args"), `message` its text."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else "no response"
        code = f" {self.code}" if self.code else ""
        return f"Vast API error ({where}{code}): {self.message}"


class OfferGone(VastError):
    """The offer was rented by someone else or withdrawn: try the next one."""


class RateLimited(VastError):
    """Vast kept answering 429 until the retry deadline passed."""


class AuthFailed(VastError):
    """The key was refused (401/403): wrong, revoked, or not allowed to do this."""


class VastUnavailable(VastError):
    """5xx answers or connection failures until the retry deadline passed.

    `maybe_applied` is True when a non-idempotent request (a rent) may have reached Vast:
    look for an instance with the label before renting again.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        maybe_applied: bool = False,
    ) -> None:
        super().__init__(message, status=status, code=code)
        self.maybe_applied = maybe_applied


class InstanceGone(VastError):
    """The instance does not exist (any more)."""


class BidTooLow(VastError):
    """A rent's bid was refused (400 `invalid_price`): below the offer's current `min_bid`, which
    moves with the market. Like an offer gone: the next offer is tried."""


class VastInvalidArgs(VastError):
    """A create-instance request Vast refuses (or would refuse) for its arguments, whatever the
    offer: over one of its documented bounds (`functions/domain/vast_limits.py`; then it was
    never sent) or answered 400 `invalid_args`. `field` names the argument (`env.NAME`, `label`,
    `onstart`, `disk`, `price`, …; "request" when Vast's message names none). Not "try the next
    offer": every offer would refuse the same request."""

    def __init__(
        self,
        field: str,
        message: str,
        *,
        status: int | None = None,
        code: str | None = INVALID_ARGS,
        breaches: tuple[LimitBreach, ...] = (),
    ) -> None:
        super().__init__(message, status=status, code=code)
        self.field = field
        self.breaches = breaches

    @classmethod
    def from_breaches(cls, breaches: list[LimitBreach]) -> VastInvalidArgs:
        """Refused before sending: the first breach's field, every breach in the message."""
        message = "; ".join(b.describe() for b in breaches)
        return cls(breaches[0].field, message, breaches=tuple(breaches))

    @classmethod
    def from_answer(cls, message: str, *, status: int | None, code: str | None) -> VastInvalidArgs:
        match = _REFUSED_FIELD.search(message)
        field = (match.group("lead") or match.group("quoted")) if match else None
        return cls(field or "request", message, status=status, code=code)


class ResourcesUnavailable(VastError):
    """A start was refused: the machine's GPUs are taken (by someone else, while ours was
    stopped). The instance stays stopped; destroy it and rent again."""


class Instance(BaseModel):
    """An instance record from `GET /api/v0/instances/…` or `/api/v1/instances/`.

    Only `id` is required: records right after a rent lack most fields (actual_status is null).
    Unknown fields are kept. Odd values are normalised first (`functions.domain.vast_values`): an id
    or a number as text, "n/a" or "" for a missing number, an ISO `start_date`, a numeric label.
    """

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _readable(cls, data: object) -> object:
        return normalise(data, cls) if isinstance(data, dict) else data

    id: int = Field(strict=True, gt=0)  # strict: `true` is no id (lax pydantic would read 1)
    actual_status: str | None = None  # created, loading, running, stopped, exited, offline, …
    intended_status: str | None = None
    cur_state: str | None = None
    next_state: str | None = None
    status_msg: str | None = None
    label: str | None = None
    start_date: float | None = None  # epoch s
    end_date: float | None = None  # epoch s: when the host stops offering the machine
    dph_total: float | None = None  # $/h while running, storage included
    dph_base: float | None = None
    storage_cost: float | None = None  # $/GB/month
    inet_down_cost: float | None = None  # $/GB
    inet_up_cost: float | None = None  # $/GB
    machine_id: int | None = None
    host_id: int | None = None
    gpu_name: str | None = None
    num_gpus: int | None = None
    gpu_util: float | None = None
    inet_up: float | None = None  # Mbit/s
    inet_down: float | None = None  # Mbit/s
    disk_space: float | None = None  # GB allocated
    disk_usage: float | None = None
    image_uuid: str | None = None
    geolocation: str | None = None
    is_bid: bool | None = None  # an interruptible (bid) instance: stopped when outbid
    min_bid: float | None = None  # $/h: the bid that wins the machine now


class RentResult(BaseModel):
    instance_id: int
    instance_api_key: str | None = None  # Vast leaves it out of some answers: never rely on it


# --- records, one at a time ---------------------------------------------------------------------

T = TypeVar("T")
RecordKind = Literal["offer", "instance", "charge"]


@dataclass(frozen=True)
class RecordIssue:
    """One record of a listing that could not be read whole.

    `action` "skipped": the record is not in the listing; "trimmed": it is, without `fields`.
    `record_id` is the id as Vast sent it ("?" when it sent none)."""

    kind: RecordKind
    record_id: str
    fields: tuple[str, ...]
    action: Literal["skipped", "trimmed"]

    def describe(self) -> str:
        return f"{self.kind} {self.record_id} {self.action} ({', '.join(self.fields) or 'record'})"


class Listing(list[T], Generic[T]):
    """A list of the records that were read, plus `issues`: those that were not (or not whole)."""

    def __init__(self, items: Iterable[T] = (), issues: Iterable[RecordIssue] = ()) -> None:
        super().__init__(items)
        self.issues: tuple[RecordIssue, ...] = tuple(issues)

    @property
    def skipped(self) -> tuple[RecordIssue, ...]:
        return tuple(i for i in self.issues if i.action == "skipped")

    @property
    def trimmed(self) -> tuple[RecordIssue, ...]:
        return tuple(i for i in self.issues if i.action == "trimmed")


def describe_issues(issues: Iterable[RecordIssue]) -> str:
    """One line for a log: every issue with the record's id and its fields."""
    return "; ".join(issue.describe() for issue in issues)


def parse_records(
    records: Iterable[Any], parse: Callable[[Any], tuple[T | None, RecordIssue | None]]
) -> Listing[T]:
    items: list[T] = []
    issues: list[RecordIssue] = []
    for record in records:
        item, issue = parse(record)
        if item is not None:
            items.append(item)
        if issue is not None:
            issues.append(issue)
    return Listing(items, issues)


def parse_instance(record: Any) -> tuple[Instance | None, RecordIssue | None]:
    """One instance record: (the instance, None), (the instance without the unreadable fields,
    "trimmed"), or (None, "skipped") when its id, label or status cannot be read."""
    if not isinstance(record, dict):
        return None, RecordIssue("instance", "?", (), "skipped")
    try:
        return Instance.model_validate(record), None
    except ValidationError as exc:
        bad = _failed_fields(exc)
    record_id = _record_id(record)
    if not bad or bad & INSTANCE_ESSENTIAL_FIELDS:
        return None, RecordIssue("instance", record_id, tuple(sorted(bad)), "skipped")
    try:
        kept = Instance.model_validate({k: v for k, v in record.items() if k not in bad})
    except ValidationError:
        return None, RecordIssue("instance", record_id, tuple(sorted(bad)), "skipped")
    return kept, RecordIssue("instance", record_id, tuple(sorted(bad)), "trimmed")


def parse_offer(record: Any) -> tuple[Offer | None, RecordIssue | None]:
    """One offer record, or (None, "skipped"): an offer is only worth ranking whole (and one
    without a price is no offer at all)."""
    if not isinstance(record, dict):
        return None, RecordIssue("offer", "?", (), "skipped")
    try:
        return Offer.model_validate(record), None
    except ValidationError as exc:
        fields = tuple(sorted(_failed_fields(exc)))
        return None, RecordIssue("offer", _record_id(record), fields, "skipped")


def check_charge(record: Any) -> tuple[dict[str, Any] | None, RecordIssue | None]:
    """One item of `GET /api/v0/charges/`, kept raw; skipped when it should be an instance's
    charge but its instance or amount cannot be read (`functions.domain.spend.instance_charge`).
    Charges of volumes and serverless endpoints are kept: they are not ours to judge."""
    if not isinstance(record, dict):
        return None, RecordIssue("charge", "?", (), "skipped")
    try:
        instance_charge(record)
    except UnreadableCharge as exc:
        source = record.get("source")
        name = json.dumps(source) if source is not None else _record_id(record)
        return None, RecordIssue("charge", name, (exc.field,), "skipped")
    return record, None


def _failed_fields(exc: ValidationError) -> set[str]:
    return {str(error["loc"][0]) for error in exc.errors() if error["loc"]}


def _record_id(record: dict[str, Any]) -> str:
    value = record.get("id")
    return "?" if value is None else json.dumps(value, default=str)[:40]


def offer_query(resources: Resources, disk_gb: float, limit: int) -> dict[str, Any]:
    """The `POST /api/v0/bundles/` body for offers that meet `resources`: on-demand ones, or bid
    (interruptible) ones, priced at their `min_bid`, for `resources.market: interruptible`.

    Filters as the official client builds them: `verified`, `external=false`, `rentable`,
    `rented=false` by default; `reliability` is spelled `reliability2` on the wire; GPU RAM in
    MB with the client's GB × 1000 (so a "24 GB" card listed with 24564 MB matches 24).
    """
    query: dict[str, Any] = {
        "verified": {"eq": True},
        "external": {"eq": False},
        "rentable": {"eq": True},
        "rented": {"eq": False},
        "num_gpus": {"eq": resources.gpu_count},
        "disk_space": {"gte": disk_gb},
        "reliability2": {"gte": resources.min_reliability},
        "inet_down": {"gte": resources.min_download_mbps},
        "type": "bid" if resources.market == "interruptible" else "on-demand",
        "allocated_storage": disk_gb,
        "order": [["dph_total", "asc"]],
        "limit": limit,
    }
    if resources.gpu_names:
        query["gpu_name"] = {"in": list(resources.gpu_names)}
    if resources.min_gpu_ram_gb > 0:
        query["gpu_ram"] = {"gte": resources.min_gpu_ram_gb * 1000}
    # The cap is on the price paid: a bid can be under it where the on-demand price is not, so
    # a job that may bid leaves the cap to the planner (functions/domain/market.py).
    if resources.max_usd_per_hour is not None and resources.market == "on-demand":
        query["dph_total"] = {"lte": resources.max_usd_per_hour}
    return query


def error_body(response: httpx.Response) -> tuple[str | None, str]:
    """(code, message) from a JSON `{error, msg}` body or a plain-text one."""
    text = response.text.strip()
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        body = None
    code: str | None = None
    message = text or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, str) and error:
            code = error
        for key in ("msg", "detail", "message"):
            value = body.get(key)
            if isinstance(value, str) and value:
                message = value
                break
    if NO_SUCH_ASK.search(message) or NO_SUCH_ASK.search(text):
        code = "no_such_ask"  # the token decides, whatever the status or `error` field says
    return code, message[:500]


def typed_error(response: httpx.Response) -> VastError:
    status = response.status_code
    code, message = error_body(response)
    if code == "no_such_ask" or status == 410:
        return OfferGone(message, status=status, code=code or "no_such_ask")
    if status in (401, 403):
        return AuthFailed(message, status=status, code=code)
    if status == 429:
        return RateLimited(message, status=status, code=code)
    if status >= 500:
        return VastUnavailable(message, status=status, code=code)
    if status == 404 or code in GONE_INSTANCE_CODES:
        return InstanceGone(message, status=status, code=code)
    if code == RESOURCES_UNAVAILABLE:
        return ResourcesUnavailable(message, status=status, code=code)
    if code == INVALID_PRICE:
        return BidTooLow(message, status=status, code=code)
    if code == INVALID_ARGS and status == 400:
        return VastInvalidArgs.from_answer(message, status=status, code=code)
    return VastError(message, status=status, code=code)


def success_false(body: Any) -> bool:
    return isinstance(body, dict) and body.get("success") is False


def error_fields(body: Any) -> tuple[str | None, str]:
    if not isinstance(body, dict):
        return None, repr(body)[:200]
    error = body.get("error")
    code = error if isinstance(error, str) and error else None
    message = body.get("msg")
    text = message if isinstance(message, str) and message else json.dumps(body)[:200]
    if NO_SUCH_ASK.search(text):
        code = "no_such_ask"
    return code, text


def check_id(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_label(label: str) -> None:
    _check_label_given(label)
    if len(label) > MAX_LABEL_CHARS:
        raise ValueError(f"label must be at most {MAX_LABEL_CHARS} characters, got {len(label)}")


def _check_label_given(label: str) -> None:
    if not isinstance(label, str) or not label:
        raise ValueError("label must be a non-empty string")


def check_within_limits(payload: dict[str, Any]) -> None:
    """Refuse a create-instance body over Vast's documented bounds before it is sent."""
    breaches = create_instance_breaches(payload)
    if breaches:
        raise VastInvalidArgs.from_breaches(breaches)


def check_rent_args(
    offer_id: int,
    image: str,
    disk_gb: float,
    label: str,
    env: dict[str, str],
    onstart: str,
    runtype: str,
) -> None:
    """The arguments' types and shapes (ValueError: a caller's mistake). Their sizes against
    Vast's bounds are `check_within_limits`, on the body as it would be sent."""
    check_id(offer_id, "offer_id")
    if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
        raise ValueError(f"image must be a Docker image reference without spaces, got {image!r}")
    if isinstance(disk_gb, bool) or not isinstance(disk_gb, int | float):
        raise ValueError(f"disk_gb must be a number of GB, got {disk_gb!r}")
    _check_label_given(label)
    if not isinstance(onstart, str):
        raise ValueError("onstart must be a string")
    parts = runtype.split() if isinstance(runtype, str) else []
    if not parts or any(part not in _RUNTYPES for part in parts):
        raise ValueError(f"runtype must be one of {', '.join(sorted(_RUNTYPES))}, got {runtype!r}")
    for key, value in env.items():
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise ValueError(f"env must map names to strings; {key!r} does not")
