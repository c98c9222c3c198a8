"""Count the AWS calls a piece of code makes, and estimate the DynamoDB units they would bill.

`AwsMeter.install()` hooks botocore's event system on boto3's default session, so every client
built afterwards (the handlers build their own) reports each call. moto answers
`ReturnConsumedCapacity` with a constant (1 or 0.5 per call), so units are estimated here
instead, from item sizes as DynamoDB's on-demand billing defines them:

- read: strongly consistent 1 unit per 4 KB (rounded up) of each item returned (GetItem,
  BatchGetItem) or of all items a Query returns together; eventually consistent (GSI queries,
  batch gets by default) half that; a GetItem that finds nothing still bills one read.
- write: 1 unit per 1 KB (rounded up) of the larger of the item before and after the write
  (PutItem, UpdateItem, DeleteItem and each of them inside TransactWriteItems), both read from
  moto's store around the call (`stored_item_size`); where that store cannot be read, the last
  size this meter saw for that key stands in for "before" (1 KB if never seen) and a Put's item
  for "after"; every GSI the item belongs to (its key attribute is present; projection ALL)
  bills the same again; items inside TransactWriteItems bill twice.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import boto3

READ_UNIT_BYTES = 4096
WRITE_UNIT_BYTES = 1024


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one attribute value in DynamoDB's JSON form, per DynamoDB's item-size rules."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        digits = len(str(Decimal(str(inner))).lstrip("-").replace(".", "").lstrip("0")) or 1
        return math.ceil(digits / 2) + 1
    if kind == "B":
        return len(inner) if isinstance(inner, bytes | bytearray) else math.ceil(len(inner) * 3 / 4)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(value_size({kind[0]: v}) for v in inner)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + value_size(v) for k, v in inner.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """Bytes of an item: every attribute name plus its value."""
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def stored_item_size(region: str | None, table: str, key: Mapping[str, Any]) -> int | None:
    """Bytes of the item moto's store holds at `key` (DynamoDB JSON) now: 0 when there is none;
    None when the store cannot be read (not moto, another account, an unknown table)."""
    try:
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends
        from moto.dynamodb.models.dynamo_type import DynamoType

        account = os.environ.get("MOTO_ACCOUNT_ID", DEFAULT_ACCOUNT_ID)
        stored = dynamodb_backends[account][region or "us-east-1"].get_table(table)
        range_name = stored.range_key_attr
        item = stored.get_item(
            DynamoType(key[stored.hash_key_attr]),
            DynamoType(key[range_name]) if range_name else None,
        )
    except Exception:
        return None
    return item_size(item.to_json()["Attributes"]) if item is not None else 0


def _write_targets(op: str, request: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(table, key or item) of each item a write request writes, in the order `_dynamodb` bills
    them."""
    if op == "PutItem":
        return [(request.get("TableName", ""), request.get("Item", {}))]
    if op in ("UpdateItem", "DeleteItem"):
        return [(request.get("TableName", ""), request.get("Key", {}))]
    if op == "TransactWriteItems":
        targets = []
        for entry in request.get("TransactItems", []):
            for kind, field_name in (("Put", "Item"), ("Update", "Key"), ("Delete", "Key")):
                if kind in entry:
                    targets.append((entry[kind].get("TableName", ""), entry[kind][field_name]))
        return targets
    return []


def read_units(sizes: Iterable[int], *, consistent: bool, together: bool) -> float:
    """Units for reading items of `sizes`; `together`: a Query, rounded up over the sum."""
    sizes = list(sizes)
    if together:
        units = max(1, math.ceil(sum(sizes) / READ_UNIT_BYTES))
    else:
        units = sum(max(1, math.ceil(s / READ_UNIT_BYTES)) for s in sizes) or 1
    return units if consistent else units / 2


def write_units(size: int, *, indexes: int = 0, transactional: bool = False) -> float:
    units = max(1, math.ceil(size / WRITE_UNIT_BYTES)) * (1 + indexes)
    return units * (2 if transactional else 1)


