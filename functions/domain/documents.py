"""Limits on the documents people and agents send: bytes, nesting depth and node count.

Checked before anything recursive touches a document, so a pathological one is refused with a
reason instead of exhausting the stack or the memory:

- **YAML job files** (`tether validate`, `submit`, `plan`): `load_yaml` first streams the
  parser's events (PyYAML's scanner and parser keep their own stacks; its composer and
  constructor recurse) and counts depth and nodes, an alias counted as the whole node it
  repeats. A "billion laughs" document (nine aliases of nine aliases of …, a few hundred bytes
  that expand to 10⁹ nodes) is refused after a few dozen events, and so is an alias to a
  collection still open (a cycle). Only then is the document constructed.
- **JSON request bodies** (the API): the body is at most `max_body_bytes` long, so its node
  count is bounded; `check_depth` walks the decoded value without recursion.

A job spec nests three levels (`resources.gpu_names[0]`), a heartbeat four
(`restore.skipped[0].reason`): `MAX_DEPTH` leaves room for anchors and future fields, not for
abuse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 32
MAX_NODES = 10_000  # a spec with 256 env entries and 32 GPU names has about 600
MAX_JOB_FILE_BYTES = 1024 * 1024  # the API takes 256 KiB of JSON; YAML comments need room


class DocumentTooComplex(ValueError):
    """The document passes a limit; the message says which, in a user's words."""


@dataclass
class _Open:
    anchor: str | None
    nodes_before: int
    depth: int
    deepest: int


def load_yaml(text: str, *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> Any:
    """`yaml.safe_load(text)` once the document is known to fit the limits. Raises
    `DocumentTooComplex`, or `yaml.YAMLError` for a syntax error (as `safe_load` would)."""
    import yaml  # only job files are YAML, read by the CLI: no handler imports it

    check_yaml(text, max_depth=max_depth, max_nodes=max_nodes)
    return yaml.safe_load(text)


def check_yaml(text: str, *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> None:
    """Streams the parser's events; raises at the first one past a limit."""
    import yaml  # as in `load_yaml`

    nodes = 0
    depth = 0
    open_: list[_Open] = []
    anchored: dict[str, tuple[int, int]] = {}  # anchor → (nodes it expands to, its height)

    def grow(count: int, reached: int) -> None:
        nonlocal nodes
        nodes += count
        if nodes > max_nodes:
            raise DocumentTooComplex(
                f"has more than {max_nodes} values (aliases counted as what they repeat)"
            )
        if reached > max_depth:
            raise DocumentTooComplex(f"is nested deeper than {max_depth} levels")
        if open_:
            open_[-1].deepest = max(open_[-1].deepest, reached)

    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.ScalarEvent):
            grow(1, depth)
            if event.anchor is not None:
                anchored[event.anchor] = (1, 0)
        elif isinstance(event, yaml.CollectionStartEvent):
            grow(1, depth + 1)
            depth += 1
            open_.append(_Open(event.anchor, nodes - 1, depth, depth))
        elif isinstance(event, yaml.CollectionEndEvent):
            done = open_.pop()
            depth -= 1
            if open_:
                open_[-1].deepest = max(open_[-1].deepest, done.deepest)
            if done.anchor is not None:
                anchored[done.anchor] = (nodes - done.nodes_before, done.deepest - done.depth + 1)
        elif isinstance(event, yaml.AliasEvent):
            if any(o.anchor == event.anchor for o in open_):
                raise DocumentTooComplex(f"alias *{event.anchor} refers to itself (a cycle)")
            size, height = anchored.get(str(event.anchor), (1, 0))  # unknown: the composer says
            grow(size, depth + height)


def check_depth(value: Any, *, max_depth: int = MAX_DEPTH) -> None:
    """Raises `DocumentTooComplex` when decoded JSON nests deeper than `max_depth`; iterative."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth + 1 > max_depth:
            raise DocumentTooComplex(f"is nested deeper than {max_depth} levels")
        pending.extend((child, depth + 1) for child in children)


__all__ = [
    "MAX_DEPTH",
    "MAX_JOB_FILE_BYTES",
    "MAX_NODES",
    "DocumentTooComplex",
    "check_depth",
    "check_yaml",
    "load_yaml",
]
