"""Seeded, realistic Vast offer records ("bundles"), as `POST /api/v0/bundles/` returns them.

The distributions follow real Vast search records (2024–2026 snapshots, kept outside the
repository):
- client prices are the host's listed prices × 4/3, which is where float noise such as
  0.26666666666666666 comes from;
- `inet_*_cost` is $/GB (= `internet_*_cost_per_tb` / 1024), from 0 to about $0.05/GB, most
  hosts near $0.0026 down / $0.0039 up, a long expensive tail;
- `inet_down`/`inet_up` are Mbit/s, from slow home links (tens of Mbit/s) to 10+ Gbit/s;
- `storage_total_cost` = `storage_cost` × allocated GB / 720, `dph_total` = `dph_base` + that.

`python -m tether_local.vast_sim --count 400 --seed 7` prints `{"offers": [...]}`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from dataclasses import dataclass
from typing import Any

CLIENT_MARKUP = 4 / 3  # Vast shows renters the host's listed price × 4/3
HOURS_PER_MONTH = 720  # Vast's storage_cost is $/GB/month over 720 h
DEFAULT_ALLOCATED_GB = 8.0  # the disk size Vast prices offers for when a search names none


@dataclass(frozen=True)
class GpuModel:
    name: str  # exact Vast spelling
    ram_mb: int
    host_usd_per_gpu_hour: tuple[float, float]  # host's listed price range, before markup
    compute_cap: int
    dlperf_per_gpu: float
    tflops_per_gpu: float
    mem_bw_gb_s: float
    max_power_w: float
    weight: float  # how common the model is on the market


GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel("RTX 3060", 12288, (0.04, 0.09), 860, 12.3, 13.0, 360.0, 170, 3),
    GpuModel("RTX 3080", 10240, (0.06, 0.14), 860, 25.1, 30.0, 760.0, 320, 3),
    GpuModel("RTX 3090", 24576, (0.09, 0.26), 860, 28.4, 36.0, 936.0, 350, 14),
    GpuModel("RTX 4090", 24564, (0.20, 0.65), 890, 97.5, 82.6, 1008.0, 450, 22),
    GpuModel("RTX 5090", 32607, (0.30, 0.70), 1200, 199.0, 104.8, 1792.0, 575, 12),
    GpuModel("RTX A5000", 24564, (0.10, 0.25), 860, 30.2, 27.8, 768.0, 230, 5),
    GpuModel("RTX A6000", 46068, (0.25, 0.50), 860, 51.2, 38.7, 768.0, 300, 6),
    GpuModel("L4", 23034, (0.12, 0.30), 890, 30.0, 30.3, 300.0, 72, 3),
    GpuModel("L40S", 46068, (0.35, 0.75), 890, 93.5, 91.6, 864.0, 350, 5),
    GpuModel("A100 PCIE", 40960, (0.40, 0.90), 800, 95.0, 77.9, 1555.0, 250, 4),
    GpuModel("A100 SXM4", 81920, (0.50, 1.10), 800, 127.0, 77.9, 2039.0, 400, 5),
    GpuModel("H100 PCIE", 81559, (1.10, 2.00), 900, 250.0, 204.9, 2039.0, 350, 3),
    GpuModel("H100 SXM", 81559, (1.30, 2.60), 900, 321.0, 267.6, 3352.0, 700, 6),
    GpuModel("H200", 143771, (2.00, 3.60), 900, 343.0, 267.6, 4800.0, 700, 2),
    GpuModel("Tesla V100", 32768, (0.02, 0.20), 700, 25.7, 15.7, 897.0, 300, 3),
    GpuModel("RTX PRO 6000 WS", 97887, (0.60, 1.20), 1200, 283.0, 126.0, 1792.0, 600, 2),
)

# (GPUs per offer, weight): most asks are single GPUs, whole 8-GPU boxes are rarer.
_GPU_COUNTS = ((1, 55), (2, 18), (4, 15), (8, 10), (3, 1), (6, 1))

# Host-listed bandwidth prices in $/TB before markup; 2 down / 3 up is the marketplace default.
_DOWN_PER_TB = ((0.0, 4), (1.0, 10), (2.0, 45), (3.0, 8), (5.0, 8), (7.5, 7), (10.0, 8),
                (20.0, 5), (29.3, 4), (40.0, 1))  # fmt: skip
_UP_PER_TB = ((0.0, 4), (1.0, 10), (3.0, 50), (5.0, 10), (7.5, 8), (10.0, 8), (20.0, 6),
              (29.3, 3), (40.0, 1))  # fmt: skip
_STORAGE_HOST = ((0.05, 8), (0.1, 20), (0.15, 40), (0.2, 12), (0.25, 8), (0.3, 6), (0.5, 4),
                 (0.75, 2))  # fmt: skip
_GEO = (
    "Texas, US", "California, US", "Washington, US", "Oregon, US", "Utah, US", "Florida, US",
    "Kansas, US", "Delaware, US", "Quebec, CA", "Alberta, CA", "British Columbia, CA",
    "Ontario, CA", "Sweden, SE", "Norway, NO", "Germany, DE", "Czechia, CZ", "Poland, PL",
    "Hungary, HU", "Belgium, BE", "The Netherlands, NL", "United Kingdom, GB", "Taiwan, TW",
    "Japan, JP", "South Korea, KR", "Hebei, CN", "Saudi Arabia, SA", "United States, US",
    ", CA", "Norway",
)  # fmt: skip
_CPUS = (
    ("AMD EPYC 7302P 16-Core Processor", 32), ("AMD EPYC 7702 64-Core Processor", 256),
    ("AMD EPYC 9354 32-Core Processor", 128), ("Xeon® Gold 6148 ", 80),
    ("Xeon® E5-2698 v4 ", 80), ("AMD Ryzen 9 7950X 16-Core Processor", 32),
    ("Core™ i9-13900K", 32), ("AMD Ryzen Threadripper PRO 5975WX 32-Cores", 64),
)  # fmt: skip
_DISKS = (
    "Samsung SSD 990 PRO 2TB", "MTFDDAK960TDT", "Corsair MP600 PRO LPX",
    "SAMSUNG MZQL23T8HCLS-00A07", "WD_BLACK SN850X 4000GB", "KINGSTON SNV2S2000G",
)  # fmt: skip
_MOBOS = ("ROME2D32GM-2T", "H12SSL-i", "ProArt X670E-CREATOR WIFI", "X11DPG-OT-CPU",
          "TRX40 AORUS MASTER", "MZ32-AR0-00")  # fmt: skip
_DRIVERS = (("535.309.01", 12.2), ("550.127.05", 12.4), ("570.153.02", 12.8),
            ("575.64.03", 12.9), ("580.159.03", 13.0), ("590.48.01", 13.1))  # fmt: skip


# One-GPU dlperf ÷ its model's median in the real records (the 27 one-GPU offers of models
# seen at least twice): most hosts score their model's figure, a quarter score 10–30 % lower
# (power limits, PCIe links, old drivers), a few up to 23 % higher.
_DLPERF_SPREAD = (
    0.71, 0.71, 0.77, 0.87, 0.90, 0.93, 0.96, 0.99, 0.99, 1.0, 1.0, 1.0, 1.0, 1.0,
    1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.04, 1.07, 1.09, 1.23,
)  # fmt: skip
# Each GPU past the first adds about half a GPU to a machine's dlperf (real records: four
# RTX 4090s score 2.3 times one, eight 4.6 times).
_DLPERF_PER_EXTRA_GPU = 0.5


def _dlperf_spread(u: float) -> float:
    """The spread's quantile at `u` in [0, 1), interpolated (one uniform draw per offer)."""
    position = u * (len(_DLPERF_SPREAD) - 1)
    low = int(position)
    high = min(low + 1, len(_DLPERF_SPREAD) - 1)
    return _DLPERF_SPREAD[low] + (position - low) * (_DLPERF_SPREAD[high] - _DLPERF_SPREAD[low])


