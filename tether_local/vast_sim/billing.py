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
    down_bytes_per_s: float = 0.0  # a steady traffic rate (`set_traffic_rate`), billed on top
    up_bytes_per_s: float = 0.0

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
    """One instance's charge as `GET /api/v0/charges/` lists it (format "table").

    The shape of the real items: `start`/`end` (epoch s), `type` "instance", `source`
    "instance-<id>" (the only place the instance is named: `metadata` carries no id),
    `description`, `amount`, `metadata` and `items`, one per line (gpu, disk, bwd, bwu) of the
    same shape. Sources: the official client, vast-ai/vast-cli `vastai/cli/commands/billing.py`
    (`format_invoices_charges_results` reads start, end, amount, type, source and items at every
    level and splits `source` at "-"; the table and tree read description and metadata), and
    Vast's spec, vast-ai/docs `api-reference/openapi/yaml/auto_get_api_v0_charges_cfa131.yaml`.
    """
    end = ledger.closed_at if ledger.closed_at is not None else now
    start = ledger.opened_at
    gb_down = ledger.bytes_down / BYTES_PER_GB
    gb_up = ledger.bytes_up / BYTES_PER_GB
    days = max(end - start, 0.0) / 86_400
    return {
        "start": start,
        "end": end,
        "type": "instance",
        "source": f"instance-{ledger.instance_id}",
        "description": f"Instance {ledger.instance_id} Charges - {days:.2f} days",
        "amount": ledger.total_usd,
        "metadata": {"label": ledger.label, "template_id": None},
        "items": [
            _line("gpu", f"{ledger.gpu_seconds / 3600:.3f} hours at "
                  f"${ledger.gpu_usd_per_hour:.3f}/hour ({ledger.gpu_name})",
                  ledger.gpu_usd, start, end),
            _line("disk", f"{ledger.storage_seconds / 3600:.3f} hours of storage at "
                  f"${ledger.storage_usd_per_hour:.4f}/hour", ledger.storage_usd, start, end),
            _line("bwd", f"{gb_down:.3f} GB downloaded at ${ledger.download_usd_per_gb:.4f}/GB",
                  ledger.download_usd, start, end),
            _line("bwu", f"{gb_up:.3f} GB uploaded at ${ledger.upload_usd_per_gb:.4f}/GB",
                  ledger.upload_usd, start, end),
        ],
    }  # fmt: skip


def _line(kind: str, description: str, amount: float, start: float, end: float) -> dict[str, Any]:
    return {
        "start": start,
        "end": end,
        "type": kind,
        "source": None,
        "description": description,
        "amount": amount,
        "metadata": {},
        "items": [],
    }


def charges_page(
    ledgers: Iterable[Ledger], params: httpx.QueryParams, now: float
) -> httpx.Response:
    """`GET /api/v0/charges/`: the charges of instances alive during the `day` range, oldest
    first (`latest_first=true`: newest first), `type: {"in": [...]}` honoured (only instances
    exist here), pages of at most `limit` (≤ 500) with `next_token`."""
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
    kinds = filters.get("type", {}).get("in") if isinstance(filters.get("type"), dict) else None
    try:
        limit = max(1, min(int(params.get("limit", "100")), CHARGES_PAGE_LIMIT))
    except ValueError:
        raise error(400, "invalid_args", "limit must be an integer") from None
    latest_first = params.get("latest_first", "false").strip().lower() in ("true", "1")
    token = params.get("after_token")
    after = decode_token(token) if token else None
    chosen = sorted(
        (
            ledger
            for ledger in ledgers
            if ledger.opened_at <= until and (ledger.closed_at or now) >= since
        ),
        key=lambda entry: entry.instance_id,
        reverse=latest_first,
    )
    if isinstance(kinds, list) and "instance" not in kinds:
        chosen = []
    total = len(chosen)
    if after is not None:
        chosen = [
            ledger
            for ledger in chosen
            if (ledger.instance_id < after if latest_first else ledger.instance_id > after)
        ]
    page = chosen[:limit]
    more = len(chosen) > len(page)
    return json_response(
        200,
        {
            "success": True,
            "count": len(page),
            "total": total,
            "results": [charge(ledger, now) for ledger in page],
            "next_token": encode_token(page[-1].instance_id) if more else None,
        },
    )


__all__ = ["BYTES_PER_GB", "CHARGES_PAGE_LIMIT", "Ledger", "charge", "charges_page"]
