"""Spend accounting and the agent's lease (DESIGN §3, §5, invariant 4). Pure.

A generation's spend is what Vast bills for it: GPU per second while running, storage every second
the instance exists (stopped included, until destroyed), and traffic per byte both ways
(references/vast-api.md "Billing"). The prices are the offer's, stored with the generation when it
was rented, so a later price change on the host does not rewrite history.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

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


def lease_s(
    *, lease_window_s: float, budget_usd: float, spent_usd: float, usd_per_hour: float
) -> float:
    """How long the agent may run without hearing from the supervisor.

    `min(lease window, remaining budget / current $ per hour)`: with the supervisor dead, spend
    passes the cap by at most the lease (invariant 4). A free host gets the full window; an
    exhausted budget gets 0 (stop now).
    """
    remaining = budget_usd - spent_usd
    if remaining <= 0:
        return 0.0
    if usd_per_hour <= 0:
        return float(lease_window_s)
    return min(float(lease_window_s), remaining / usd_per_hour * 3600)


def lease_expires_at(
    now: float, *, lease_window_s: float, budget_usd: float, spent_usd: float, usd_per_hour: float
) -> float:
    return now + lease_s(
        lease_window_s=lease_window_s,
        budget_usd=budget_usd,
        spent_usd=spent_usd,
        usd_per_hour=usd_per_hour,
    )
