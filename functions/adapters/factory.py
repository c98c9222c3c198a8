"""Builds the adapters the monitor and lifecycle handlers use, once per container.

Account-wide keys are read from Secrets Manager on first use and cached with the clients they
built (a Lambda container lives minutes to hours; a rotated key reaches new containers). Base
URLs come from the function's settings.

The seam for tests and the local stack is `install_hooks(Hooks(...))`: an httpx transport per
provider (`"vast"`, `"cloudflare"`, e.g. `httpx.MockTransport(simulator.handle)`), a `sleep` for
the adapters' back-off and a `clock` for the handlers' "now". Installing hooks (or `reset()`)
drops every cached client, so a new moto endpoint or simulator takes effect at once. Nothing in
production calls either; simulators live in `tether_local/`, never here.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import boto3
import httpx

from functions.adapters.cloudflare import CloudflareClient
from functions.adapters.store import JobStore
from functions.adapters.transitions import TransitionStarter
from functions.adapters.vast import VastClient

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

Provider = Literal["vast", "cloudflare"]
PLACEHOLDER = "REPLACE_ME"
CLOUDFLARE_FIELDS = ("account_id", "api_token", "parent_access_key_id", "bucket")


class SecretNotSet(RuntimeError):
    """A provider secret still holds the deploy-time placeholder or lacks a field."""


@dataclass(frozen=True)
class Hooks:
    transport: Callable[[Provider], httpx.BaseTransport | None] | None = None
    sleep: Callable[[float], None] | None = None
    clock: Callable[[], float] | None = None


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


_lock = threading.Lock()
_hooks = Hooks()
_cache: dict[tuple[str, ...], Any] = {}


def install_hooks(hooks: Hooks) -> None:
    """Point every adapter built from now on at `hooks` (tests, local stack)."""
    global _hooks
    with _lock:
        _hooks = hooks
        _cache.clear()


def reset() -> None:
    """Forget cached clients and hooks."""
    install_hooks(Hooks())


def now() -> float:
    clock = _hooks.clock
    return clock() if clock is not None else time.time()


def _cached(key: tuple[str, ...], build: Callable[[], Any]) -> Any:
    with _lock:
        if key in _cache:
            return _cache[key]
    value = build()
    with _lock:
        return _cache.setdefault(key, value)


def _http_client(provider: Provider) -> httpx.Client:
    transport = _hooks.transport(provider) if _hooks.transport is not None else None
    return httpx.Client(transport=transport, timeout=20)


def secret_string(secret_arn: str) -> str:
    def build() -> str:
        value = boto3.client("secretsmanager").get_secret_value(SecretId=secret_arn)
        return str(value["SecretString"])

    return str(_cached(("secret", secret_arn), build))


def vast_api_key(secret_arn: str) -> str:
    key = secret_string(secret_arn).strip()
    if not key or key == PLACEHOLDER:
        raise SecretNotSet(f"{secret_arn}: set your Vast API key in this secret (README Deploy)")
    return key


def cloudflare_account(secret_arn: str) -> CloudflareAccount:
    raw = secret_string(secret_arn)
    try:
        data = json.loads(raw)
    except ValueError:
        raise SecretNotSet(f"{secret_arn}: must be a JSON object (README Deploy)") from None
    missing = [
        f
        for f in CLOUDFLARE_FIELDS
        if not isinstance(data, dict) or not data.get(f) or data.get(f) == PLACEHOLDER
    ]
    if missing:
        raise SecretNotSet(f"{secret_arn}: set {', '.join(missing)} (README Deploy)")
    return CloudflareAccount(**{f: str(data[f]) for f in CLOUDFLARE_FIELDS})


def vast(secret_arn: str, base_url: str) -> VastClient:
    def build() -> VastClient:
        kwargs: dict[str, Any] = {}
        if _hooks.sleep is not None:
            kwargs["sleep"] = _hooks.sleep
        return VastClient(
            vast_api_key(secret_arn),
            base_url=base_url,
            client=_http_client("vast"),
            deadline_s=30,
            **kwargs,
        )

    client: VastClient = _cached(("vast", secret_arn, base_url), build)
    return client


def cloudflare(secret_arn: str, base_url: str) -> tuple[CloudflareClient, CloudflareAccount]:
    def build() -> tuple[CloudflareClient, CloudflareAccount]:
        account = cloudflare_account(secret_arn)
        kwargs: dict[str, Any] = {}
        if _hooks.sleep is not None:
            kwargs["sleep"] = _hooks.sleep
        if _hooks.clock is not None:
            kwargs["wall_clock"] = _hooks.clock
        client = CloudflareClient(
            account.account_id,
            account.api_token,
            base_url=base_url,
            client=_http_client("cloudflare"),
            **kwargs,
        )
        return client, account

    built: tuple[CloudflareClient, CloudflareAccount] = _cached(
        ("cloudflare", secret_arn, base_url), build
    )
    return built


def store(table_name: str) -> JobStore:
    built: JobStore = _cached(("store", table_name), lambda: JobStore(table_name))
    return built


def transitions(state_machine_arn: str) -> TransitionStarter:
    built: TransitionStarter = _cached(
        ("transitions", state_machine_arn), lambda: TransitionStarter(state_machine_arn)
    )
    return built


def s3() -> S3Client:
    built: S3Client = _cached(("s3",), lambda: boto3.client("s3"))
    return built
