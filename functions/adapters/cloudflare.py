"""Cloudflare API adapter: mint R2 temporary credentials scoped to one job
(docs/architecture.md#credentials).

`POST /accounts/{account_id}/r2/temp-access-credentials` with the parent API token in the
Authorization header (never in a URL, a log line or an error message). Calls are retried with
jittered exponential backoff on 429, 5xx and connection errors under a total deadline.

Cloudflare allows 1200 requests per 5 minutes per user and then blocks *every* call for 5 minutes.
So the client spends from a local token bucket (default 1000 per 5 min, leaving room for the
dashboard and other tools on the same user), and after a 429 it fails fast until the block is over
instead of extending it.

`mint_job_credentials` is the one place a generation's credentials are minted (the lifecycle at
rent, the monitor on renewal, the tests that provision by hand): two keys, because an R2
temporary credential carries one permission — `object-read-only` on `jobs/<job_id>/` and
`object-read-write` on `jobs/<job_id>/g<generation>/` — returned as the domain's
`StorageCredentials` the agent receives.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from functions.domain.heartbeat_contract import StorageCredentials, StorageKey
from functions.domain.storage_layout import generation_prefix, job_prefix

DEFAULT_BASE_URL = "https://api.cloudflare.com/client/v4"
MAX_TTL_S = 604_800  # Cloudflare's maximum (7 days)
DEFAULT_MIN_TTL_S = 900  # Cloudflare's default TTL; shorter keys mean more renewals per lease
RATE_LIMIT_BLOCK_S = 300.0  # how long Cloudflare blocks a user that passed its limit
# Codes Cloudflare uses for a bad or missing token, whatever the HTTP status says.
_AUTH_CODES = frozenset({6003, 6111, 9106, 9109, 10000, 10001, 10002, 10003})

Permission = Literal["admin-read-write", "admin-read-only", "object-read-write", "object-read-only"]
PERMISSIONS: tuple[Permission, ...] = (
    "admin-read-write",
    "admin-read-only",
    "object-read-write",
    "object-read-only",
)


@dataclass(frozen=True)
class TempCredentials:
    access_key_id: str
    secret_access_key: str
    session_token: str
    expires_at: float  # epoch seconds; counted from before the request, so never late

    def __repr__(self) -> str:  # the secret and token never reach a log line
        return (
            f"TempCredentials(access_key_id={self.access_key_id!r}, expires_at={self.expires_at})"
        )


@dataclass(frozen=True)
class CloudflareAccount:
    """The parsed `tether/cloudflare` secret (README "Deploy")."""

    account_id: str
    api_token: str
    parent_access_key_id: str
    bucket: str

    def __repr__(self) -> str:  # the token never reaches a log line
        return f"CloudflareAccount(account_id={self.account_id!r}, bucket={self.bucket!r})"

    def r2_endpoint(self, override: str | None = None) -> str:
        return override or f"https://{self.account_id}.r2.cloudflarestorage.com"


class CloudflareError(Exception):
    """Base of every error this adapter raises. Messages never carry the API token."""

    def __init__(
        self, message: str, *, status: int | None = None, codes: tuple[int, ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.codes = codes


class CloudflareAuthError(CloudflareError):
    """The token is wrong, revoked, or lacks R2 permission on this account. Not retried."""


class CloudflareBadRequest(CloudflareError):
    """Cloudflare refused the request as given (bucket, parent key, TTL, permission)."""


class CloudflareRateLimited(CloudflareError):
    """Rate limited, by Cloudflare or by our own budget; retry after `retry_after_s`."""

    def __init__(self, message: str, *, retry_after_s: float, status: int | None = 429) -> None:
        super().__init__(message, status=status)
        self.retry_after_s = retry_after_s


class CloudflareUnavailable(CloudflareError):
    """5xx, timeouts or connection errors until the deadline ran out, or a malformed reply."""


class RequestBudget:
    """A token bucket: `capacity` requests, refilled evenly over `per_s` seconds. Thread-safe."""

    def __init__(
        self,
        capacity: int = 1000,
        per_s: float = 300.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity < 1 or per_s <= 0:
            raise ValueError("capacity must be ≥ 1 and per_s > 0")
        self._capacity = float(capacity)
        self._rate = capacity / per_s
        self._tokens = float(capacity)
        self._clock = clock
        self._last = clock()
        self._blocked_until = 0.0
        self._lock = threading.Lock()

    def take(self) -> float:
        """Spend one request. Returns 0 when granted, else the seconds until one is free."""
        with self._lock:
            now = self._clock()
            if now < self._blocked_until:
                return self._blocked_until - now
            self._tokens = min(self._capacity, self._tokens + (now - self._last) * self._rate)
            self._last = now
            if self._tokens >= 1:
                self._tokens -= 1
                return 0.0
            return (1 - self._tokens) / self._rate

    def block(self, seconds: float) -> None:
        """Cloudflare said 429: nothing goes out until the block is over."""
        with self._lock:
            self._blocked_until = max(self._blocked_until, self._clock() + seconds)
            self._tokens = 0.0
            self._last = self._clock()


def _error_details(response: httpx.Response) -> tuple[str, tuple[int, ...]]:
    """Cloudflare's `errors: [{code, message}]` as one line and the codes."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase, ()
    errors = body.get("errors") if isinstance(body, dict) else None
    if not isinstance(errors, list) or not errors:
        return response.reason_phrase, ()
    parts, codes = [], []
    for err in errors:
        if isinstance(err, dict):
            code = err.get("code")
            if isinstance(code, int):
                codes.append(code)
            parts.append(f"{err.get('message', '')} ({code})")
    return "; ".join(parts), tuple(codes)


