"""What Vast's REST API sends and accepts, apart from the client that calls it (`vast.py`).

Its errors, typed from the answer (status, `{success: false, error, msg}` JSON or plain text, and
the `no_such_ask` token that marks an offer gone whatever the status), its records (offers are
`functions/domain/offer.py`), the offer search body, and the checks that refuse a request before
it is sent when Vast would refuse it. Facts: shared/reference/vast-api.md.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from functions.domain.jobspec import Resources

MIN_DISK_GB = 8
MAX_LABEL_CHARS = 256
MAX_ONSTART_CHARS = 4048
NO_SUCH_ASK = re.compile(r"\bno_such_ask\b")
_RUNTYPES = frozenset({"args", "ssh", "ssh_direc", "ssh_proxy", "jupyter", "jupyter_direc"})
GONE_INSTANCE_CODES = frozenset({"no_such_instance", "no_such_contract", "not_found"})


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


class Instance(BaseModel):
    """An instance record from `GET /api/v0/instances/…` or `/api/v1/instances/`.

    Only `id` is required: records right after a rent lack most fields (actual_status is null).
    Unknown fields are kept.
    """

    model_config = ConfigDict(extra="allow")

    id: int
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


class RentResult(BaseModel):
    instance_id: int
    instance_api_key: str | None = None


def offer_query(resources: Resources, disk_gb: float, limit: int) -> dict[str, Any]:
    """The `POST /api/v0/bundles/` body for on-demand offers that meet `resources`.

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
        "type": "on-demand",
        "allocated_storage": disk_gb,
        "order": [["dph_total", "asc"]],
        "limit": limit,
    }
    if resources.gpu_names:
        query["gpu_name"] = {"in": list(resources.gpu_names)}
    if resources.min_gpu_ram_gb > 0:
        query["gpu_ram"] = {"gte": resources.min_gpu_ram_gb * 1000}
    if resources.max_usd_per_hour is not None:
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
    if not isinstance(label, str) or not label:
        raise ValueError("label must be a non-empty string")
    if len(label) > MAX_LABEL_CHARS:
        raise ValueError(f"label must be at most {MAX_LABEL_CHARS} characters, got {len(label)}")


def check_rent_args(
    offer_id: int,
    image: str,
    disk_gb: float,
    label: str,
    env: dict[str, str],
    onstart: str,
    runtype: str,
) -> None:
    check_id(offer_id, "offer_id")
    if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
        raise ValueError(f"image must be a Docker image reference without spaces, got {image!r}")
    if isinstance(disk_gb, bool) or not isinstance(disk_gb, int | float) or disk_gb < MIN_DISK_GB:
        raise ValueError(
            f"disk_gb must be at least {MIN_DISK_GB} (Vast's minimum), got {disk_gb!r}"
        )
    check_label(label)
    if not isinstance(onstart, str):
        raise ValueError("onstart must be a string")
    if len(onstart) > MAX_ONSTART_CHARS:
        raise ValueError(
            f"onstart must be at most {MAX_ONSTART_CHARS} characters, got {len(onstart)}; "
            "download a script from onstart instead of inlining it"
        )
    parts = runtype.split() if isinstance(runtype, str) else []
    if not parts or any(part not in _RUNTYPES for part in parts):
        raise ValueError(f"runtype must be one of {', '.join(sorted(_RUNTYPES))}, got {runtype!r}")
    for key, value in env.items():
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise ValueError(f"env must map names to strings; {key!r} does not")
