"""How the demo and `tether rehearse` hand their job to the stack: as `tether submit` does, its
`code.dir` packed, uploaded through `POST /code/uploads` and named by its sha256, then
`POST /jobs`. That is the CLI's code (`tether_cli.local_ship.SHIPPER`); the local stack sits
below the CLI (docs/architecture.md#layers), so the caller passes it in as a `CodeShipper`."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from functions.domain.jobspec import JobSpec


class PackedCode(Protocol):
    """A job's packed `code.dir`: the tar.gz every host downloads, verifies and extracts."""

    @property
    def path(self) -> Path: ...


class CodeShipper(Protocol):
    def pack(self, spec: JobSpec, spec_path: Path) -> AbstractContextManager[PackedCode | None]:
        """The spec's `code.dir` (relative to `spec_path`'s folder) packed as `tether submit`
        packs it, deleted afterwards; None when the job ships no directory."""
        ...

    def submit(self, api_url: str, spec: JobSpec, code: PackedCode | None) -> tuple[str, str]:
        """Upload `code` (unless there already) and submit `spec` with it: the new job's id and
        what was shipped, in words. DemoError when the stack refuses either."""
        ...


__all__ = ["CodeShipper", "PackedCode"]
