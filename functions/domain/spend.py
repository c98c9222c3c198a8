"""Spend accounting and the agent's lease (docs/architecture.md#spend, invariant 4). Pure.

A generation's spend is what Vast bills for it: GPU per second while running, storage every second
the instance exists (stopped included, until destroyed), and traffic per byte both ways
(references/vast-api.md "Billing"). The prices are the offer's, stored with the generation when it
was rented, so a later price change on the host does not rewrite history. The lease that bounds
spend with the supervisor dead is `functions/domain/lease.py`.

Stopped time is billed at the storage rate only: the monitor keeps each generation's status clock
(`observed_status` since `observed_status_since`, and `stopped_s`, the stretches already closed),
so the seconds Vast showed the instance `stopped` are taken out of the GPU seconds. A stretch
counts from the first run that saw it, so the minutes before are billed as running: the estimate
errs high by at most one monitor interval per stop, never low.

Traffic is what Vast's charges bill (their bwd and bwu lines, as last read); the agent's byte
counts are the host's word and count only where larger. A run that cannot read the charges
(`ChargesUnread`, never the same as no charges) bounds the traffic since the last read from
above by the host's link × its $/GB (`traffic_bound_usd`), and the budget rule judges that bound
(docs/architecture.md#traffic-spend).

A job's spend counts every instance ever rented for it: its generations', and those no generation
records (a second rent of one generation, a rent that lost its race, a stray), from the monitor's
sightings (`Job.unrecorded_instances`) and from Vast's charges, which name an instance's label.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.cost import RELIABILITY_MAX
from functions.domain.job import Generation, UnrecordedInstance
from functions.domain.labels import parse_label
from functions.domain.offer import Offer

# Decimal GB: for the same bytes this gives the larger GB count, so our estimate errs high,
# which is the safe side for a budget cap.
BYTES_PER_GB = 1_000_000_000
HOURS_PER_MONTH = 720  # Vast's storage price is $/GB/month over 720 h (Vast's billing guide)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GenerationPrices(_Frozen):
    """The rented offer's prices, stored with the generation, and its link rates (what bounds
    the traffic it can bill while Vast's charges cannot be read: `traffic_bound_usd`)."""

    gpu_usd_per_hour: float = Field(ge=0)
    storage_usd_per_hour: float = Field(ge=0, description="For the allocated disk.")
    inet_down_usd_per_gb: float = Field(default=0, ge=0)
    inet_up_usd_per_gb: float = Field(default=0, ge=0)
    inet_down_mbps: float | None = Field(default=None, ge=0, description="Offer's inet_down.")
    inet_up_mbps: float | None = Field(default=None, ge=0, description="Offer's inet_up.")

    @classmethod
    def from_offer(cls, offer: Offer, disk_gb: float) -> GenerationPrices:
        gpu = offer.dph_base if offer.dph_base is not None else (offer.dph_total or 0.0)
        return cls(
            gpu_usd_per_hour=gpu,
            storage_usd_per_hour=offer.storage_cost * disk_gb / HOURS_PER_MONTH,
            inet_down_usd_per_gb=offer.inet_down_cost,
            inet_up_usd_per_gb=offer.inet_up_cost,
            inet_down_mbps=offer.inet_down or None,
            inet_up_mbps=offer.inet_up or None,
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
    download_usd: float = Field(description="The agent's own byte count: a lower bound.")
    upload_usd: float = Field(description="The agent's own byte count: a lower bound.")
    vast_charged_usd: float | None = Field(
        default=None, description="What Vast's charges endpoint says, when we have it."
    )
    vast_traffic_usd: float = Field(
        default=0.0, ge=0, description="Vast's bwd and bwu items, as last read."
    )
    traffic_bound_usd: float = Field(
        default=0.0,
        ge=0,
        description="The most traffic Vast can have billed since its charges were last read "
        "(0 when they were read this run): `traffic_bound_usd`.",
    )

    @property
    def traffic_usd(self) -> float:
        """Traffic as Vast billed it when last read; the agent's count only where larger (the
        host's word never lowers it)."""
        return max(self.download_usd + self.upload_usd, self.vast_traffic_usd)

    @property
    def estimated_usd(self) -> float:
        return self.gpu_usd + self.storage_usd + self.traffic_usd

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

    @property
    def upper_usd(self) -> float:
        """The most it can have cost: `total_usd`, plus the traffic bound while Vast's charges
        are unread (what the budget rule judges)."""
        return self.total_usd + self.traffic_bound_usd


def generation_spend(
    prices: GenerationPrices,
    usage: GenerationUsage,
    *,
    vast_charged_usd: float | None = None,
    vast_traffic_usd: float = 0.0,
    traffic_bound_usd: float = 0.0,
) -> GenerationSpend:
    return GenerationSpend(
        gpu_usd=prices.gpu_usd_per_hour * usage.running_s / 3600,
        storage_usd=prices.storage_usd_per_hour * usage.existed_s / 3600,
        download_usd=prices.inet_down_usd_per_gb * usage.bytes_downloaded / BYTES_PER_GB,
        upload_usd=prices.inet_up_usd_per_gb * usage.bytes_uploaded / BYTES_PER_GB,
        vast_charged_usd=vast_charged_usd,
        vast_traffic_usd=vast_traffic_usd,
        traffic_bound_usd=traffic_bound_usd,
    )


# --- traffic while Vast's charges are unread -----------------------------------------------

# A host's traffic is known only from Vast's charges (bwd, bwu): the agent's byte count is the
# host's word. While the charges cannot be read, what the host can have billed since the last
# read is bounded by its link: the offer's `inet_down`/`inet_up` (Mbit/s: the real records'
# units, references/vast-api.md) × LINK_RATE_MARGIN (a speed test measures one moment and a
# host can make it read low) × the offer's $/GB × the seconds unread. A rate the offer did not
# give is taken from the other direction, and with neither it is UNKNOWN_LINK_MBPS, above the
# fastest link in the real offer records (21,327 Mbit/s down, 11,330 up).
LINK_RATE_MARGIN = 2.0
UNKNOWN_LINK_MBPS = 25_000.0
GB_PER_MBIT = 1_000_000 / 8 / BYTES_PER_GB  # one Mbit in (decimal) GB


def link_usd_per_hour(prices: GenerationPrices) -> float:
    """The most traffic can bill per hour on this host, both ways at full (margined) link
    rate, at the offer's prices."""
    down = prices.inet_down_mbps or prices.inet_up_mbps
    up = prices.inet_up_mbps or prices.inet_down_mbps
    down_mbps = down * LINK_RATE_MARGIN if down else UNKNOWN_LINK_MBPS
    up_mbps = up * LINK_RATE_MARGIN if up else UNKNOWN_LINK_MBPS
    usd_per_s = (
        down_mbps * prices.inet_down_usd_per_gb + up_mbps * prices.inet_up_usd_per_gb
    ) * GB_PER_MBIT
    return usd_per_s * 3600


def traffic_bound_usd(prices: GenerationPrices, unread_s: float) -> float:
    """The most traffic Vast can have billed over `unread_s` seconds its charges went unread."""
    return link_usd_per_hour(prices) * max(0.0, unread_s) / 3600


def job_spend_usd(generations: Iterable[GenerationSpend]) -> float:
    """A job's spend: the sum over all its generations, replaced ones included."""
    return math.fsum(g.total_usd for g in generations)


# The job item's `spent_usd` is refreshed in steps; the exact figure goes every run with the
# current generation's observation (`functions.domain.job.known_spend_usd`). What reads the job
# item alone (the job list) then lags by at most a step — 1 % of the budget, at least a cent,
# the precision `tether jobs` shows — and the job item, billed three times for its two indexes,
# is written ~100 times over a job's budget (and once per transition) instead of every monitor
# run.
JOB_ITEM_SPEND_STEP_FRACTION = 0.01
JOB_ITEM_SPEND_STEP_MIN_USD = 0.01
SPEND_EPSILON_USD = 1e-6


def job_item_spend_step_usd(budget_usd: float) -> float:
    return max(JOB_ITEM_SPEND_STEP_MIN_USD, budget_usd * JOB_ITEM_SPEND_STEP_FRACTION)


def job_item_spend_due(
    stored_usd: float, spend_usd: float, budget_usd: float, *, carried: bool, transition: bool
) -> bool:
    """Whether a monitor run writes the job's spend onto the job item (only ever upwards): when
    no generation write carries it this run (`carried` False: nothing rented to supervise),
    when the run names a transition (a stop, over budget included, or a replace: the job item's
    figure is what lists and the end-of-job message show), or when it lags by a step."""
    if spend_usd <= stored_usd + SPEND_EPSILON_USD:
        return False
    if not carried or transition:
        return True
    return spend_usd - stored_usd >= job_item_spend_step_usd(budget_usd)


# --- a generation's spend, from what the table holds ------------------------------------------


def prices_record(prices: GenerationPrices) -> dict[str, float]:
    """The prices as stored on the generation item (`Generation.prices`); a link rate the
    offer did not give is left out."""
    return prices.model_dump(exclude_none=True)


def generation_prices(generation: Generation) -> GenerationPrices:
    """The stored prices; a generation without them is billed at its $/h, traffic free. A
    download rate stored before the prices carried it comes from `inet_down_mbps`."""
    try:
        prices = GenerationPrices.model_validate(generation.prices)
    except ValueError:
        return GenerationPrices(gpu_usd_per_hour=generation.usd_per_hour, storage_usd_per_hour=0)
    if prices.inet_down_mbps is None and generation.inet_down_mbps:
        return prices.model_copy(update={"inet_down_mbps": generation.inet_down_mbps})
    return prices


def rented_offer(generation: Generation, disk_gb: float) -> Offer | None:
    """The host `generation` runs on as the planner priced it when it was rented (the inverse
    of `GenerationPrices.from_offer`), from what the generation stored: its prices, link
    speeds, card and reliability. A generation stored before its reliability was has
    `RELIABILITY_MAX` (the surest host the planner accepts: few interruptions, leaning towards
    staying); None without the offer's id."""
    if generation.offer_id is None:
        return None
    prices = generation_prices(generation)
    storage_cost = prices.storage_usd_per_hour * HOURS_PER_MONTH / disk_gb if disk_gb > 0 else 0
    return Offer(
        id=generation.offer_id, machine_id=generation.machine_id,
        gpu_name=generation.gpu_name or "", num_gpus=generation.gpu_count or 1,
        dph_base=prices.gpu_usd_per_hour, storage_cost=storage_cost,
        inet_down=prices.inet_down_mbps or 0, inet_up=prices.inet_up_mbps or 0,
        inet_down_cost=prices.inet_down_usd_per_gb, inet_up_cost=prices.inet_up_usd_per_gb,
        dlperf=generation.dlperf,
        reliability2=RELIABILITY_MAX if generation.reliability is None else generation.reliability,
    )  # fmt: skip


STOPPED = "stopped"  # Vast's actual_status that bills storage only
GONE = "gone"  # the status clock's word for an instance missing from a successful list


def stopped_seconds(generation: Generation, end: float) -> float:
    """Seconds the instance was seen stopped, up to `end` (the closed stretches and the open
    one)."""
    stopped = generation.stopped_s
    since = generation.observed_status_since
    if generation.observed_status == STOPPED and since is not None:
        stopped += max(0.0, end - since)
    return stopped


def billed_until(generation: Generation, now: float) -> float:
    """When Vast stops billing the generation's instance: its end, when it was seen gone, or
    `now`."""
    end = min(generation.ended_at if generation.ended_at is not None else now, now)
    if generation.observed_status == GONE and generation.observed_status_since is not None:
        end = min(end, generation.observed_status_since)  # Vast bills nothing once it is gone
    return end


def charges_unread_s(generation: Generation, now: float) -> float:
    """Seconds of the generation's billing that Vast's charges, as last read, do not cover:
    since the last read (`charges_read_at`), or since the rent if none ever was."""
    read_at = generation.charges_read_at
    since = generation.created_at if read_at is None else max(read_at, generation.created_at)
    return max(0.0, billed_until(generation, now) - since)


def spend_of(
    generation: Generation,
    now: float,
    *,
    vast_charged_usd: float | None = None,
    charges_read: bool = True,
) -> GenerationSpend:
    """What one generation has cost by `now` (or by its end): the GPU $/h × the seconds it was
    not seen stopped, storage × every second since the rent, plus traffic — Vast's bwd and bwu
    as last read (`Generation.vast_traffic_usd`), the agent's count only where larger; Vast's
    charges win when larger. `charges_read` False: this run could not read them, and the
    traffic the host can have billed since the last read is bounded (`traffic_bound_usd`)."""
    end = billed_until(generation, now)
    seconds = max(0.0, end - generation.created_at)
    stopped = min(seconds, stopped_seconds(generation, end))
    heartbeat = generation.heartbeat
    usage = GenerationUsage(
        running_s=seconds - stopped,
        existed_s=seconds,
        bytes_downloaded=heartbeat.bytes_downloaded if heartbeat else 0,
        bytes_uploaded=heartbeat.bytes_uploaded if heartbeat else 0,
    )
    prices = generation_prices(generation)
    bound = 0.0 if charges_read else traffic_bound_usd(prices, charges_unread_s(generation, now))
    return generation_spend(
        prices, usage, vast_charged_usd=vast_charged_usd,
        vast_traffic_usd=generation.vast_traffic_usd, traffic_bound_usd=bound,
    )  # fmt: skip


def unrecorded_spend(
    instance: UnrecordedInstance, *, vast_charged_usd: float | None = None
) -> GenerationSpend:
    """What an instance no generation records has cost: its $/h (Vast's `dph_total`, storage
    included) from its start to its last sighting; Vast's charges win when larger."""
    hours = max(0.0, instance.last_seen - instance.start) / 3600
    return GenerationSpend(
        gpu_usd=instance.usd_per_hour * hours,
        storage_usd=0.0,
        download_usd=0.0,
        upload_usd=0.0,
        vast_charged_usd=vast_charged_usd,
    )


def charged_only(amount_usd: float) -> GenerationSpend:
    """An instance known only from Vast's charges (rented and destroyed between two runs)."""
    return GenerationSpend(
        gpu_usd=0.0, storage_usd=0.0, download_usd=0.0, upload_usd=0.0,
        vast_charged_usd=amount_usd,
    )  # fmt: skip


# --- Vast's charges ---------------------------------------------------------------------------


class ChargesUnread(_Frozen):
    """This run could not read Vast's charges (the call failed, a page or an item could not be
    read): not the same fact as no charges. Spend is then bounded from above
    (`traffic_bound_usd`) from the last read kept on each generation (`charges_read_at`)."""

    reason: str


# `source` names what a charge is for: "instance-<id>", "volume-<id>", and in the tree format
# "endpoint-<id>" / "workergroup-<id>" for serverless. Case and the separator are taken loosely.
_SOURCE = re.compile(r"^\s*([a-z]+)[-_: ]?\s*(\d+)\s*$", re.IGNORECASE)
_NOT_INSTANCE_TYPES = frozenset({"volume", "serverless", "endpoint", "workergroup"})


class UnreadableCharge(ValueError):
    """A charge that should be an instance's, but whose `field` cannot be read."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class InstanceCharge(_Frozen):
    instance_id: int
    amount_usd: float
    traffic_usd: float = 0.0  # its bwd and bwu items
    start: float | None = None  # epoch s
    end: float | None = None
    label: str | None = None  # metadata.label: the instance's label when it was billed


class VastCharges(_Frozen):
    """Vast's charges per instance as read this run, the traffic among them (bwd and bwu
    items), and the label each was billed under. An instance missing from them was billed
    nothing yet: a fact, unlike `ChargesUnread`."""

    amounts: dict[int, float] = Field(default_factory=dict)
    traffic: dict[int, float] = Field(default_factory=dict)
    labels: dict[int, str] = Field(default_factory=dict)
    unreadable: int = Field(
        default=0, ge=0, description="Items that are (or may be) an instance's, not readable."
    )

    @cached_property
    def by_job(self) -> dict[str, tuple[int, ...]]:
        """The charged instances per job their label names: parsed once per run, not once
        per job (the monitor judges every job against the same charges)."""
        found: dict[str, list[int]] = {}
        for instance_id, label in self.labels.items():
            parsed = parse_label(label)
            if parsed is not None:
                found.setdefault(parsed[0], []).append(instance_id)
        return {job_id: tuple(ids) for job_id, ids in found.items()}


ChargesRead = VastCharges | ChargesUnread


def instance_charge(row: Mapping[str, object]) -> InstanceCharge | None:
    """One item of `GET /api/v0/charges/` as an instance's charge; None for a charge that is not
    an instance's (a volume, a serverless endpoint). Raises UnreadableCharge when the item is (or
    may be) an instance's but its instance or its amount cannot be read.

    The real shape, from the official client and Vast's API spec: items carry `start` and `end`
    (epoch s), `type` ("instance", "volume", "serverless"), `source` ("instance-<id>"),
    `description`, `amount` ($), `metadata` (an object: label, template, endpoint ids) and
    `items` (the same shape, one per line: gpu, disk, bwd, bwu). Sources:
    vast-ai/vast-cli `vastai/cli/commands/billing.py` (`format_invoices_charges_results` splits
    `source` at "-" into the type and the id; `create_rich_table_for_charges` and
    `create_charges_tree` read start, end, type, source, description, amount, metadata, items)
    and vast-ai/docs `api-reference/openapi/yaml/auto_get_api_v0_charges_cfa131.yaml` ("Charge
    entries with start, end, type, source, description, amount, metadata, and items fields").

    Read in this order: `source` "instance-<id>"; a bare id in `source` when `type` is
    "instance"; `metadata.instance_id` (this project's simulator sent only that before).
    """
    kind = row.get("type")
    kind = kind.strip().lower() if isinstance(kind, str) else None
    source = row.get("source")
    instance_id: int | None = None
    if isinstance(source, str) and (match := _SOURCE.match(source)):
        prefix = match.group(1).lower()
        if prefix != "instance":
            return None
        instance_id = int(match.group(2))
    elif kind in _NOT_INSTANCE_TYPES:
        return None
    elif kind == "instance":
        instance_id = _whole_number(source)
    if instance_id is None:
        metadata = row.get("metadata")
        if isinstance(metadata, Mapping):
            instance_id = _whole_number(metadata.get("instance_id"))
    if instance_id is None or instance_id <= 0:
        raise UnreadableCharge("source", f"no instance id in source {source!r}")
    amount = _number(row.get("amount"))
    if amount is None:
        raise UnreadableCharge("amount", f"amount {row.get('amount')!r} is not a number")
    metadata = row.get("metadata")
    label = metadata.get("label") if isinstance(metadata, Mapping) else None
    return InstanceCharge(
        instance_id=instance_id,
        amount_usd=amount,
        traffic_usd=_traffic_usd(row.get("items")),
        start=_number(row.get("start")),
        end=_number(row.get("end")),
        label=label if isinstance(label, str) and label else None,
    )


TRAFFIC_ITEM_TYPES = frozenset({"bwd", "bwu"})  # download and upload lines of a charge


def _traffic_usd(items: object) -> float:
    """The bwd and bwu lines of a charge's `items` (nested items read too). Raises
    UnreadableCharge when a traffic line's amount cannot be read."""
    if not isinstance(items, list):
        return 0.0
    total = 0.0
    for item in items:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if isinstance(kind, str) and kind.strip().lower() in TRAFFIC_ITEM_TYPES:
            amount = _number(item.get("amount"))
            if amount is None:
                raise UnreadableCharge("items", f"traffic amount {item.get('amount')!r}")
            total += amount
        else:
            total += _traffic_usd(item.get("items"))
    return total


def charges_by_instance(charges: Iterable[Mapping[str, object]]) -> dict[int, float]:
    """`GET /api/v0/charges/` items → $ per instance id (`instance_charge` reads each; items of
    volumes and endpoints, and items that cannot be read, add nothing)."""
    return vast_charges(charges).amounts


def vast_charges(charges: Iterable[Mapping[str, object]]) -> VastCharges:
    """`GET /api/v0/charges/` items → $ per instance id, and each instance's label."""
    totals: dict[int, float] = {}
    traffic: dict[int, float] = {}
    labels: dict[int, str] = {}
    unreadable = 0
    for row in charges:
        try:
            charge = instance_charge(row)
        except UnreadableCharge:
            unreadable += 1
            continue
        if charge is not None:
            iid = charge.instance_id
            totals[iid] = totals.get(iid, 0.0) + charge.amount_usd
            traffic[iid] = traffic.get(iid, 0.0) + charge.traffic_usd
            if charge.label is not None:
                labels[iid] = charge.label
    return VastCharges(amounts=totals, traffic=traffic, labels=labels, unreadable=unreadable)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def _whole_number(value: object) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number.is_integer() else None
