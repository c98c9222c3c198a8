"""Reference speeds of GPU models: what `reference_gpu` in a job spec may name.

A job may state its `expected_hours` on a named GPU ("6 hours on one RTX 4090"); the planner then
scales those hours to each offer by speed (`functions.domain.speed`). This table says how fast
one GPU of each model is, in the two figures Vast publishes per offer:

- `dlperf`: Vast's deep-learning benchmark score. On a multi-GPU offer it is the whole machine's
  score, and it grows less than linearly with the count (real records: one RTX 4090 ≈ 98,
  four ≈ 230, eight ≈ 450).
- `total_flops`: peak TFLOPS, the sum over the offer's GPUs (exactly linear in the count).

Each row is derived from real Vast offer records (search snapshots up to 2026-09, kept outside
the repository): the median `dlperf` of the model's one-GPU offers (or, for a model seen only on
multi-GPU offers, the median of `dlperf` ÷ `num_gpus`), and the median `total_flops` ÷
`num_gpus`. A fixed table, not the offers of the moment, so that a spec validates the same way
in `tether validate`, at `POST /jobs` and in every later plan, and a reference does not drift
with whatever hosts happen to be listed. A model missing here is refused in `reference_gpu`
(400 / exit 2); add a row from real records to accept it.
"""

from __future__ import annotations

from typing import NamedTuple


class ReferenceSpeed(NamedTuple):
    dlperf: float  # Vast's dlperf of one GPU of this model
    tflops: float  # peak TFLOPS of one GPU (total_flops ÷ num_gpus)


# gpu_name as Vast spells it → one GPU's speed. Comments: one-GPU records / all records.
REFERENCE_SPEEDS: dict[str, ReferenceSpeed] = {
    "A100 PCIE": ReferenceSpeed(122.9, 15.6),  # 2 / 2
    "A100 SXM4": ReferenceSpeed(95.3, 15.6),  # 5 / 5
    "B300": ReferenceSpeed(816.5, 66.6),  # 1 / 2
    "H100 SXM": ReferenceSpeed(160.6, 53.5),  # 0 / 1
    "H200": ReferenceSpeed(343.2, 53.5),  # 1 / 1
    "L40S": ReferenceSpeed(93.6, 73.3),  # 1 / 1
    "RTX 2080 Ti": ReferenceSpeed(19.4, 19.0),  # 0 / 1
    "RTX 3060": ReferenceSpeed(12.3, 12.0),  # 1 / 1
    "RTX 3080": ReferenceSpeed(25.1, 29.2),  # 0 / 1
    "RTX 3090": ReferenceSpeed(36.0, 35.6),  # 2 / 4
    "RTX 4070S": ReferenceSpeed(27.7, 36.0),  # 0 / 1
    "RTX 4090": ReferenceSpeed(97.6, 82.4),  # 6 / 12
    "RTX 5060 Ti": ReferenceSpeed(38.4, 22.8),  # 1 / 1
    "RTX 5090": ReferenceSpeed(198.5, 107.6),  # 8 / 9
    "RTX 6000D": ReferenceSpeed(229.6, 77.6),  # 0 / 1
    "RTX A2000": ReferenceSpeed(8.2, 11.2),  # 1 / 1
    "RTX A6000": ReferenceSpeed(51.3, 36.1),  # 1 / 1
    "RTX PRO 4000": ReferenceSpeed(65.7, 44.3),  # 1 / 1
    "RTX PRO 6000 Max-Q": ReferenceSpeed(278.6, 119.0),  # 1 / 1
    "RTX PRO 6000 S": ReferenceSpeed(278.6, 93.6),  # 1 / 1
    "RTX PRO 6000 WS": ReferenceSpeed(282.7, 119.0),  # 2 / 2
    "Tesla V100": ReferenceSpeed(24.1, 12.5),  # 2 / 2
    "Titan V": ReferenceSpeed(21.9, 15.7),  # 1 / 1
}

_BY_LOWER = {name.lower(): name for name in REFERENCE_SPEEDS}


def canonical_gpu_name(name: str) -> str | None:
    """The table's spelling of `name` (any case, outer spaces ignored), or None if unknown."""
    return _BY_LOWER.get(" ".join(name.split()).lower())


def unknown_gpu_reason(name: str) -> str:
    """Why `name` cannot be a reference GPU, naming the accepted models."""
    return f"{name!r} is not a GPU model with a reference speed; use one of: " + ", ".join(
        sorted(REFERENCE_SPEEDS)
    )
