"""Generation items read together with their heartbeat items (functions/domain/heartbeat_item.py):
a Query of a job's `GEN#` keys or a batch read returns both kinds; these pair them up."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from functions.domain.heartbeat_item import (
    generation_sort_key_of,
    is_heartbeat_sort_key,
    merge_generation_fields,
)


def is_generation_item(item: Mapping[str, Any]) -> bool:
    sk = str(item.get("sk", ""))
    return sk.startswith("GEN#") and not is_heartbeat_sort_key(sk)


def merged_generation_items(items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The generation items among `items` (plain, of any jobs), in their order, each with its
    heartbeat item's fields merged in; a heartbeat item without its generation is left out."""
    items = list(items)
    heartbeats = {
        (item["pk"], generation_sort_key_of(item["sk"])): item
        for item in items
        if is_heartbeat_sort_key(str(item.get("sk", "")))
    }
    return [
        merge_generation_fields(item, heartbeats.get((item["pk"], item["sk"])))
        for item in items
        if is_generation_item(item)
    ]