def _gpus_worth(num_gpus: int) -> float:
    return 1 + (num_gpus - 1) * _DLPERF_PER_EXTRA_GPU


def _weighted(rng: random.Random, table: tuple[tuple[Any, int | float], ...]) -> Any:
    values, weights = zip(*table, strict=True)
    return rng.choices(values, weights=weights, k=1)[0]


def _client(host_price: float) -> float:
    return host_price * CLIENT_MARKUP


def price_for_storage(offer: dict[str, Any], allocated_gb: float) -> dict[str, Any]:
    """A copy of `offer` priced for `allocated_gb` of disk, as a search with that
    `allocated_storage` would return it (storage_total_cost, dph_total and the summaries).
    A record without a numeric `dph_base` is returned as it is: priced from storage alone it
    would look nearly free."""
    priced = dict(offer)
    base = offer.get("dph_base")
    storage_cost = offer.get("storage_cost") or 0.0
    if not isinstance(base, int | float) or not isinstance(storage_cost, int | float):
        return priced
    storage_hour = float(storage_cost) * allocated_gb / HOURS_PER_MONTH
    total = base + storage_hour
    priced["storage_total_cost"] = storage_hour
    priced["dph_total"] = total
    priced["discounted_dph_total"] = total
    priced["dph_total_adj"] = total * 1.18  # Vast's reliability-adjusted price
    dlperf = offer.get("dlperf")
    if isinstance(dlperf, int | float) and total > 0:
        priced["dlperf_per_dphtotal"] = dlperf / total
    flops = offer.get("total_flops")
    if isinstance(flops, int | float) and total > 0:
        priced["flops_per_dphtotal"] = flops / total
    priced["search"] = {
        "gpuCostPerHour": base,
        "diskHour": storage_hour,
        "slaPremiumPerHour": 0.0,
        "totalHour": total,
        "discountTotalHour": 0,
        "discountedTotalPerHour": total,
    }
    priced["instance"] = {
        "gpuCostPerHour": 0,
        "diskHour": storage_hour,
        "slaPremiumPerHour": 0,
        "totalHour": storage_hour,
        "discountTotalHour": 0,
        "discountedTotalPerHour": storage_hour,
    }
    return priced


