"""Instances as the simulator keeps and shows them: the record of one rented instance, the
checks a rent request passes, the record Vast renders for it, and the paged instance list."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from tether_local.vast_sim.billing import Ledger
from tether_local.vast_sim.search import matches
from tether_local.vast_sim.wire import Reply, decode_token, encode_token, error, json_response

InstanceStatus = Literal["created", "loading", "running", "stopped", "exited", "offline"]
PAGE_LIMIT = 25  # /api/v1/instances/ returns at most 25 per page
# The create-instance bounds of Vast's OpenAPI spec, `PUT /asks/{id}/` x-input-validation. Written
# here on their own, not imported from tether: the simulator is a second reading of the spec.
MIN_DISK_GB = 8
MAX_LABEL_CHARS = 256
MAX_IMAGE_CHARS = 1024
MAX_ENV_VALUE_CHARS = 256
MAX_ENV_CHARS = 32_000  # "32 KB", counted on the env as Docker flags: `-e K=V -e K2=V2`
MAX_ONSTART_CHARS = 4048
MAX_ONSTART_AND_ARGS_CHARS = 4096  # args (its items joined by spaces) + args_str + onstart
MIN_PRICE = 0.001  # $/h, a bid
MAX_PRICE = 128.0
PULLING = "Pulling image"
RUNNING_MSG = "success, running"
# Offer fields a real instance record repeats from the machine it runs on.
_MACHINE_FIELDS = (
    "machine_id", "host_id", "gpu_name", "num_gpus", "gpu_ram", "gpu_frac",
    "gpu_arch", "gpu_lanes", "gpu_mem_bw", "compute_cap", "cpu_name", "cpu_cores",
    "cpu_cores_effective", "cpu_ram", "cpu_arch", "cuda_max_good", "driver_version",
    "disk_bw", "disk_name", "dlperf", "dlperf_per_dphtotal", "flops_per_dphtotal", "total_flops",
    "geolocation", "has_avx", "inet_down", "inet_up", "inet_down_cost", "inet_up_cost",
    "internet_down_cost_per_tb", "internet_up_cost_per_tb", "mobo_name", "pci_gen", "pcie_bw",
    "public_ipaddr", "reliability2", "storage_cost", "min_bid", "direct_port_count", "logo",
    "rentable", "verification", "bw_nvlink", "webpage", "external", "hosting_type", "os_version",
)  # fmt: skip


@dataclass
class SimInstance:
    """One rented instance. Hooks receive it; treat it as read-only."""

    id: int
    offer: dict[str, Any]
    image: str
    disk_gb: float
    label: str | None
    env: dict[str, str]
    onstart: str  # the script: `onstart`, or the command of `args: [bash, -c, script]`
    runtype: str
    args: list[str]
    api_key: str
    created_at: float
    intended_status: Literal["running", "stopped"] = "running"
    boot_started_at: float = 0.0  # when the current start began
    boot_s: float = 0.0  # how long this start takes to reach running
    restarted: bool = False  # a restart skips the first ("created") phase
    killed: Literal["exited", "offline"] | None = None
    holds_machine: bool = True  # False while stopped: its GPUs are back on the market
    gpu_util: float | None = None
    disk_usage: float | None = None
    status_msg: str | None = None
    pull_error: str | None = None  # the image cannot be pulled: stays loading (see fail_pull)
    bid: float | None = None  # interruptible: the rent's `price` ($/h), billed while it runs
    outbid: bool = False  # stopped by a higher bid; intended_status stays running (outbid())

    def container_env(self) -> dict[str, str]:
        """The environment Vast gives the container: the rent's env plus Vast's own."""
        return {
            **self.env,
            "CONTAINER_ID": str(self.id),
            "CONTAINER_API_KEY": self.api_key,
            "VAST_CONTAINERLABEL": f"C.{self.id}",
            "GPU_COUNT": str(self.offer.get("num_gpus", 1)),
            "PUBLIC_IPADDR": str(self.offer.get("public_ipaddr", "127.0.0.1")),
        }


Hook = Callable[[SimInstance], None]


@dataclass(frozen=True)
class RentRequest:
    """A rent's body once checked."""

    image: str
    disk: float
    label: str | None
    env: dict[str, str]
    onstart: str
    args: list[Any]
    runtype: str
    price: float | None = None  # a bid: rent an interruptible instance

    @property
    def script(self) -> str:
        """The script: `onstart`, or the command of `args: [bash, -c, script]`."""
        if not self.onstart and len(self.args) >= 3 and self.args[:2] == ["bash", "-c"]:
            return str(self.args[2])
        return self.onstart


