"""Paired, interleaved A/B measurements: the order of each pair and the summary of the ratios.

On a shared machine the load drifts over minutes; timing A then B back to back, with the order
alternated pair by pair, puts the drift into both sides of each ratio about equally, so the
median of the pair ratios says more than any one run or than two separate series.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.lib.report import Quartiles, quartiles


def pair_order(index: int) -> tuple[str, str]:
    """Which side runs first in pair `index`: A first in even pairs, B first in odd ones."""
    return ("a", "b") if index % 2 == 0 else ("b", "a")


def interleave(
    pairs: int, run_a: Callable[[], float], run_b: Callable[[], float]
) -> list[tuple[float, float]]:
    """`pairs` (a, b) results, each pair run back to back in `pair_order`."""
    if pairs < 1:
        raise ValueError("at least one pair")
    out: list[tuple[float, float]] = []
    for i in range(pairs):
        got: dict[str, float] = {}
        for side in pair_order(i):
            got[side] = run_a() if side == "a" else run_b()
        out.append((got["a"], got["b"]))
    return out


@dataclass(frozen=True)
class RatioSummary:
    """The pair ratios a/b (throughput over throughput) and their spread."""

    ratios: tuple[float, ...]
    stats: Quartiles

    @property
    def median(self) -> float:
        return self.stats.median

    def meets(self, goal: float) -> bool:
        return self.stats.median >= goal

    def describe(self) -> str:
        s = self.stats
        return (
            f"median {s.median:.2f} (IQR {s.q1:.2f}–{s.q3:.2f}, min–max {s.min:.2f}–{s.max:.2f}, "
            f"{s.n} pairs)"
        )


def ratio_summary(pairs: list[tuple[float, float]]) -> RatioSummary:
    """Ratios of throughputs a/b per pair; a pair with b == 0 is a broken measurement."""
    if any(b <= 0 or a < 0 for a, b in pairs):
        raise ValueError("throughputs must be positive")
    ratios = tuple(a / b for a, b in pairs)
    return RatioSummary(ratios, quartiles(list(ratios)))
