"""Bounded thread pools for remote round trips (boto3 clients and httpx clients are
thread-safe; boto3 resources and `VastClient` are not: give each thread its own copy).

Each task runs in a copy of the caller's `contextvars` context, so what the caller set there
(a harness's per-invocation record, say) is seen by the task too.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_bounded(fn: Callable[[T], R], items: Iterable[T], *, workers: int) -> list[R]:
    """`[fn(i) for i in items]` with at most `workers` calls in flight, results in order. An
    exception of one call is raised here after every call ended: `fn` should catch its own."""
    todo = list(items)
    if len(todo) <= 1:
        return [fn(item) for item in todo]
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(todo)))) as pool:
        futures = [pool.submit(contextvars.copy_context().run, fn, item) for item in todo]
        return [future.result() for future in futures]


@contextmanager
def run_in_background(fn: Callable[[], R]) -> Iterator[Future[R]]:
    """Run `fn` on another thread while the `with` body runs; the block waits for it on exit."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool.submit(contextvars.copy_context().run, fn)
