"""Spend accounting and the agent's lease (DESIGN §3, §5, invariant 4). Pure.

A generation's spend is what Vast bills for it: GPU per second while running, storage every second
the instance exists (stopped included, until destroyed), and traffic per byte both ways
(references/vast-api.md "Billing"). The prices are the offer's, stored with the generation when it
was rented, so a later price change on the host does not rewrite history. The lease that bounds
spend with the supervisor dead is `functions/domain/lease.py`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.job import Generation
from functions.domain.offer import Offer

# Decimal GB: for the same bytes this gives the larger GB count, so our estimate errs high,
# which is the safe side for a budget cap.
BYTES_PER_GB = 1_000_000_000
HOURS_PER_MONTH = 720  # Vast's storage price is $/GB/month over 720 h (shared/fixtures README)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GenerationPrices(_Frozen):
    """The rented offer's prices, stored with the generation."""

    gpu_usd_per_hour: float = Field(ge=0)
    storage_usd_per_hour: float = Field(ge=0, description="For the allocated disk.")
    inet_down_usd_per_gb: float = Field(default=0, ge=0)
    inet_up_usd_per_gb: float = Field(default=0, ge=0)

    @classmethod
    def from_offer(cls, offer: Offer, disk_gb: float) -> GenerationPrices:
        gpu = offer.dph_base if offer.dph_base is not None else (offer.dph_total or 0.0)
        return cls(
            gpu_usd_per_hour=gpu,
            storage_usd_per_hour=offer.storage_cost * disk_gb / HOURS_PER_MONTH,
            inet_down_usd_per_gb=offer.inet_down_cost,
            inet_up_usd_per_gb=offer.inet_up_cost,
        )

    @property
    def usd_per_hour(self) -> float:
        """What a running instance costs per hour, traffic aside."""
        return self.gpu_usd_per_hour + self.storage_usd_per_hour


class GenerationUsage(_Frozen):
    running_s: float = Field(ge=0, description="Seconds billed as running (GPU).")
    existed_s: float = Field(ge=0, description="Seconds from rent to destroy (storage).")
    bytes_downloaded: int = Field(default=0, ge=0)
    bytes_uploaded: int = Field(default=0, ge=0)


class GenerationSpend(_Frozen):
    gpu_usd: float
    storage_usd: float
    download_usd: float
    upload_usd: float
    vast_charged_usd: float | None = Field(
        default=None, description="What Vast's charges endpoint says, when we have it."
    )

    @property
    def estimated_usd(self) -> float:
        return self.gpu_usd + self.storage_usd + self.download_usd + self.upload_usd

    @property
    def total_usd(self) -> float:
        """The larger of our estimate and Vast's charges.

        Vast's figure includes traffic the agent never sees (the image pull, anything before the
        agent started) but lags behind real time; our estimate is current but blind to those
        bytes. Each can be the low one, and the budget cap must not be fooled by either.
        """
        if self.vast_charged_usd is None:
            return self.estimated_usd
        return max(self.estimated_usd, self.vast_charged_usd)


def generation_spend(
    prices: GenerationPrices, usage: GenerationUsage, *, vast_charged_usd: float | None = None
) -> GenerationSpend:
    return GenerationSpend(
        gpu_usd=prices.gpu_usd_per_hour * usage.running_s / 3600,
        storage_usd=prices.storage_usd_per_hour * usage.existed_s / 3600,
        download_usd=prices.inet_down_usd_per_gb * usage.bytes_downloaded / BYTES_PER_GB,
        upload_usd=prices.inet_up_usd_per_gb * usage.bytes_uploaded / BYTES_PER_GB,
        vast_charged_usd=vast_charged_usd,
    )


def job_spend_usd(generations: Iterable[GenerationSpend]) -> float:
    """A job's spend: the sum over all its generations, replaced ones included."""
    return math.fsum(g.total_usd for g in generations)


# --- a generation's spend, from what the table holds ------------------------------------------


def prices_record(prices: GenerationPrices) -> dict[str, float]:
    """The prices as stored on the generation item (`Generation.prices`)."""
    return prices.model_dump()


def generation_prices(generation: Generation) -> GenerationPrices:
    """The stored prices; a generation without them is billed at its $/h, traffic free."""
    try:
        return GenerationPrices.model_validate(generation.prices)
    except ValueError:
        return GenerationPrices(gpu_usd_per_hour=generation.usd_per_hour, storage_usd_per_hour=0)


def spend_of(
    generation: Generation, now: float, *, vast_charged_usd: float | None = None
) -> GenerationSpend:
    """What one generation has cost by `now` (or by its end): $/h × seconds since the rent,
    plus the agent's traffic at the offer's prices; Vast's charges win when larger."""
    end = generation.ended_at if generation.ended_at is not None else now
    seconds = max(0.0, min(end, now) - generation.created_at)
    heartbeat = generation.heartbeat
    usage = GenerationUsage(
        running_s=seconds,
        existed_s=seconds,
        bytes_downloaded=heartbeat.bytes_downloaded if heartbeat else 0,
        bytes_uploaded=heartbeat.bytes_uploaded if heartbeat else 0,
    )
    return generation_spend(generation_prices(generation), usage, vast_charged_usd=vast_charged_usd)


def charges_by_instance(charges: Iterable[Mapping[str, object]]) -> dict[int, float]:
    """`GET /api/v0/charges/` rows → $ per instance id (rows without both are skipped)."""
    totals: dict[int, float] = {}
    for row in charges:
        metadata = row.get("metadata")
        instance_id = metadata.get("instance_id") if isinstance(metadata, Mapping) else None
        amount = row.get("amount")
        if isinstance(instance_id, int) and isinstance(amount, int | float):
            totals[instance_id] = totals.get(instance_id, 0.0) + float(amount)
    return totals
