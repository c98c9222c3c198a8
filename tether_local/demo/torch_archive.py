"""What a `torch.save` file holds, as a digest that pickle's sharing does not change.

`torch.save` writes a zip archive: `<name>/data.pkl` (the pickled structure: dicts, lists,
numbers, classes named by module and name) beside `<name>/data/<key>` (each tensor storage's
raw bytes) and a few small records. Two files holding equal values can differ in bytes: pickle
writes an object it has already written as a back-reference, and what counts as "already
written" is object identity. After a resume, the optimizer state's keys are strings loaded from
the restored checkpoint rather than the literals an uninterrupted run shares, so a key that also
appears elsewhere (Adam's `step`, a hyperparameter named `lr`) is written out again instead of
referred back to. The values are the same; the bytes are not.

`content_digest` reads the pickle without importing or running anything from it: every class
it names becomes a stand-in that records what built it (arguments, state, items), so a file
from any host is safe to read and needs no torch here. It hashes the structure, values in
order, with each storage replaced by the sha256 of its bytes. Equal digests: equal values,
equal tensors, equal classes named.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

MAX_PICKLE_BYTES = 256 * 1024 * 1024  # the structure of a checkpoint is small; its tensors are not
DATA_PICKLE = "data.pkl"


class _StandIn:  # the base of the classes a pickle names, one per module and name
    """An object of a class the reader does not import: what built it and what was set on it."""

    qualified: tuple[str, str] = ("", "")
    built: tuple[tuple[Any, ...], dict[str, Any]]
    state: Any
    items: list[Any]
    entries: list[tuple[Any, Any]]

    def __new__(cls, *args: Any, **kwargs: Any) -> _StandIn:
        made = object.__new__(cls)
        made.built = (args, kwargs)
        made.state = None
        made.items = []
        made.entries = []
        return made

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # the arguments are in `built`
        pass

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:  # a dict subclass (OrderedDict)
        self.entries.append((key, value))

    def append(self, value: Any) -> None:  # a list subclass
        self.items.append(value)

    def extend(self, values: Any) -> None:
        self.items.extend(values)


class _Reader(pickle.Unpickler):
    def __init__(self, data: bytes, storages: dict[str, str]) -> None:
        super().__init__(io.BytesIO(data))
        self._storages = storages
        self._classes: dict[tuple[str, str], type[_StandIn]] = {}

    def find_class(self, module: str, name: str) -> Any:
        key = (module, name)
        if key not in self._classes:
            self._classes[key] = type(name, (_StandIn,), {"qualified": key})
        return self._classes[key]

    def persistent_load(self, pid: Any) -> Any:
        """torch's storage reference ('storage', class, key, location, numel): its bytes'
        digest in place of its key, which only says where in the archive it was put."""
        if isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage":
            return ("storage", _canonical(pid[1]), self._storages.get(str(pid[2])), *pid[3:])
        return ("persistent", _canonical(pid))


def _canonical(value: Any, seen: frozenset[int] = frozenset()) -> Any:
    """Plain, comparable data for what the reader built (a cycle is marked, not followed)."""
    if id(value) in seen:
        return ("cycle",)
    inner = seen | {id(value)}
    if isinstance(value, type) and issubclass(value, _StandIn):
        return ("class", *value.qualified)
    if isinstance(value, _StandIn):
        args, kwargs = value.built
        return (
            "object",
            *type(value).qualified,
            _canonical(args, inner),
            _canonical(kwargs, inner),
            _canonical(value.state, inner),
            _canonical(value.items, inner),
            _canonical(value.entries, inner),
        )
    if isinstance(value, dict):
        return ("dict", [(_canonical(k, inner), _canonical(v, inner)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_canonical(v, inner) for v in value])
    if isinstance(value, set | frozenset):
        return (type(value).__name__, sorted(repr(_canonical(v, inner)) for v in value))
    if isinstance(value, float):
        return ("float", repr(value))  # -0.0 and nan as written
    if isinstance(value, bytearray):
        return ("bytearray", bytes(value))
    return (type(value).__name__, value)


def content_digest(path: Path) -> str | None:
    """The digest of a `torch.save` file's values (the module docstring), or None when the file
    is not one (or is one this reader cannot read: then only its bytes can be compared)."""
    if not zipfile.is_zipfile(path):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            members = {PurePosixPath(info.filename): info for info in archive.infolist()}
            pickles = [p for p in members if p.name == DATA_PICKLE and len(p.parts) == 2]
            if len(pickles) != 1 or members[pickles[0]].file_size > MAX_PICKLE_BYTES:
                return None
            root = pickles[0].parent
            storages = {
                p.name: _sha256_member(archive, members[p])
                for p in members
                if p.parent == root / "data"
            }
            structure = _Reader(archive.read(members[pickles[0]]), storages).load()
        canonical = repr(_canonical(structure))
    except Exception:  # not an archive this reader understands: its bytes are compared instead
        return None
    return hashlib.sha256(canonical.encode()).hexdigest()


def _sha256_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> str:
    digest = hashlib.sha256()
    with archive.open(info) as member:
        while chunk := member.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


__all__ = ["content_digest"]
