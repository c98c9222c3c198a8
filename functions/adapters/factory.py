"""Builds every handler's adapters, once per container.

Each handler gets its dependencies the same way: a `dependencies()` function decorated with
`per_container`, which builds them from the function's settings model through the builders
below and keeps them like a Lambda container keeps module state between invocations. The
functions that call Vast and Cloudflare (monitor, lifecycle) get those clients from one provider
factory, `Providers`, built on their `ProviderSettings`.

Account-wide keys are read from SSM (SecureString) on first use and cached with the clients they
built (a Lambda container lives minutes to hours; a rotated key reaches new containers). Base
URLs come from the function's settings.

The seam for tests and the local stack is `install_hooks(Hooks(...))`: an httpx transport per
provider (`"vast"`, `"cloudflare"`, e.g. `httpx.MockTransport(simulator.handle)`), a `sleep` for
the adapters' back-off and a `clock` for the handlers' "now". Installing hooks (or `reset()`)
drops every cached client and every `per_container` result, so a new moto endpoint or simulator
takes effect at once. Nothing in production calls either; simulators live in `tether_local/`,
never here.

Each builder imports its adapter (and boto3, httpx) when it first builds one: a handler's cold
start imports only the adapters it uses (the heartbeat: the table and the secrets, no HTTP
client; `bench/cold_start.py` measures it).
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from functools import _lru_cache_wrapper

    import httpx

    from functions.adapters.artifacts import Artifacts
    from functions.adapters.cloudflare import (
        CloudflareAccount,
        CloudflareClient,
        Permission,
        TempCredentials,
    )
    from functions.adapters.code_bucket import CodeBucket
    from functions.adapters.notify import JobEvents
    from functions.adapters.r2 import ReadOnlyBucket
    from functions.adapters.secrets import SecretStore
    from functions.adapters.store import JobStore
    from functions.adapters.transitions import TransitionStarter
    from functions.adapters.vast import VastClient
    from functions.settings import ProviderSettings

T = TypeVar("T")
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


_lock = threading.Lock()
_hooks = Hooks()
_cache: dict[tuple[str, ...], Any] = {}


_per_container: list[_lru_cache_wrapper[Any]] = []


def per_container(build: Callable[[], T]) -> _lru_cache_wrapper[T]:
    """Cache what `build` returns for the container's life (built on the first invocation,
    where a bad environment fails loudly); `install_hooks` and `reset` drop it with the clients
    it holds."""
    cached = functools.cache(build)
    with _lock:
        _per_container.append(cached)
    return cached


def install_hooks(hooks: Hooks) -> None:
    """Point every adapter built from now on at `hooks` (tests, local stack)."""
    global _hooks
    with _lock:
        _hooks = hooks
        _cache.clear()
        for cached in _per_container:
            cached.cache_clear()


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
    import httpx

    transport = _hooks.transport(provider) if _hooks.transport is not None else None
    return httpx.Client(transport=transport, timeout=20)


def secret_string(secret_arn: str) -> str:
    """A provider key's value, once per container: an SSM SecureString parameter's ARN (the
    stack's, `infra/constructs/secrets.py`), or a Secrets Manager secret's (stacks before issue
    16, tests and benches that create one). A parameter or secret that does not exist raises."""

    def build() -> str:
        import boto3

        if ":ssm:" in secret_arn and ":parameter/" in secret_arn:
            name = "/" + secret_arn.split(":parameter/", 1)[1]
            reply = boto3.client("ssm").get_parameter(Name=name, WithDecryption=True)
            return str(reply["Parameter"]["Value"])
        value = boto3.client("secretsmanager").get_secret_value(SecretId=secret_arn)
        return str(value["SecretString"])

    return str(_cached(("secret", secret_arn), build))


def vast_api_key(secret_arn: str) -> str:
    key = secret_string(secret_arn).strip()
    if not key or key == PLACEHOLDER:
        raise SecretNotSet(f"{secret_arn}: set your Vast API key (`tether secrets set vast`)")
    return key


def cloudflare_account(secret_arn: str) -> CloudflareAccount:
    from functions.adapters.cloudflare import CloudflareAccount

    raw = secret_string(secret_arn)
    try:
        data = json.loads(raw)
    except ValueError:
        raise SecretNotSet(
            f"{secret_arn}: must be a JSON object (`tether secrets set cloudflare`)"
        ) from None
    missing = [
        f
        for f in CLOUDFLARE_FIELDS
        if not isinstance(data, dict) or not data.get(f) or data.get(f) == PLACEHOLDER
    ]
    if missing:
        raise SecretNotSet(
            f"{secret_arn}: set {', '.join(missing)} (`tether secrets set cloudflare`)"
        )
    return CloudflareAccount(**{f: str(data[f]) for f in CLOUDFLARE_FIELDS})


def vast(
    secret_arn: str, base_url: str, *, deadline_s: float = 30, timeout_s: float = 20
) -> VastClient:
    """`deadline_s`: how long one call retries; `timeout_s`: one request's timeout. A call takes
    at most about their sum (a request started just before the deadline)."""

    def build() -> VastClient:
        from functions.adapters.vast import VastClient

        kwargs: dict[str, Any] = {}
        if _hooks.sleep is not None:
            kwargs["sleep"] = _hooks.sleep
        return VastClient(
            vast_api_key(secret_arn),
            base_url=base_url,
            client=_http_client("vast"),
            deadline_s=deadline_s,
            timeout_s=timeout_s,
            **kwargs,
        )

    key = ("vast", secret_arn, base_url, str(deadline_s), str(timeout_s))
    client: VastClient = _cached(key, build)
    return client


def cloudflare(secret_arn: str, base_url: str) -> tuple[CloudflareClient, CloudflareAccount]:
    def build() -> tuple[CloudflareClient, CloudflareAccount]:
        from functions.adapters.cloudflare import CloudflareClient

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
    from functions.adapters.store import JobStore

    built: JobStore = _cached(("store", table_name), lambda: JobStore(table_name))
    return built


def secret_store() -> SecretStore:
    from functions.adapters.secrets import SecretStore

    built: SecretStore = _cached(("secret_store",), SecretStore)
    return built


def transitions(state_machine_arn: str) -> TransitionStarter:
    from functions.adapters.transitions import TransitionStarter

    built: TransitionStarter = _cached(
        ("transitions", state_machine_arn), lambda: TransitionStarter(state_machine_arn)
    )
    return built


def job_events(topic_arn: str | None) -> JobEvents:
    from functions.adapters.notify import JobEvents

    built: JobEvents = _cached(("job_events", topic_arn or ""), lambda: JobEvents(topic_arn))
    return built


def artifacts(bucket: str) -> Artifacts:
    from functions.adapters.artifacts import Artifacts

    built: Artifacts = _cached(("artifacts", bucket), lambda: Artifacts(bucket))
    return built


def read_only_bucket(secret_arn: str, base_url: str, r2_endpoint: str | None) -> ReadOnlyBucket:
    """The R2 bucket, read with `object-read-only` credentials minted per prefix; kept with the
    Cloudflare client, so its cached credentials survive between requests."""

    def build() -> ReadOnlyBucket:
        from functions.adapters.r2 import ReadOnlyBucket

        client, account = cloudflare(secret_arn, base_url)

        def mint(prefix: str, ttl_s: int) -> TempCredentials:
            return client.mint_temp_credentials(
                account.bucket, account.parent_access_key_id, prefix, ttl_s, "object-read-only"
            )

        return ReadOnlyBucket(
            endpoint=account.r2_endpoint(r2_endpoint), bucket=account.bucket, mint=mint, clock=now
        )

    built: ReadOnlyBucket = _cached(("r2", secret_arn, base_url, r2_endpoint or ""), build)
    return built


def code_bucket(secret_arn: str, base_url: str, r2_endpoint: str | None) -> CodeBucket:
    """The code archives (`functions/adapters/code_bucket.py`), with credentials minted per
    operation for exactly the keys it touches."""

    def build() -> CodeBucket:
        from functions.adapters.code_bucket import CodeBucket

        client, account = cloudflare(secret_arn, base_url)

        def mint(
            prefix: str, objects: Sequence[str], permission: Permission, ttl_s: int
        ) -> TempCredentials:
            return client.mint_temp_credentials(
                account.bucket, account.parent_access_key_id, prefix, ttl_s, permission,
                objects=objects,
            )  # fmt: skip

        return CodeBucket(
            endpoint=account.r2_endpoint(r2_endpoint), bucket=account.bucket, mint=mint, clock=now
        )

    built: CodeBucket = _cached(("code", secret_arn, base_url, r2_endpoint or ""), build)
    return built


def account_secrets(vast_secret_arn: str, cloudflare_secret_arn: str, base_url: str) -> list[str]:
    """Every account-wide key there is, for the last check before a rent that none of them
    reaches the host (invariant 6)."""
    _, account = cloudflare(cloudflare_secret_arn, base_url)
    return [vast_api_key(vast_secret_arn), account.api_token]


@dataclass(frozen=True)
class Providers:
    """The Vast and Cloudflare clients, and what is built on them, as the function's settings
    name them. Each method builds on its first call (a function that never reaches a provider
    never reads its key) and returns the cached client after; hand the methods themselves to
    the function's dependencies."""

    settings: ProviderSettings

    def vast(self) -> VastClient:
        return vast(
            self.settings.vast_secret_arn,
            self.settings.vast_base_url,
            deadline_s=self.settings.vast_deadline_s,
            timeout_s=self.settings.vast_timeout_s,
        )

    def cloudflare(self) -> tuple[CloudflareClient, CloudflareAccount]:
        return cloudflare(self.settings.cloudflare_secret_arn, self.settings.cloudflare_base_url)

    def code_bucket(self) -> CodeBucket:
        return code_bucket(
            self.settings.cloudflare_secret_arn,
            self.settings.cloudflare_base_url,
            self.settings.r2_endpoint,
        )

    def account_secrets(self) -> list[str]:
        return account_secrets(
            self.settings.vast_secret_arn,
            self.settings.cloudflare_secret_arn,
            self.settings.cloudflare_base_url,
        )