def parse_rent(body: dict[str, Any]) -> RentRequest:
    """`PUT /api/v0/asks/{id}/`'s body, checked as Vast checks it: 400 `invalid_args` whose
    message starts with the field (`env.NAME: …`, `label: …`), as the OpenAPI's bounds say."""
    image = body.get("image")
    if not isinstance(image, str) or not image.strip():
        raise _refused("image", "error 400/3467: Invalid args: 'image' is required")
    if len(image) > MAX_IMAGE_CHARS:
        raise _refused("image", f"{len(image)} characters; at most {MAX_IMAGE_CHARS}")
    disk = body.get("disk", 10)
    if isinstance(disk, bool) or not isinstance(disk, int | float) or disk < MIN_DISK_GB:
        raise _refused("disk", f"{disk!r}; must be a number ≥ {MIN_DISK_GB} (GB)")
    label = body.get("label")
    if label is not None and not isinstance(label, str):
        raise _refused("label", "must be a string")
    if label is not None and len(label) > MAX_LABEL_CHARS:
        raise _refused("label", f"{len(label)} characters; at most {MAX_LABEL_CHARS}")
    env = _checked_env(body.get("env") or {})
    onstart = body.get("onstart") or ""
    args = body.get("args") or []
    args_str = body.get("args_str") or ""
    if not isinstance(onstart, str) or not isinstance(args, list) or not isinstance(args_str, str):
        raise _refused("onstart", "onstart and args_str must be strings and args a list")
    if len(onstart) > MAX_ONSTART_CHARS:
        raise _refused("onstart", f"{len(onstart)} characters; at most {MAX_ONSTART_CHARS}")
    command = len(onstart) + len(" ".join(str(a) for a in args)) + len(args_str)
    if command > MAX_ONSTART_AND_ARGS_CHARS:
        raise _refused(
            "args+args_str+onstart", f"together {command} characters; at most "
            f"{MAX_ONSTART_AND_ARGS_CHARS}",
        )  # fmt: skip
    runtype = body.get("runtype", "ssh")
    if not isinstance(runtype, str):
        raise _refused("runtype", "must be a string")
    price = body.get("price")
    if price is not None and (
        isinstance(price, bool)
        or not isinstance(price, int | float)
        or not MIN_PRICE <= price <= MAX_PRICE
    ):
        raise _refused("price", f"{price!r}; a bid from {MIN_PRICE} to {MAX_PRICE:g} $/h")
    return RentRequest(image, disk, label, env, onstart, args, runtype, price)


def _checked_env(env: Any) -> dict[str, str]:
    """The env as an object of strings (what the official client sends), each value and the
    whole (written as `-e K=V` flags) within Vast's bounds."""
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise _refused("env", "must be an object of strings")
    for name, value in env.items():
        if len(value) > MAX_ENV_VALUE_CHARS:
            raise _refused(
                f"env.{name}", f"{len(value)} characters; a value may have at most "
                f"{MAX_ENV_VALUE_CHARS}",
            )  # fmt: skip
    flags = sum(len(f"-e {k}={v}") for k, v in env.items()) + max(0, len(env) - 1)
    if flags > MAX_ENV_CHARS:
        raise _refused("env", f"{flags} characters as -e K=V flags; at most {MAX_ENV_CHARS}")
    return env


def _refused(field: str, why: str) -> Reply:
    return error(400, "invalid_args", f"{field}: {why}")


def check_bid(
    offer: dict[str, Any], price: float | None, offer_id: int, *, outbid: bool = False
) -> None:
    """A bid below the machine's current `min_bid` is refused (400 `invalid_price`; the error
    token is Vast's, the message ours: no real one was recorded). `outbid`: the `min_bid` rose
    past the bid since the search (the `bid_too_low` fault)."""
    floor = offer.get("min_bid")
    if price is None:
        return
    if outbid:
        floor = max(price * 1.1, float(floor) if isinstance(floor, int | float) else 0.0)
    if not isinstance(floor, int | float) or price >= floor:
        return
    raise error(
        400, "invalid_price",
        f"error 400: invalid_price: bid ${price:.4f}/h is below the minimum bid "
        f"${float(floor):.4f}/h for ask {offer_id}",
        ask_id=offer_id,
    )  # fmt: skip


