"""DynamoDB's refusals that moto never makes, injected at a set rate (off unless opened).

Real DynamoDB cancels a TransactWriteItems for another transaction's conflict or for throttling
(`TransactionCanceledException` with `CancellationReasons` `TransactionConflict` or
`ThrottlingError` on one item, `None` on the others) and answers a BatchGetItem with some keys
in `UnprocessedKeys`. `DynamoFaults` wraps moto's DynamoDB handler (`DynamoHandler`, in process,
so under `mock_aws` and the local AWS's server alike) while it is open:

    with DynamoFaults(seed=7, conflict_rate=1.0, max_faults=1) as faults:
        ...  # the first transaction is cancelled for a conflict, later ones run
    faults.injected  # {"TransactionConflict": 1}

- `conflict_rate` / `throttle_rate`: the chance a transaction is cancelled with
  `TransactionConflict` / `ThrottlingError` (conflict drawn first);
- `unprocessed_rate`: the chance each key of a BatchGetItem is held back in `UnprocessedKeys`;
- `max_faults`: stop injecting after this many (None: no bound);
- `seed`: the RNG's seed, so a test's faults are the same every run.

A cancelled transaction writes nothing, as in DynamoDB. One open at a time (it patches a class).
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

_HANDLER = ("moto.dynamodb.responses", "DynamoHandler")


class DynamoFaults:
    """Inject transaction cancellations and unprocessed keys into moto's DynamoDB (above)."""

    def __init__(
        self,
        *,
        seed: int = 0,
        conflict_rate: float = 0.0,
        throttle_rate: float = 0.0,
        unprocessed_rate: float = 0.0,
        max_faults: int | None = None,
    ) -> None:
        for name, rate in (
            ("conflict_rate", conflict_rate),
            ("throttle_rate", throttle_rate),
            ("unprocessed_rate", unprocessed_rate),
        ):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be within 0 … 1, got {rate}")
        self.conflict_rate = conflict_rate
        self.throttle_rate = throttle_rate
        self.unprocessed_rate = unprocessed_rate
        self.max_faults = max_faults
        self.injected: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._originals: dict[str, Any] = {}

    def __enter__(self) -> DynamoFaults:
        self.apply()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()

    def apply(self) -> None:
        import importlib

        handler = getattr(importlib.import_module(_HANDLER[0]), _HANDLER[1])
        if getattr(handler, "_tether_faults", None) is not None:
            raise RuntimeError("another DynamoFaults is open")
        faults = self
        transact = handler.transact_write_items
        batch_get = handler.batch_get_item
        self._originals = {"transact_write_items": transact, "batch_get_item": batch_get}

        def transact_write_items(handler_self: Any) -> Any:
            code = faults._transaction_fault()
            if code is not None:
                from moto.dynamodb.exceptions import TransactionCanceledException

                count = len(handler_self.body.get("TransactItems", []))
                hit = faults._draw_index(count)
                reasons = [
                    (code, _MESSAGES[code], None) if i == hit else (None, None, None)
                    for i in range(count)
                ]
                raise TransactionCanceledException(reasons)
            return transact(handler_self)

        def batch_get_item(handler_self: Any) -> Any:
            held: dict[str, list[Any]] = {}
            for table, request in handler_self.body.get("RequestItems", {}).items():
                kept = []
                for key in request.get("Keys", []):
                    if faults._hold_key():
                        held.setdefault(table, []).append(key)
                    else:
                        kept.append(key)
                request["Keys"] = kept
            result = batch_get(handler_self)
            unprocessed = result.result.setdefault("UnprocessedKeys", {})
            requested = handler_self.body.get("RequestItems", {})
            for table, keys in held.items():
                entry = unprocessed.setdefault(table, {"Keys": []})
                entry["Keys"].extend(keys)
                if "ConsistentRead" in requested.get(table, {}):
                    entry["ConsistentRead"] = requested[table]["ConsistentRead"]
            return result

        handler.transact_write_items = transact_write_items
        handler.batch_get_item = batch_get_item
        handler._tether_faults = self

    def restore(self) -> None:
        import importlib

        handler = getattr(importlib.import_module(_HANDLER[0]), _HANDLER[1])
        if getattr(handler, "_tether_faults", None) is not self:
            return
        for name, original in self._originals.items():
            setattr(handler, name, original)
        handler._tether_faults = None

    def _left(self) -> bool:
        return self.max_faults is None or sum(self.injected.values()) < self.max_faults

    def _transaction_fault(self) -> str | None:
        with self._lock:
            if not self._left():
                return None
            draw = self._rng.random()
            if draw < self.conflict_rate:
                code = "TransactionConflict"
            elif draw < self.conflict_rate + self.throttle_rate:
                code = "ThrottlingError"
            else:
                return None
            self.injected[code] += 1
            return code

    def _draw_index(self, count: int) -> int:
        with self._lock:
            return self._rng.randrange(count) if count else 0

    def _hold_key(self) -> bool:
        with self._lock:
            if not self._left() or self._rng.random() >= self.unprocessed_rate:
                return False
            self.injected["UnprocessedKeys"] += 1
            return True


_MESSAGES = {
    "TransactionConflict": "Transaction is ongoing for the item",
    "ThrottlingError": "Throughput exceeds the current capacity for one or more global "
    "secondary indexes. DynamoDB is automatically scaling your index.",
}