@dataclass
class AwsMeter:
    """Calls per `service.Operation`, and DynamoDB read/write units (estimated, see above)."""

    index_keys: tuple[str, ...] = ()  # attributes that put an item into a GSI
    calls: Counter[str] = field(default_factory=Counter)
    pooled: Counter[str] = field(default_factory=Counter)  # of `calls`, made off the main thread
    read_units: float = 0.0
    write_units: float = 0.0
    index_read_units: float = 0.0  # of `read_units`, read by Query from a GSI
    items_read: int = 0
    items_written: int = 0
    _sizes: dict[tuple[str, str], int] = field(default_factory=dict)
    _indexes: dict[tuple[str, str], int] = field(default_factory=dict)
    _stored_sizes: list[tuple[int, int] | None] = field(default_factory=list)  # of the call
    backend_seconds: float = 0.0  # time inside moto (the stand-in for AWS), when installed
    backend_cpu_seconds: float = 0.0  # CPU time of the calling threads inside moto
    _unpatch: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self, *, time_moto: bool = True) -> AwsMeter:
        """Hook boto3's current default session (inside `mock_aws`: the mock's session)."""
        events = boto3._get_default_session().events
        events.register("before-parameter-build", self._before)
        events.register("after-call", self._after)
        if time_moto:
            self._time_moto()
        return self

    def uninstall(self) -> None:
        events = boto3._get_default_session().events
        events.unregister("before-parameter-build", self._before)
        events.unregister("after-call", self._after)
        if self._unpatch is not None:
            self._unpatch()
            self._unpatch = None

    def _time_moto(self) -> None:
        """Add up the time moto takes to answer, so a benchmark can tell its own time apart."""
        from moto.core.botocore_stubber import BotocoreStubber

        original = BotocoreStubber.process_request
        meter = self

        def timed(stubber: BotocoreStubber, request: Any) -> Any:
            start, start_cpu = time.perf_counter(), time.thread_time()
            try:
                return original(stubber, request)
            finally:
                with meter._lock:
                    meter.backend_seconds += time.perf_counter() - start
                    meter.backend_cpu_seconds += time.thread_time() - start_cpu

        BotocoreStubber.process_request = timed  # type: ignore[method-assign,assignment]

        def unpatch() -> None:
            BotocoreStubber.process_request = original  # type: ignore[method-assign]

        self._unpatch = unpatch

    def reset(self) -> None:
        self.backend_seconds = self.backend_cpu_seconds = 0.0
        self.calls.clear()
        self.pooled.clear()
        self.read_units = self.write_units = self.index_read_units = 0.0
        self.items_read = self.items_written = 0

    def snapshot(self) -> dict[str, Any]:
        return {
            "calls": dict(sorted(self.calls.items())),
            "pooled_calls": dict(sorted(self.pooled.items())),
            "aws_calls": sum(self.calls.values()),
            "moto_s": self.backend_seconds,
            "moto_cpu_s": self.backend_cpu_seconds,
            "dynamodb_read_units": self.read_units,
            "dynamodb_write_units": self.write_units,
            "dynamodb_index_read_units": self.index_read_units,
            "dynamodb_items_read": self.items_read,
            "dynamodb_items_written": self.items_written,
        }

    def count(self, prefix: str) -> int:
        return sum(n for name, n in self.calls.items() if name.startswith(prefix))

    # -- botocore hooks ---------------------------------------------------------------------

    def _before(self, params: Any, model: Any, context: Any, **_: Any) -> None:
        if model.service_model.service_name == "dynamodb":
            context["tether_meter_request"] = dict(params)
            targets = _write_targets(model.name, params)
            if targets:  # each written item's size before the call, for max(before, after)
                region = context.get("client_region")
                context["tether_meter_before"] = [
                    stored_item_size(region, table, key) for table, key in targets
                ]

    def _after(self, http_response: Any, parsed: Any, model: Any, context: Any, **_: Any) -> None:
        service = model.service_model.service_name
        name = f"{service}.{model.name}"
        with self._lock:  # code under test may call from a thread pool
            self.calls[name] += 1
            if threading.current_thread() is not threading.main_thread():
                self.pooled[name] += 1
            if service == "dynamodb" and isinstance(parsed, dict) and "Error" not in parsed:
                request = context.get("tether_meter_request") or {}
                self._stored_sizes = self._sizes_around(model.name, request, context)
                self._dynamodb(model.name, request, parsed)

    # -- DynamoDB units ---------------------------------------------------------------------

    def _key(self, item: Mapping[str, Any]) -> tuple[str, str]:
        return (str(item.get("pk", {}).get("S", "")), str(item.get("sk", {}).get("S", "")))

    def _seen(self, item: Mapping[str, Any]) -> int:
        size = item_size(item)
        key = self._key(item)
        self._sizes[key] = size
        self._indexes[key] = sum(1 for k in self.index_keys if k in item)
        return size

    def _sizes_around(
        self, op: str, request: Mapping[str, Any], context: Mapping[str, Any]
    ) -> list[tuple[int, int] | None]:
        """(before, after) sizes of each item the write `request` wrote, from moto's store; None
        for an item whose sizes are not both known."""
        before = context.get("tether_meter_before") or []
        region = context.get("client_region")
        around: list[tuple[int, int] | None] = []
        for i, (table, key) in enumerate(_write_targets(op, request)):
            was = before[i] if i < len(before) else None
            now = stored_item_size(region, table, key)
            around.append((was, now) if was is not None and now is not None else None)
        return around

    def _write(self, item_or_key: Mapping[str, Any], *, put: bool, transactional: bool) -> None:
        key = self._key(item_or_key)
        around = self._stored_sizes.pop(0) if self._stored_sizes else None
        if around is not None:  # exact: the store's item before and after the call
            if put:
                self._seen(item_or_key)  # the indexes it belongs to
            size = max(around)
            self._sizes[key] = around[1]
        elif put:
            before = self._sizes.get(key, 0)
            size = max(before, self._seen(item_or_key))
        else:
            size = self._sizes.get(key, WRITE_UNIT_BYTES)
        self.items_written += 1
        indexes = self._indexes.get(key, 0)
        self.write_units += write_units(size, indexes=indexes, transactional=transactional)

    def _dynamodb(self, op: str, request: Mapping[str, Any], reply: Mapping[str, Any]) -> None:
        if op == "GetItem":
            item = reply.get("Item")
            sizes = [self._seen(item)] if item else []
            self.items_read += len(sizes)
            consistent = bool(request.get("ConsistentRead"))
            self.read_units += read_units(sizes or [0], consistent=consistent, together=False)
        elif op in ("Query", "Scan"):
            sizes = [self._seen(i) for i in reply.get("Items", [])]
            self.items_read += len(sizes)
            consistent = bool(request.get("ConsistentRead")) and "IndexName" not in request
            units = read_units(sizes, consistent=consistent, together=True)
            self.read_units += units
            if "IndexName" in request:
                self.index_read_units += units
        elif op == "BatchGetItem":
            for table, items in reply.get("Responses", {}).items():
                asked = request.get("RequestItems", {}).get(table, {})
                consistent = bool(asked.get("ConsistentRead"))
                sizes = [self._seen(i) for i in items]
                self.items_read += len(sizes)
                if sizes:
                    self.read_units += read_units(sizes, consistent=consistent, together=False)
        elif op == "PutItem":
            self._write(request.get("Item", {}), put=True, transactional=False)
        elif op in ("UpdateItem", "DeleteItem"):
            self._write(request.get("Key", {}), put=False, transactional=False)
        elif op == "TransactWriteItems":
            for entry in request.get("TransactItems", []):
                if "Put" in entry:
                    self._write(entry["Put"]["Item"], put=True, transactional=True)
                elif "Update" in entry:
                    self._write(entry["Update"]["Key"], put=False, transactional=True)
                elif "Delete" in entry:
                    self._write(entry["Delete"]["Key"], put=False, transactional=True)
        elif op == "BatchWriteItem":
            for requests in request.get("RequestItems", {}).values():
                for entry in requests:
                    if "PutRequest" in entry:
                        self._write(entry["PutRequest"]["Item"], put=True, transactional=False)
