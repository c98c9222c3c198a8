"""Vast's documented bounds on a create-instance request (`PUT /api/v0/asks/{id}/`), checked
before tether sends one, and the job env those bounds leave room for.

Every bound is Vast's OpenAPI spec for `PUT /asks/{id}/` (`x-input-validation`); the official
client (vast-ai/vast-cli) sends `env` as a JSON object. A request over any of them is refused by
Vast with 400 `invalid_args` for every offer alike, so it is never a reason to try another
offer: `create_instance_breaches` names each bound a body breaks (field, bound, actual size),
and the adapter refuses to send it (`functions/adapters/vast_wire.py`, `VastInvalidArgs`).

How sizes are counted. Text is counted in characters. The OpenAPI types `env` as one string in
Docker flag form (`-e K=V -e K2=V2`), so the whole env is counted as that string: every pair
written `-e K=V`, pairs joined by one space (`env_flag_string`), unquoted. `args` (a list) is
counted as its command line, the items joined by one space (`bash -c <script>`), the larger of
the two plausible readings; how Vast counts a list is not documented.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

# Vast's OpenAPI, PUT /asks/{id}/ x-input-validation: each env value at most 256 characters.
MAX_ENV_VALUE_CHARS = 256
# Vast's OpenAPI, PUT /asks/{id}/ x-input-validation: the whole env at most 32 KB (read as
# 32 000, the smaller reading), counted as the Docker-flag string `env_flag_string`.
MAX_ENV_CHARS = 32_000
# Vast's OpenAPI, PUT /asks/{id}/ x-input-validation: label at most 256 characters.
MAX_LABEL_CHARS = 256
# Vast's OpenAPI, PUT /asks/{id}/ x-input-validation: onstart at most 4048 characters.
MAX_ONSTART_CHARS = 4048
# Vast's OpenAPI, PUT /asks/{id}/ x-input-validation: args + args_str + onstart at most 4096.
MAX_COMMAND_CHARS = 4096
# Vast's OpenAPI, PUT /asks/{id}/ x-input-validation: image at most 1024 characters.
MAX_IMAGE_CHARS = 1024
# Vast's OpenAPI, PUT /asks/{id}/ x-input-validation: disk at least 8 GB.
MIN_DISK_GB = 8
# Vast's OpenAPI, PUT /asks/{id}/ x-input-validation: price (a bid, $/h) from 0.001 to 128.
MIN_PRICE_USD_PER_HOUR = 0.001
MAX_PRICE_USD_PER_HOUR = 128.0

COMMAND_FIELD = "args+args_str+onstart"


@dataclass(frozen=True)
class LimitBreach:
    """One bound a request breaks: `field` as the request names it (`env.NAME` for one
    variable, `env` for the whole), the bound and the actual size, in `unit`."""

    field: str
    bound: Literal["at most", "at least"]
    limit: float
    actual: float
    unit: str

    def describe(self) -> str:
        return (
            f"{self.field}: {_number(self.actual)} {self.unit}, but Vast's limit is "
            f"{self.bound} {_number(self.limit)} {self.unit}"
        )


def env_flag_string(env: Mapping[str, str]) -> str:
    """The env as the OpenAPI types it, `-e K=V -e K2=V2`: what its total size is counted on."""
    return " ".join(f"-e {name}={value}" for name, value in env.items())


def env_breaches(
    env: Mapping[str, str], *, max_total_chars: int = MAX_ENV_CHARS
) -> list[LimitBreach]:
    """Each value over MAX_ENV_VALUE_CHARS, then the whole env over `max_total_chars`."""
    found = [
        _at_most(f"env.{name}", len(value), MAX_ENV_VALUE_CHARS, "characters")
        for name, value in env.items()
        if len(value) > MAX_ENV_VALUE_CHARS
    ]
    total = len(env_flag_string(env))
    if total > max_total_chars:
        found.append(_at_most("env", total, max_total_chars, "characters (as -e K=V flags)"))
    return found


def create_instance_breaches(body: Mapping[str, Any]) -> list[LimitBreach]:
    """Every documented bound the create-instance `body` breaks, in the body's field order
    (image, disk, label, env, onstart, the command, price); empty when Vast's bounds all hold.
    Fields of the wrong type are the caller's to refuse; they are not sized here."""
    found: list[LimitBreach] = []
    image = body.get("image")
    if isinstance(image, str) and len(image) > MAX_IMAGE_CHARS:
        found.append(_at_most("image", len(image), MAX_IMAGE_CHARS, "characters"))
    disk = _number_in(body.get("disk"))
    if disk is not None and not disk >= MIN_DISK_GB:  # NaN too
        found.append(LimitBreach("disk", "at least", MIN_DISK_GB, disk, "GB"))
    label = body.get("label")
    if isinstance(label, str) and len(label) > MAX_LABEL_CHARS:
        found.append(_at_most("label", len(label), MAX_LABEL_CHARS, "characters"))
    env = body.get("env")
    if isinstance(env, Mapping):
        found.extend(env_breaches({str(k): str(v) for k, v in env.items()}))
    onstart = body.get("onstart")
    onstart_chars = len(onstart) if isinstance(onstart, str) else 0
    if onstart_chars > MAX_ONSTART_CHARS:
        found.append(_at_most("onstart", onstart_chars, MAX_ONSTART_CHARS, "characters"))
    args = body.get("args")
    args_str = body.get("args_str")
    command_chars = (
        onstart_chars
        + (len(" ".join(str(a) for a in args)) if isinstance(args, list) else 0)
        + (len(args_str) if isinstance(args_str, str) else 0)
    )
    if command_chars > MAX_COMMAND_CHARS:
        found.append(_at_most(COMMAND_FIELD, command_chars, MAX_COMMAND_CHARS, "characters"))
    price = _number_in(body.get("price"))
    if price is not None and not MIN_PRICE_USD_PER_HOUR <= price <= MAX_PRICE_USD_PER_HOUR:
        if price > MAX_PRICE_USD_PER_HOUR:
            found.append(_at_most("price", price, MAX_PRICE_USD_PER_HOUR, "$/h"))
        else:  # below, or NaN
            found.append(LimitBreach("price", "at least", MIN_PRICE_USD_PER_HOUR, price, "$/h"))
    return found


def _at_most(field: str, actual: float, limit: float, unit: str) -> LimitBreach:
    return LimitBreach(field, "at most", limit, actual, unit)


def _number_in(value: Any) -> float | None:
    """The value when it is a number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"  # nan, inf: as is
