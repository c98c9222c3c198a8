"""How every benchmark reports: `name: value` lines on stdout and `bench/results/<name>.json`."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"


@dataclass(frozen=True)
class Quartiles:
    n: int
    q1: float
    median: float
    q3: float
    mean: float
    min: float
    max: float

    def describe(self, digits: int = 1) -> str:
        f = f"{{:.{digits}f}}"
        return (
            f"median {f.format(self.median)} (q1 {f.format(self.q1)}, "
            f"q3 {f.format(self.q3)}; mean {f.format(self.mean)}; n={self.n})"
        )


def quartiles(values: list[float]) -> Quartiles:
    """Median and quartiles (inclusive method: q1/q3 lie within the data); needs one value."""
    if not values:
        raise ValueError("no values to summarise")
    if len(values) == 1:
        q1 = median = q3 = values[0]
    else:
        q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return Quartiles(
        n=len(values),
        q1=q1,
        median=median,
        q3=q3,
        mean=statistics.fmean(values),
        min=min(values),
        max=max(values),
    )


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    mem_gib = None
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024**2, 1)
    return {
        "nproc": os.cpu_count(),
        "mem_gib": mem_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def write_results(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "machine": machine(), **data}
    path.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    return path


def show(data: dict[str, Any], *, as_json: bool, printer: Callable[[dict[str, Any]], None]) -> None:
    """A bench's results on stdout: as JSON (`--json`, for scripts) or through its printer."""
    if as_json:
        json.dump(data, sys.stdout, indent=2, default=_jsonable)
        sys.stdout.write("\n")
    else:
        printer(data)


def _jsonable(value: object) -> object:
    if isinstance(value, Quartiles):
        return asdict(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
