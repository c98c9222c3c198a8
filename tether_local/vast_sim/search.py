"""The offer search (`/api/v0/bundles/`) and the filter language it shares with the instance
list: Vast's `{"field": {"op": value}}` filters and `[["field", "asc"|"desc"], …]` orders.

Numbers may arrive as text: the official client's query parser (vastai `parse_query`) sends
`num_gpus=1` as `{"num_gpus": {"eq": "1"}}`, and the API compares them as numbers. So does this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import httpx

from tether_local.vast_sim.offers import price_for_storage
from tether_local.vast_sim.wire import error, json_response

_FILTER_IGNORED = frozenset({"order", "limit", "type", "allocated_storage"})
_OPERATORS = frozenset({"eq", "neq", "in", "notin", "gt", "gte", "lt", "lte"})


def search(offers: Iterable[dict[str, Any]], query: dict[str, Any]) -> httpx.Response:
    """`POST /api/v0/bundles/`: the offers that pass the query's filters, priced for its
    storage (`type: bid`: at their `min_bid`), in its order."""
    if isinstance(query.get("q"), dict):  # the newer client wraps the filters in "q"
        query = query["q"]
    storage = _as_number(query.get("allocated_storage", 8.0))
    if storage is None or storage < 0:
        raise error(400, "invalid_args", "allocated_storage must be a number ≥ 0")
    limit = _as_number(query.get("limit", 64))
    if limit is None or not limit.is_integer() or limit < 1:
        raise error(400, "invalid_args", "limit must be a positive integer")
    order = query.get("order", [["score", "desc"]])
    if not (isinstance(order, list) and all(isinstance(o, list) and len(o) == 2 for o in order)):
        raise error(400, "invalid_args", 'order must look like [["dph_total", "asc"]]')
    book = [_at_min_bid(o) for o in offers] if query.get("type") == "bid" else list(offers)
    priced = [price_for_storage(o, float(storage)) for o in book]
    found = [o for o in priced if matches(o, query)]
    found.sort(key=sort_key(order))
    return json_response(200, {"offers": found[: int(limit)]})


def _at_min_bid(offer: dict[str, Any]) -> dict[str, Any]:
    """A bid offer as `type: bid` lists it: the GPU priced at its `min_bid` (as the real bid
    rows show: `dph_base` equals `min_bid`), storage as on-demand."""
    floor = offer.get("min_bid")
    if isinstance(floor, bool) or not isinstance(floor, int | float):
        return offer
    return {**offer, "dph_base": float(floor)}


def matches(record: dict[str, Any], filters: dict[str, Any]) -> bool:
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
    if op not in _OPERATORS:
        raise error(400, "invalid_args", f"unknown filter operator {op!r}")
    if op in ("in", "notin"):
        if not isinstance(wanted, list):
            return False
        found = value in [_like(value, w) for w in wanted]
        return found if op == "in" else not found
    wanted = _like(value, wanted)
    if op == "eq":
        return bool(value == wanted) or (wanted is False and value is None)
    if op == "neq":
        return bool(value != wanted)
    limit, number = _as_number(wanted), _as_number(value)
    if limit is None or number is None:
        if isinstance(value, str) and isinstance(wanted, str):
            # Text compares in byte order (a C collation): label ranges are cut so.
            return _ordered(value.encode(), op, wanted.encode())
        return False
    return _ordered(number, op, limit)


def _ordered(value: Any, op: str, limit: Any) -> bool:
    if op == "gte":
        return bool(value >= limit)
    if op == "gt":
        return bool(value > limit)
    if op == "lte":
        return bool(value <= limit)
    return bool(value < limit)


def _like(value: Any, wanted: Any) -> Any:
    """`wanted` as the kind `value` is, where it is text for one: "1" for a number, "true" for a
    bool. Anything else as it came."""
    if not isinstance(wanted, str):
        return wanted
    if isinstance(value, bool):
        lowered = wanted.strip().lower()
        return {"true": True, "false": False}.get(lowered, wanted)
    if isinstance(value, int | float):
        number = _as_number(wanted)
        return wanted if number is None else number
    return wanted


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def sort_key(order: list[list[str]]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    def key(record: dict[str, Any]) -> tuple[Any, ...]:
        parts: list[Any] = []
        for name, direction in order:
            value = record.get(name)
            number = float(value) if isinstance(value, int | float) else float("inf")
            parts.append(-number if direction == "desc" else number)
        return tuple(parts)

    return key


__all__ = ["matches", "search", "sort_key"]
