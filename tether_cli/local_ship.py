"""How `tether demo` and `tether rehearse` (and the tests) hand a job to a local stack: exactly as
`tether submit` does, with its own code. The spec's `code.dir` is packed by `code_ship`
(honouring .gitignore and .tetherignore), uploaded through `POST /code/uploads` and the
presigned URL it hands out (skipped when the same archive is there already), and named by its
sha256 in the spec; then `POST /jobs` with an Idempotency-Key. Every call is signed by
`TetherApi` with a local key (the local front checks SigV4's shape, not its signature).

The local stack sits below the CLI (docs/architecture.md#layers) and cannot import this: the demo
and the rehearsal take it as their `shipper` (`tether_local.demo.submit.CodeShipper`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from functions.domain.jobspec import JobSpec
from tether_cli import code_ship
from tether_cli.api_client import LOCAL_CREDENTIALS, LOCAL_REGION, ApiTarget, TetherApi
from tether_cli.code_pack import Packed
from tether_cli.output import CliError
from tether_local.demo.run import DemoError
from tether_local.demo.submit import PackedCode


@dataclass(frozen=True)
class Code:
    """A spec's `code.dir`, packed: the archive every host of the job downloads."""

    where: code_ship.CodeDir
    archive: Packed

    @property
    def path(self) -> Path:
        return self.archive.path


def local_api(api_url: str) -> TetherApi:
    """The CLI's API client for a local stack, signed with a local key."""
    target = ApiTarget(api_url.rstrip("/") + "/", "the local stack")
    return TetherApi(target, credentials=LOCAL_CREDENTIALS, region=LOCAL_REGION)


def shipped_spec(api: TetherApi, spec: JobSpec, code: Code | None) -> tuple[dict[str, Any], str]:
    """`spec` as `tether submit` sends it, with `code` uploaded (unless there already) and named
    by its archive's sha256 and size; and the line `tether submit` prints about the code.
    CliError when the stack refuses the upload."""
    if code is None:
        return spec.model_dump(mode="json"), "code: no directory shipped"
    body, uploaded = code_ship.ship(api, spec, code.where, code.archive, quiet=True)
    return body, code_ship.describe(code.archive, uploaded)


class CliShipper:
    """`tether_local.demo.submit.CodeShipper` with `tether submit`'s code."""

    @contextmanager
    def pack(self, spec: JobSpec, spec_path: Path) -> Iterator[Code | None]:
        """The spec's `code.dir` (relative to `spec_path`'s folder) packed as `tether submit`
        packs it, the archive deleted afterwards; None when the job ships no directory. One
        that cannot ship raises CliError (exit 2) saying why, as `tether submit` does."""
        if spec_path.is_relative_to(Path.cwd()):  # said as `tether submit` would, from here
            spec_path = spec_path.relative_to(Path.cwd())
        where = code_ship.code_dir(spec, str(spec_path), None)
        if where is None:
            yield None
            return
        archive = code_ship.packed(where)
        try:
            yield Code(where, archive)
        finally:
            code_ship.cleanup(archive)

    def submit(self, api_url: str, spec: JobSpec, code: PackedCode | None) -> tuple[str, str]:
        """Upload `code` (one `pack` made) unless there already, and submit `spec` with it: the
        new job's id and what was shipped. DemoError when the stack refuses either."""
        if code is not None and not isinstance(code, Code):
            raise TypeError(f"not packed by CliShipper.pack: {code!r}")
        try:
            with local_api(api_url) as api:
                body, shipped = shipped_spec(api, spec, code)
                reply = api.submit(body, f"local-{uuid.uuid4()}")
        except CliError as exc:
            raise DemoError(f"submit refused: {exc.message}") from None
        return str(reply.body["job_id"]), shipped


SHIPPER = CliShipper()

__all__ = ["SHIPPER", "CliShipper", "Code", "local_api", "shipped_spec"]
