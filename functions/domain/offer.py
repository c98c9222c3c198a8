"""A marketplace offer, as Vast's search (`POST /api/v0/bundles/`) returns it.

Only the fields tether uses are modelled; every other field is kept (extra="allow") so a newer
API never breaks parsing. Units follow the real Vast records (docs/vast.md):
`gpu_ram` MB, `disk_space` GB, `inet_down`/`inet_up` Mbit/s, `inet_*_cost` $/GB,
`dph_*` and `min_bid` $/hour, `storage_cost` $/GB/month. `min_bid` prices the GPU/machine part
of an interruptible (bid) instance; storage is billed on top, as for on-demand.

Odd values are made readable first (`functions.domain.vast_values.normalise`: "n/a" and "" are
missing, numbers written as text are numbers). An offer without a price (`dph_total` and
`dph_base` both missing) is refused: it is not an offer, and ranked as one it would look nearly
free.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from functions.domain.vast_values import normalise


class Offer(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    id: int = Field(strict=True, gt=0)  # strict: `true` is no id (lax pydantic would read 1)
    machine_id: int | None = None
    host_id: int | None = None
    gpu_name: str = ""
    num_gpus: int = 0
    gpu_ram: float = 0  # MB per GPU
    disk_space: float = 0  # GB available
    dph_base: float | None = None  # GPU + machine $/h
    dph_total: float | None = Field(  # dph_base + storage for the searched disk size, $/h
        default=None, validate_default=True
    )
    storage_cost: float = 0  # $/GB/month
    min_bid: float | None = None  # interruptible: the lowest bid, $/h for the GPU/machine part
    inet_down: float = 0  # Mbit/s measured
    inet_up: float = 0  # Mbit/s measured
    inet_down_cost: float = 0  # $/GB
    inet_up_cost: float = 0  # $/GB
    reliability: float | None = Field(
        default=None, description="0..1; `reliability2` on newer records."
    )
    reliability2: float | None = None
    geolocation: str | None = None
    rentable: bool | None = None
    rented: bool | None = None
    verification: str | None = None
    dlperf: float | None = None  # Vast's deep-learning score of the whole machine
    total_flops: float | None = None  # peak TFLOPS, summed over the GPUs

    @model_validator(mode="before")
    @classmethod
    def _readable_and_priced(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        data = normalise(data, cls)
        # Some exports (e.g. 500.farm) lack dph_total; the price is then GPU only.
        if data.get("dph_total") is None and data.get("dph_base") is not None:
            data = {**data, "dph_total": data["dph_base"]}
        return data

    @field_validator("dph_total")
    @classmethod
    def _has_a_price(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is None and info.data.get("dph_base") is None:
            raise ValueError("an offer without a price (dph_total and dph_base missing)")
        return value

    @property
    def reliability_score(self) -> float:
        """The best reliability figure the record has (0..1); unknown counts as 0.9."""
        for value in (self.reliability2, self.reliability):
            if value is not None:
                return min(max(value, 0.0), 1.0)
        return 0.9

    @property
    def gpu_ram_gb(self) -> float:
        return self.gpu_ram / 1024

    def usd_per_hour(self, disk_gb: float) -> float:
        """$/h for GPU + `disk_gb` of storage: dph_base + storage_cost × GB / 720 h per month."""
        base = self.dph_base if self.dph_base is not None else (self.dph_total or 0.0)
        return base + self.storage_cost * disk_gb / 720

    def storage_usd_per_hour(self, disk_gb: float) -> float:
        """$/h for `disk_gb` of storage alone: what a stopped instance keeps billing."""
        return self.storage_cost * disk_gb / 720

    @property
    def download_mb_per_s(self) -> float:
        """Measured download speed in MB/s (`inet_down` is Mbit/s)."""
        return self.inet_down / 8
