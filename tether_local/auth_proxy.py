"""The `rclone serve s3 --auth-proxy` program of the local stack: only keys the control plane
minted through the Cloudflare simulator open the S3 stand-in, and only inside their scope.

rclone runs this once per new access key id (and again about every 5 minutes while the key is in
use; see `rclone serve s3 --help`, "Auth Proxy"). It reads `{"user": "<access key id>", ...}` on
stdin and must print a backend config on stdout; the `_secret_access_key` it returns is what
rclone checks the request's SigV4 signature against. An unknown, expired or revoked key gets no
secret, so rclone refuses the request (403 AccessDenied).

The answer comes from the Cloudflare simulator over loopback HTTP
(`GET <lookup>/<access key id>` → `{"secret", "bucket", "prefixes", "permission"}` or 404).

Scope: R2 limits a temporary key to `prefixes` in one bucket. rclone cannot, so each key gets
its own view directory: `<views>/<key>/<bucket>/<prefix>` is a symlink to the real directory
`<root>/<bucket>/<prefix>`, and the key's backend is the view (a `local` backend following
links). A key scoped to `jobs/a/` sees no other job and cannot write outside `jobs/a/`.

Stdlib only and run as a script (`python tether_local/auth_proxy.py ...`): it starts for every
new key, so it must start fast.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any


def lookup(url: str, access_key_id: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
    quoted = urllib.parse.quote(access_key_id, safe="")
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/{quoted}", timeout=timeout_s) as reply:  # noqa: S310 (loopback URL from the stack)
            data = json.loads(reply.read())
    except urllib.error.HTTPError:
        return None  # 404: not a live minted key
    return data if isinstance(data, dict) and data.get("secret") else None


def _safe_part(value: str) -> bool:
    return bool(value) and value not in (".", "..") and "/" not in value and "\0" not in value


def build_view(root: Path, views: Path, access_key_id: str, key: dict[str, Any]) -> Path | None:
    """The key's view directory (see the module docstring); None if its scope is unusable."""
    bucket = str(key.get("bucket", ""))
    if not _safe_part(bucket) or not _safe_part(access_key_id):
        return None
    view = views / access_key_id
    prefixes = [str(p) for p in key.get("prefixes") or []]
    if not prefixes:  # the whole bucket
        target = root / bucket
        target.mkdir(parents=True, exist_ok=True)
        view.mkdir(parents=True, exist_ok=True)
        link = view / bucket
        if not link.is_symlink():
            link.symlink_to(target, target_is_directory=True)
        return view
    for prefix in prefixes:
        parts = [p for p in prefix.split("/") if p]
        if not parts or not all(_safe_part(p) for p in parts):
            return None
        target = root / bucket / Path(*parts)
        target.mkdir(parents=True, exist_ok=True)
        link = view / bucket / Path(*parts)
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(target, target_is_directory=True)
    return view


def answer(request: dict[str, Any], *, lookup_url: str, root: Path, views: Path) -> dict[str, Any]:
    """The backend config for one auth request; without `_secret_access_key` rclone refuses."""
    access_key_id = str(request.get("user") or "")
    key = lookup(lookup_url, access_key_id) if access_key_id else None
    view = build_view(root, views, access_key_id, key) if key else None
    if key is None or view is None:
        return {"type": "local", "_root": str(views / ".refused"), "_secret_access_key": ""}
    config: dict[str, Any] = {
        "type": "local",
        "_root": str(view),
        "copy_links": "true",  # follow the view's symlinks into the real directories
        "_secret_access_key": str(key["secret"]),
    }
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--lookup", required=True, help="URL of the simulator's key lookup")
    parser.add_argument("--root", required=True, type=Path, help="the S3 server's root")
    parser.add_argument("--views", required=True, type=Path, help="per-key view directories")
    args = parser.parse_args(argv)
    try:
        request = json.loads(sys.stdin.read() or "{}")
    except ValueError:
        request = {}
    try:
        reply = answer(
            request if isinstance(request, dict) else {},
            lookup_url=args.lookup,
            root=args.root,
            views=args.views,
        )
    except (OSError, ValueError) as exc:
        print(f"tether auth proxy: {exc}", file=sys.stderr)
        reply = {"type": "local", "_root": str(args.views / ".refused"), "_secret_access_key": ""}
    json.dump(reply, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