def _one_offer(
    rng: random.Random, offer_id: int, now: float, allocated_gb: float
) -> dict[str, Any]:
    gpu: GpuModel = rng.choices(GPU_MODELS, weights=[g.weight for g in GPU_MODELS], k=1)[0]
    num_gpus: int = _weighted(rng, _GPU_COUNTS)
    low, high = gpu.host_usd_per_gpu_hour
    # Hosts list round prices (cents, sometimes tenths of a cent); the markup adds the noise.
    host_per_gpu = round(rng.uniform(low, high), rng.choice((2, 2, 3)))
    dph_base = _client(host_per_gpu * num_gpus)
    storage_cost = _client(_weighted(rng, _STORAGE_HOST))
    down_per_tb = _client(_weighted(rng, _DOWN_PER_TB))
    up_per_tb = _client(_weighted(rng, _UP_PER_TB))

    link = rng.random()
    if link < 0.15:  # home links and congested hosts
        inet_down = rng.uniform(20, 150)
    elif link < 0.65:
        inet_down = rng.uniform(150, 1000)
    else:
        inet_down = rng.uniform(1000, 12000)
    inet_up = inet_down * rng.uniform(0.1, 1.1)
    if rng.random() < 0.05:
        inet_up = rng.uniform(10, 60)  # asymmetric residential uplink

    reliability = rng.uniform(0.85, 0.95) if rng.random() < 0.12 else 1 - rng.betavariate(1.2, 60)
    reliability = round(min(reliability, 0.9999), 7)
    verification = _weighted(rng, (("verified", 60), ("unverified", 20), ("deverified", 20)))
    cpu_name, cpu_cores = rng.choice(_CPUS)
    gpus_in_machine = max(num_gpus, rng.choice((1, 2, 4, 8, 8)))
    gpu_frac = num_gpus / gpus_in_machine
    driver_version, cuda_max = rng.choice(_DRIVERS)
    major, minor, patch = (int(p) for p in driver_version.split("."))
    machine_id = rng.randint(1_000, 60_000)
    disk_space = round(max(rng.uniform(20, 3500) * gpu_frac, 10.0), rng.choice((1, 2, 6)))
    duration = rng.uniform(3 * 3600, 180 * 86400)  # how long the host offers the machine
    start_date: float | None = now - rng.uniform(60, 30 * 86400) if rng.random() < 0.8 else None
    dlperf = gpu.dlperf_per_gpu * _gpus_worth(num_gpus) * _dlperf_spread(rng.random())
    total_flops = gpu.tflops_per_gpu * num_gpus * rng.uniform(0.95, 1.02)
    public_ip = ".".join(str(rng.randint(1, 254)) for _ in range(4))

    offer: dict[str, Any] = {
        "id": offer_id,
        "ask_contract_id": offer_id,
        "bundle_id": rng.randint(100_000_000, 2_000_000_000),
        "bundled_results": None,
        "bw_nvlink": round(rng.uniform(50, 400), 3) if num_gpus > 1 and rng.random() < 0.3 else 0.0,
        "compute_cap": gpu.compute_cap,
        "cpu_arch": "amd64",
        "cpu_cores": cpu_cores,
        "cpu_cores_effective": cpu_cores * gpu_frac,
        "cpu_ghz": round(rng.uniform(2.0, 5.2), 6),
        "cpu_name": cpu_name,
        "cpu_ram": int(rng.choice((32, 64, 128, 256, 512)) * 1007 * gpu_frac) + rng.randint(0, 60),
        "credit_discount_max": 0.0,
        "cuda_max_good": cuda_max,
        "direct_port_count": rng.randint(0, 400),
        "disk_bw": rng.uniform(300, 7000),
        "disk_name": rng.choice(_DISKS),
        "disk_space": disk_space,
        "dlperf": dlperf,
        "dlperf_per_dphtotal": 0.0,
        "dph_base": dph_base,
        "dph_total": dph_base,
        "driver_version": driver_version,
        # Real records sometimes lack the numeric driver version (e.g. the B300 hosts).
        "driver_vers": None if rng.random() < 0.04 else major * 1_000_000 + minor * 1000 + patch,
        "duration": duration,
        "end_date": float(int(now + duration)),
        "external": None,
        "flops_per_dphtotal": 0.0,
        "geolocation": rng.choice(_GEO),
        "geolocode": rng.randint(10_000_000, 999_999_999),
        "gpu_arch": "nvidia",
        "gpu_display_active": False,
        "gpu_frac": gpu_frac,
        "gpu_ids": [rng.randint(10_000, 400_000) for _ in range(num_gpus)],
        "gpu_lanes": rng.choice((4, 8, 16, 16)),
        "gpu_mem_bw": gpu.mem_bw_gb_s * rng.uniform(0.8, 1.0),
        "gpu_name": gpu.name,
        "gpu_ram": gpu.ram_mb,
        "gpu_total_ram": gpu.ram_mb * num_gpus,
        "gpu_max_power": gpu.max_power_w,
        "gpu_max_temp": float(rng.choice((83, 87, 90, 92))),
        "has_avx": 1,
        "host_id": rng.randint(1_000, 400_000),
        "hosting_type": 0,
        "hostname": None,
        "inet_down": round(inet_down, 1),
        "inet_down_cost": down_per_tb / 1024,
        "inet_up": round(inet_up, 1),
        "inet_up_cost": up_per_tb / 1024,
        "is_bid": False,
        "logo": "/static/logos/vastai_small2.png",
        "machine_id": machine_id,
        "min_bid": round(dph_base * rng.uniform(0.4, 1.0), 8),
        "mobo_name": rng.choice(_MOBOS),
        "num_gpus": num_gpus,
        "os_version": rng.choice(("22.04", "24.04")),
        "pci_gen": float(rng.choice((3, 4, 4, 5))),
        "pcie_bw": round(rng.uniform(3, 50), 1),
        "public_ipaddr": public_ip,
        "reliability": reliability,
        "reliability_mult": round(reliability**8, 7),
        "rentable": True,
        "rented": False,
        "score": rng.uniform(50, 800),
        "start_date": start_date,
        "static_ip": rng.random() < 0.7,
        "storage_cost": storage_cost,
        "storage_total_cost": 0.0,
        "total_flops": total_flops,
        "verification": verification,
        "vericode": {"verified": 1, "deverified": 2, "unverified": 0}[verification],
        "vram_costperhour": dph_base / (gpu.ram_mb * num_gpus / 1024),
        "webpage": None,
        "vms_enabled": False,
        "expected_reliability": 0.0,
        "sla_sigma_x": None,
        "sla_broker_rate": None,
        "is_vm_deverified": rng.random() < 0.3,
        "resource_type": "gpu",
        "cluster_id": None,
        "avail_vol_ask_id": offer_id + rng.randint(1, 40),
        "avail_vol_dph": storage_cost / HOURS_PER_MONTH,
        "avail_vol_size": float(rng.randint(100, 4000)),
        "nw_disk_min_bw": None,
        "nw_disk_max_bw": None,
        "nw_disk_avg_bw": None,
        "rn": 1,
        "reliability2": reliability,
        "target_reliability": 0.0,
        "sla_r_claim": 0.0,
        "discount_rate": None,
        "discounted_hourly": 0,
        "time_remaining": "",
        "time_remaining_isbid": "",
        "internet_up_cost_per_tb": up_per_tb,
        "internet_down_cost_per_tb": down_per_tb,
    }
    return price_for_storage(offer, allocated_gb)


