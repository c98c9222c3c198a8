"""The Cloudflare API simulator's core: mints R2 temporary credentials that expire
(docs/architecture.md#local-stack).

In memory and thread-safe. `CloudflareSim.handle` answers httpx requests in Cloudflare's shapes:
`POST /client/v4/accounts/{account_id}/r2/temp-access-credentials` → `{"success": true, "result":
{"accessKeyId", "secretAccessKey", "sessionToken"}, "errors": [], "messages": []}`, and failures
in the `{"success": false, "errors": [{"code", "message"}]}` envelope: 400/9106 missing token,
403/10000 wrong token or account, 404/10006 no such bucket, 400 validation, 429/971 with
`Retry-After` once a token passes its limit (1200 per 5 min; then blocked for 5 min, as the real
API does), 404/7003 unknown route.

Session tokens are shaped and sized as R2's (`base64("jwt/" + JWT)`, about 550–700 characters),
so whatever carries them (the heartbeat reply, presigned URLs) is tested at their real size.

`live_key(access_key_id)` answers only while a key is unexpired and its parent not revoked:
the R2 front (`tether_local/r2/front.py`) asks it on every S3 request for the key's secret,
session token and scope, so minted keys work, only inside their scope, and stop working the
moment they expire or their parent is revoked. `secret_for` and `scope_for` are its parts.
Time comes from an injectable clock, so tests and the demo can fast-forward expiry.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

MAX_TTL_S = 604_800
DEFAULT_TTL_S = 900
PERMISSIONS = ("admin-read-write", "admin-read-only", "object-read-write", "object-read-only")

# What a permission allows, to refuse children wider than their parent.
_GRANTS: dict[str, frozenset[str]] = {
    "admin-read-write": frozenset({"admin", "read", "write"}),
    "admin-read-only": frozenset({"admin", "read"}),
    "object-read-write": frozenset({"read", "write"}),
    "object-read-only": frozenset({"read"}),
}

_ROUTE = re.compile(r"^/client/v4/accounts/(?P<account>[^/]+)/r2/temp-access-credentials/?$")

CODE_MISSING_AUTH = 9106
CODE_AUTH = 10000
CODE_NO_SUCH_BUCKET = 10006
CODE_NO_ROUTE = 7003
CODE_RATE_LIMITED = 971
CODE_INVALID = 10040  # the simulator's choice; clients should key on the HTTP status


@dataclass(frozen=True)
class KeyScope:
    bucket: str
    prefixes: tuple[str, ...]
    objects: tuple[str, ...]
    permission: str
    parent_access_key_id: str
    expires_at: float

    def allows(self, key: str) -> bool:
        """Whether an object key is inside this scope (no prefixes or objects = whole bucket)."""
        if not self.prefixes and not self.objects:
            return True
        return key in self.objects or any(key.startswith(p) for p in self.prefixes)


@dataclass(frozen=True)
class MintedKey:
    """A minted key as the simulator holds it (what the R2 front checks requests against)."""

    secret_access_key: str = field(repr=False)
    session_token: str = field(repr=False)
    scope: KeyScope


@dataclass
class _Caller:
    requests: deque[float] = field(default_factory=deque)
    blocked_until: float = 0.0


class CloudflareSim:
    def __init__(
        self,
        *,
        account_id: str = "local-account",
        api_tokens: Iterable[str] = ("local-api-token",),
        parents: Mapping[str, str] | None = None,
        buckets: Iterable[str] = ("tether",),
        clock: Callable[[], float] = time.time,
        rate_limit: int = 1200,
        rate_window_s: float = 300.0,
        block_s: float = 300.0,
    ) -> None:
        """`parents` maps each parent R2 access key id to its permission."""
        self.account_id = account_id
        self._tokens = set(api_tokens)
        self._parents = dict(parents or {"local-parent-key": "admin-read-write"})
        self._buckets = set(buckets)
        self._clock = clock
        self._rate_limit = rate_limit
        self._rate_window_s = rate_window_s
        self._block_s = block_s
        self._keys: dict[str, MintedKey] = {}
        self._callers: dict[str, _Caller] = {}
        self._lock = threading.Lock()
        self.requests_seen = 0
        self._signing_key = secrets.token_bytes(32)  # signs the session tokens' JWTs

    # --- control (tests, demo) -------------------------------------------------------------

    def add_bucket(self, name: str) -> None:
        with self._lock:
            self._buckets.add(name)

    def add_parent(self, parent_access_key_id: str, permission: str = "admin-read-write") -> None:
        """Like creating an R2 API token: its access key id can parent temporary keys."""
        if permission not in PERMISSIONS:
            raise ValueError(f"permission must be one of {', '.join(PERMISSIONS)}")
        with self._lock:
            self._parents[parent_access_key_id] = permission

    def revoke_parent(self, parent_access_key_id: str) -> None:
        """Like deleting the parent R2 token: every child key stops working."""
        with self._lock:
            self._parents.pop(parent_access_key_id, None)

    def transport(self) -> httpx.MockTransport:
        """Plug into `httpx.Client(transport=...)` to point an adapter at the simulator."""
        return httpx.MockTransport(self.handle)

    # --- lookups for the S3 stand-in ---------------------------------------------------------

    def live_key(self, access_key_id: str) -> MintedKey | None:
        """The key if it is live now (minted, unexpired, parent not revoked), else None."""
        return self._live(access_key_id)

    def secret_for(self, access_key_id: str) -> str | None:
        minted = self._live(access_key_id)
        return None if minted is None else minted.secret_access_key

    def scope_for(self, access_key_id: str) -> KeyScope | None:
        minted = self._live(access_key_id)
        return None if minted is None else minted.scope

    def set_clock(self, clock: Callable[[], float]) -> None:
        """Replace the clock (tests move time forward to expire keys at once)."""
        with self._lock:
            self._clock = clock

    def _live(self, access_key_id: str) -> MintedKey | None:
        with self._lock:
            minted = self._keys.get(access_key_id)
            if minted is None:
                return None
            if self._clock() >= minted.scope.expires_at:
                del self._keys[access_key_id]  # expired keys never come back
                return None
            if minted.scope.parent_access_key_id not in self._parents:
                return None
            return minted

    # --- the HTTP API ------------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            self.requests_seen += 1
            match = _ROUTE.match(request.url.path)
            if match is None:
                return _error(404, CODE_NO_ROUTE, "No route for that URI")
            if request.method != "POST":
                return _error(405, CODE_NO_ROUTE, f"Method {request.method} not allowed")
            token = _bearer(request)
            if token is None:
                return _error(
                    400,
                    CODE_MISSING_AUTH,
                    "Missing X-Auth-Key, X-Auth-Email or Authorization headers",
                )
            if token not in self._tokens or match["account"] != self.account_id:
                return _error(403, CODE_AUTH, "Authentication error")
            limited = self._rate_limited(token)
            if limited is not None:
                return limited
            try:
                body = json.loads(request.content or b"null")
            except ValueError:
                return _error(400, CODE_INVALID, "request body is not valid JSON")
            return self._mint(body)

    def _rate_limited(self, token: str) -> httpx.Response | None:
        now = self._clock()
        caller = self._callers.setdefault(token, _Caller())
        if now < caller.blocked_until:
            return _too_many(caller.blocked_until - now)
        while caller.requests and caller.requests[0] <= now - self._rate_window_s:
            caller.requests.popleft()
        caller.requests.append(now)
        if len(caller.requests) > self._rate_limit:
            caller.blocked_until = now + self._block_s
            caller.requests.clear()
            return _too_many(self._block_s)
        return None

    def _mint(self, body: Any) -> httpx.Response:
        if not isinstance(body, dict):
            return _error(400, CODE_INVALID, "request body must be a JSON object")
        problems = _validate(body)
        if problems:
            return _error(400, CODE_INVALID, *problems)
        bucket = body["bucket"]
        if bucket not in self._buckets:
            return _error(404, CODE_NO_SUCH_BUCKET, "The specified bucket does not exist.")
        parent = body["parentAccessKeyId"]
        parent_permission = self._parents.get(parent)
        if parent_permission is None:
            return _error(
                400, CODE_INVALID, "parentAccessKeyId: no R2 token with this access key id"
            )
        permission = body["permission"]
        if not _GRANTS[permission] <= _GRANTS[parent_permission]:
            return _error(
                400,
                CODE_INVALID,
                f"permission: {permission} exceeds the parent token's {parent_permission}",
            )
        ttl = body.get("ttlSeconds", DEFAULT_TTL_S)
        access_key_id = secrets.token_hex(16)  # R2 access key ids are 32 hex characters
        scope = KeyScope(
            bucket=bucket,
            prefixes=tuple(body.get("prefixes") or ()),
            objects=tuple(body.get("objects") or ()),
            permission=permission,
            parent_access_key_id=parent,
            expires_at=self._clock() + ttl,
        )
        minted = MintedKey(
            secret_access_key=secrets.token_hex(32),
            session_token=self._session_token(access_key_id, scope),
            scope=scope,
        )
        self._keys[access_key_id] = minted
        return httpx.Response(
            200,
            json={
                "success": True,
                "errors": [],
                "messages": [],
                "result": {
                    "accessKeyId": access_key_id,
                    "secretAccessKey": minted.secret_access_key,
                    "sessionToken": minted.session_token,
                },
            },
        )

    def _session_token(self, access_key_id: str, scope: KeyScope) -> str:
        """Shaped and sized as R2's: `base64("jwt/" + JWT)`, the JWT's claims naming the
        account, the key, its bucket, permission and paths, audience, issue and expiry: about
        550–700 characters, more with longer paths (so what carries it meets R2's sizes)."""
        issued = int(self._clock())
        claims = {
            "accountId": self.account_id,
            "accessKeyId": access_key_id,
            "parentAccessKeyId": scope.parent_access_key_id,
            "aud": "r2",
            "bucket": scope.bucket,
            "scope": scope.permission,
            "prefixes": list(scope.prefixes),
            "objects": list(scope.objects),
            "iat": issued,
            "exp": int(scope.expires_at),
            "jti": secrets.token_hex(16),
        }
        header = {"alg": "HS256", "typ": "JWT"}
        signing_input = f"{_b64url(header)}.{_b64url(claims)}"
        signature = hmac.new(self._signing_key, signing_input.encode(), hashlib.sha256).digest()
        jwt = f"{signing_input}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"
        return base64.b64encode(b"jwt/" + jwt.encode()).decode()


def _b64url(value: dict[str, Any]) -> str:
    raw = json.dumps(value, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _validate(body: dict[str, Any]) -> list[str]:
    problems = []
    for name in ("bucket", "parentAccessKeyId"):
        if not isinstance(body.get(name), str) or not body[name]:
            problems.append(f"{name}: required, a non-empty string")
    if body.get("permission") not in PERMISSIONS:
        problems.append(f"permission: must be one of {', '.join(PERMISSIONS)}")
    ttl = body.get("ttlSeconds", DEFAULT_TTL_S)
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 1 <= ttl <= MAX_TTL_S:
        problems.append(f"ttlSeconds: must be a number from 1 to {MAX_TTL_S}")
    for name in ("prefixes", "objects"):
        value = body.get(name)
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(v, str) and v for v in value)
        ):
            problems.append(f"{name}: must be a list of non-empty strings")
    unknown = set(body) - {
        "bucket", "parentAccessKeyId", "permission", "ttlSeconds", "prefixes", "objects"
    }  # fmt: skip
    if unknown:
        problems.append(f"unknown field(s): {', '.join(sorted(unknown))}")
    return problems


def _bearer(request: httpx.Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _error(status: int, code: int, *messages: str) -> httpx.Response:
    return httpx.Response(
        status,
        json={
            "success": False,
            "errors": [{"code": code, "message": m} for m in messages],
            "messages": [],
            "result": None,
        },
    )


def _too_many(retry_after_s: float) -> httpx.Response:
    response = _error(
        429, CODE_RATE_LIMITED, "Please wait and consider throttling your request speed"
    )
    response.headers["Retry-After"] = str(math.ceil(retry_after_s))
    return response