def _retry_after_s(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class CloudflareClient:
    def __init__(
        self,
        account_id: str,
        api_token: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        client: httpx.Client | None = None,
        timeout_s: float = 10.0,
        deadline_s: float = 30.0,
        backoff_s: float = 0.25,
        max_backoff_s: float = 5.0,
        min_ttl_s: int = DEFAULT_MIN_TTL_S,
        budget: RequestBudget | None = None,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        if not account_id or not api_token:
            raise ValueError("account_id and api_token are required")
        if not 1 <= min_ttl_s <= MAX_TTL_S:
            raise ValueError(f"min_ttl_s must be between 1 and {MAX_TTL_S}")
        self._account_id = account_id
        self._token = api_token
        self._base_url = base_url.rstrip("/")
        self._client = client or httpx.Client(timeout=timeout_s)
        self._deadline_s = deadline_s
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._min_ttl_s = min_ttl_s
        self._budget = budget or RequestBudget(clock=monotonic)
        self._sleep = sleep
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._rng = rng or random.Random()

    def __repr__(self) -> str:
        return f"CloudflareClient(account_id={self._account_id!r}, base_url={self._base_url!r})"

    def mint_temp_credentials(
        self,
        bucket: str,
        parent_access_key_id: str,
        prefix: str,
        ttl_s: int,
        permission: Permission = "object-read-write",
        *,
        lease_s: float | None = None,
        objects: Sequence[str] = (),
    ) -> TempCredentials:
        """Credentials for `bucket`, limited to keys under `prefix` (e.g. `jobs/<job_id>/`)
        and to the exact keys `objects` (`prefix` may then be "": those keys only).

        `lease_s`, when given, is the lease the agent gets with these credentials: they must
        outlive it, so the agent can still upload a final checkpoint when the lease runs out.
        """
        if prefix or not objects:
            self._check_args(bucket, parent_access_key_id, prefix, ttl_s, permission, lease_s)
        else:
            self._check_args(bucket, parent_access_key_id, "x/", ttl_s, permission, lease_s)
        if any(not key or key.startswith("/") or key.endswith("/") for key in objects):
            raise ValueError(f"objects: must be object keys, not prefixes ({list(objects)!r})")
        body: dict[str, Any] = {
            "bucket": bucket,
            "parentAccessKeyId": parent_access_key_id,
            "permission": permission,
            "ttlSeconds": ttl_s,
        }
        if prefix:
            body["prefixes"] = [prefix]
        if objects:
            body["objects"] = list(objects)
        issued_at = self._wall_clock()
        result = self._post(f"/accounts/{self._account_id}/r2/temp-access-credentials", body)
        try:
            return TempCredentials(
                access_key_id=_required_str(result, "accessKeyId"),
                secret_access_key=_required_str(result, "secretAccessKey"),
                session_token=_required_str(result, "sessionToken"),
                expires_at=issued_at + ttl_s,
            )
        except KeyError as exc:
            raise CloudflareUnavailable(f"Cloudflare's reply lacks result.{exc.args[0]}") from None

    def _check_args(
        self,
        bucket: str,
        parent_access_key_id: str,
        prefix: str,
        ttl_s: int,
        permission: str,
        lease_s: float | None,
    ) -> None:
        problems = []
        if not bucket:
            problems.append("bucket: must not be empty")
        if not parent_access_key_id:
            problems.append("parent_access_key_id: must not be empty")
        # Without the trailing slash, jobs/abc would also grant jobs/abcd/...
        if not prefix or prefix.startswith("/") or not prefix.endswith("/"):
            problems.append(
                f"prefix: must be a key prefix ending in '/', like jobs/<id>/ ({prefix!r})"
            )
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int):
            problems.append("ttl_s: must be a whole number of seconds")
        elif not self._min_ttl_s <= ttl_s <= MAX_TTL_S:
            problems.append(
                f"ttl_s: must be between {self._min_ttl_s} and {MAX_TTL_S} (got {ttl_s})"
            )
        elif lease_s is not None and ttl_s < lease_s:
            problems.append(f"ttl_s: {ttl_s} is shorter than the lease ({lease_s:g} s)")
        if permission not in PERMISSIONS:
            problems.append(f"permission: must be one of {', '.join(PERMISSIONS)}")
        if problems:
            raise ValueError("; ".join(problems))

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self._base_url + path
        headers = {"Authorization": f"Bearer {self._token}"}
        deadline = self._monotonic() + self._deadline_s
        attempt = 0
        while True:
            wait = self._budget.take()
            if wait > 0:
                if self._monotonic() + wait > deadline:
                    raise CloudflareRateLimited(
                        f"Cloudflare API rate limit: next request possible in {wait:.0f} s",
                        retry_after_s=wait,
                        status=None,
                    )
                self._sleep(wait)
                continue
            attempt += 1
            failure: CloudflareError
            retry_after: float | None = None
            try:
                response = self._client.post(url, json=body, headers=headers)
            except httpx.TransportError as exc:
                # The exception text names only the URL, which carries no secret.
                failure = CloudflareUnavailable(f"Cloudflare API unreachable: {type(exc).__name__}")
            else:
                if response.status_code < 400:
                    return self._result(response)
                message, codes = _error_details(response)
                status = response.status_code
                if status in (401, 403) or (status == 400 and _AUTH_CODES.intersection(codes)):
                    raise CloudflareAuthError(
                        f"Cloudflare refused the API token ({status}): {message}",
                        status=status,
                        codes=codes,
                    )
                if status == 429:
                    retry_after = _retry_after_s(response) or RATE_LIMIT_BLOCK_S
                    self._budget.block(retry_after)
                    failure = CloudflareRateLimited(
                        f"Cloudflare API rate limit: blocked for {retry_after:.0f} s ({message})",
                        retry_after_s=retry_after,
                    )
                elif status >= 500:
                    failure = CloudflareUnavailable(
                        f"Cloudflare API error {status}: {message}", status=status, codes=codes
                    )
                else:
                    raise CloudflareBadRequest(
                        f"Cloudflare rejected the request ({status}): {message}",
                        status=status,
                        codes=codes,
                    )
            pause = retry_after if retry_after is not None else self._backoff(attempt)
            if self._monotonic() + pause > deadline:
                raise failure
            self._sleep(pause)

    def _backoff(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(cap, base × 2^(attempt-1))]."""
        ceiling = min(self._max_backoff_s, self._backoff_s * 2 ** (attempt - 1))
        return self._rng.uniform(0, ceiling)

    @staticmethod
    def _result(response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            raise CloudflareUnavailable("Cloudflare's reply is not JSON") from None
        if not isinstance(body, dict):
            raise CloudflareUnavailable("Cloudflare's reply is not a JSON object")
        if body.get("success") is not True:
            message, codes = _error_details(response)
            raise CloudflareBadRequest(
                f"Cloudflare answered success=false: {message}", status=200, codes=codes
            )
        result = body.get("result")
        if not isinstance(result, dict):
            raise CloudflareUnavailable("Cloudflare's reply has no result object")
        return result


def _required_str(result: dict[str, Any], key: str) -> str:
    value = result.get(key)
    if not isinstance(value, str) or not value:
        raise KeyError(key)
    return value


def mint_job_credentials(
    client: CloudflareClient,
    account: CloudflareAccount,
    job_id: str,
    generation: int,
    *,
    ttl_s: int,
    endpoint: str,
    lease_s: float | None = None,
) -> StorageCredentials:
    """A generation's keys (invariant 6): read-only on the job's prefix, read-write on the
    generation's own prefix and nothing else, both valid `ttl_s` seconds, for the S3 API at
    `endpoint`. `lease_s`: the lease they go out with, which they must outlive (see
    `mint_temp_credentials`)."""

    def mint(prefix: str, permission: Permission) -> StorageKey:
        minted = client.mint_temp_credentials(
            account.bucket, account.parent_access_key_id, prefix, ttl_s, permission,
            lease_s=lease_s,
        )  # fmt: skip
        return StorageKey(
            access_key_id=minted.access_key_id,
            secret_access_key=minted.secret_access_key,
            session_token=minted.session_token,
            expires_at=minted.expires_at,
            prefix=prefix,
        )

    return StorageCredentials(
        endpoint=endpoint,
        bucket=account.bucket,
        read=mint(job_prefix(job_id), "object-read-only"),
        write=mint(generation_prefix(job_id, generation), "object-read-write"),
    )