def generate_offers(
    count: int,
    seed: int,
    *,
    allocated_gb: float = DEFAULT_ALLOCATED_GB,
    now: float = 1_790_000_000.0,
) -> list[dict[str, Any]]:
    """`count` raw offer records; the same arguments always give the same records, and a
    longer book starts with the records of a shorter one with the same seed.

    `now` is the epoch the dates are relative to (fixed by default so output is reproducible).
    """
    if count < 0:
        raise ValueError("count must be ≥ 0")
    if allocated_gb < 0:
        raise ValueError("allocated_gb must be ≥ 0")
    rng = random.Random(seed)
    offers: list[dict[str, Any]] = []
    seen: set[int] = set()
    while len(offers) < count:  # one record at a time, so a longer book extends a shorter one
        offer_id = rng.randint(10_000_000, 59_999_999)
        if offer_id not in seen:
            seen.add(offer_id)
            offers.append(_one_offer(rng, offer_id, now, allocated_gb))
    return offers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tether_local.vast_sim",
        description='Print a seeded, realistic Vast offer book as {"offers": [...]} JSON.',
    )
    parser.add_argument("--count", type=int, default=200, help="number of offers (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--disk",
        type=float,
        default=DEFAULT_ALLOCATED_GB,
        help="GB the prices include storage for (Vast's allocated_storage, default 8)",
    )
    args = parser.parse_args(argv)
    if args.count < 0:
        parser.error("--count must be ≥ 0")
    if args.disk < 0:
        parser.error("--disk must be ≥ 0")
    offers = generate_offers(args.count, args.seed, allocated_gb=args.disk)
    try:
        json.dump({"offers": offers}, sys.stdout)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `… | head`: the reader left; not an error worth a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
