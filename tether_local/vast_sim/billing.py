"""The billing ledger: what each instance has cost so far (GPU seconds while it should run,
storage seconds while it exists, traffic in and out) and the charges Vast lists from it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from tether_local.vast_sim.wire import decode_token, encode_token, error, json_response

BYTES_PER_GB = 1024**3  # Vast's $/GB figures are $/TB ÷ 1024
CHARGES_PAGE_LIMIT = 500


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


def charge(ledger: Ledger, now: float) -> dict[str, Any]:
    """One instance's charge as Vast lists it, itemized (GPU, disk, traffic down and up)."""
    end = ledger.closed_at if ledger.closed_at is not None else now
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


def charges_page(
    ledgers: Iterable[Ledger], params: httpx.QueryParams, now: float
) -> httpx.Response:
    """`GET /api/v0/charges/`: the charges of instances alive during the `day` range."""
    raw = params.get("select_filters")
    try:
        filters = json.loads(raw) if raw else {}
        day = filters["day"]
        since, until = float(day["gte"]), float(day["lte"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise error(
            400, "invalid_args",
            "Must provide both 'day' gte and lte filters for instance charges",
        ) from None  # fmt: skip
    try:
        limit = max(1, min(int(params.get("limit", "100")), CHARGES_PAGE_LIMIT))
    except ValueError:
        raise error(400, "invalid_args", "limit must be an integer") from None
    token = params.get("after_token")
    after = decode_token(token) if token else 0
    rows = [
        charge(ledger, now)
        for ledger in sorted(ledgers, key=lambda entry: entry.instance_id)
        if ledger.opened_at <= until and (ledger.closed_at or now) >= since
    ]
    page = [r for r in rows if r["metadata"]["instance_id"] > after][:limit]
    more = bool(page) and rows[-1] is not page[-1]
    return json_response(
        200,
        {
            "success": True,
            "count": len(page),
            "total": len(rows),
            "results": page,
            "next_token": encode_token(page[-1]["metadata"]["instance_id"]) if more else None,
        },
    )


__all__ = ["BYTES_PER_GB", "CHARGES_PAGE_LIMIT", "Ledger", "charge", "charges_page"]