def render(instance: SimInstance, ledger: Ledger, status: str | None, now: float) -> dict[str, Any]:
    """The instance record as `GET /api/v0/instances/{id}/` shows it."""
    offer = instance.offer
    record = {name: offer[name] for name in _MACHINE_FIELDS if name in offer}
    record["gpu_totalram"] = offer.get("gpu_total_ram")
    end_date = offer.get("end_date")
    dph_base = ledger.gpu_usd_per_hour
    disk_hour = ledger.storage_usd_per_hour
    running = status == "running"
    record.update(
        {
            "id": instance.id,
            "bundle_id": offer.get("bundle_id"),
            "actual_status": status,
            "intended_status": instance.intended_status,
            "cur_state": instance.intended_status,
            "next_state": instance.intended_status,
            "status_msg": RUNNING_MSG
            if running and instance.status_msg == PULLING
            else instance.status_msg,
            "label": instance.label,
            "start_date": instance.created_at,
            "end_date": end_date,
            "duration": (end_date - now) if isinstance(end_date, int | float) else None,
            "dph_base": dph_base,
            "dph_total": dph_base + disk_hour,
            "storage_total_cost": disk_hour,
            "disk_space": instance.disk_gb,
            "disk_usage": instance.disk_usage,
            "gpu_util": instance.gpu_util if running else None,
            "gpu_temp": None,
            "image_uuid": instance.image,
            "image_runtype": instance.runtype,
            "image_args": list(instance.args),
            "onstart": instance.onstart,
            "extra_env": [[k, v] for k, v in instance.env.items()],
            "is_bid": instance.bid is not None,
            "inet_down_billed": ledger.bytes_down / 1024**2,  # MB, as Vast shows it
            "inet_up_billed": ledger.bytes_up / 1024**2,
            "ssh_host": f"ssh{instance.id % 9 + 1}.vast.ai",
            "ssh_port": 10_000 + instance.id % 50_000,
            "ssh_idx": str(instance.id % 9 + 1),
            "direct_port_start": -1,
            "direct_port_end": -1,
            "instance": {
                "gpuCostPerHour": dph_base,
                "diskHour": disk_hour,
                "totalHour": dph_base + disk_hour,
                "discountTotalHour": 0,
                "discountedTotalPerHour": 0,
            },
        }
    )
    if status in (None, "created"):
        # Right after the rent Vast has assigned no SSH endpoint yet (the recorded just-created
        # records carry none).
        record.update({"ssh_host": None, "ssh_port": None, "ssh_idx": None})
        return record
    direct = _direct_ssh(instance)
    if direct is not None:
        record.update(direct)
    return record


def _direct_ssh(instance: SimInstance) -> dict[str, Any] | None:
    """A direct SSH launch mode (`ssh_direc`) on a machine with open ports maps the container's
    port 22 to one of the machine's: `ports["22/tcp"][0]["HostPort"]` on `public_ipaddr`, the
    shape `vastai ssh-url` reads (the recorded records are all proxy-only: `direct_port_start`
    -1 and no `ports`, as rendered otherwise)."""
    offer = instance.offer
    if "ssh_direc" not in instance.runtype or not int(offer.get("direct_port_count") or 0):
        return None
    if not offer.get("public_ipaddr"):
        return None
    start = 20_000 + instance.id % 40_000
    count = int(offer["direct_port_count"])
    return {
        "direct_port_start": start,
        "direct_port_end": start + count - 1,
        "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(start)}]},  # noqa: S104 (data)
    }


def list_page(
    records: list[dict[str, Any]],
    params: httpx.QueryParams,
    present: Callable[[dict[str, Any]], dict[str, Any]] = dict,
) -> httpx.Response:
    """`GET /api/v1/instances/`: `records` filtered, a page of at most `PAGE_LIMIT` after the
    token's id, each record as `present` shows it (filters and pages use the true record)."""
    try:
        limit = int(params.get("limit", str(PAGE_LIMIT)))
    except ValueError:
        raise error(400, "invalid_args", "limit must be an integer") from None
    limit = max(1, min(limit, PAGE_LIMIT))
    filters: dict[str, Any] = {}
    raw_filters = params.get("select_filters")
    if raw_filters:
        try:
            filters = json.loads(raw_filters)
        except json.JSONDecodeError:
            raise error(400, "invalid_args", "select_filters is not valid JSON") from None
        if not isinstance(filters, dict):
            raise error(400, "invalid_args", "select_filters must be a JSON object")
    token = params.get("after_token")
    after = decode_token(token) if token else 0
    matching = [r for r in records if matches(r, filters)]
    page = [r for r in matching if r["id"] > after][:limit]
    more = bool(page) and any(r["id"] > page[-1]["id"] for r in matching)
    return json_response(
        200,
        {
            "success": True,
            "instances": [present(r) for r in page],
            "next_token": encode_token(page[-1]["id"]) if more else None,
            "total_instances": len(matching),
        },
    )


__all__ = [
    "MAX_LABEL_CHARS",
    "MIN_DISK_GB",
    "PAGE_LIMIT",
    "PULLING",
    "RUNNING_MSG",
    "Hook",
    "InstanceStatus",
    "RentRequest",
    "SimInstance",
    "check_bid",
    "list_page",
    "parse_rent",
    "render",
]
