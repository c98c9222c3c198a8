"""What a monitor run reads from Vast: the account's instances as the rules see them, Vast's own
charges per instance (best effort), and the count of records that could not be read.

Both are chains of keyset pages (`next_token` → `after_token`; /api/v1/instances/ gives 25 a
page): a page's token comes only with the page before it and the API offers no offset, so the
pages of one chain cannot be fetched in parallel, even though the first reply says how many
there are (`total_instances`). What can run side by side: the charges chain beside the
instances, and the instances split into disjoint id ranges (`select_filters` on `id`), up to
`LIST_CHAINS` chains, cut at the quantiles of the instance ids our generations record (the
ranges cover every id, so an instance we do not know of is still listed). Vast limits calls per
endpoint (429 past it, retried by the adapter with back-off), which is why the chains are few.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Sequence

from functions.adapters.pool import beside, map_bounded
from functions.adapters.vast import (
    INSTANCES_PAGE_LIMIT,
    Instance,
    RecordIssue,
    VastClient,
    VastError,
    describe_issues,
)
from functions.domain.reconcile import InstanceFacts, JobSnapshot
from functions.domain.spend import VastCharges, vast_charges
from functions.monitor.report import MonitorReport
from functions.observability import logger

LIST_CHAINS = 4

IdRange = tuple[int | None, int | None]


def id_ranges(known_ids: Sequence[int], chains: int = LIST_CHAINS) -> list[IdRange]:
    """Disjoint id ranges that cover every id, about as many known instances in each, one
    per page chain; a single open range while the known instances fit in a page or two."""
    ids = sorted(set(known_ids))
    wanted = min(chains, math.ceil(len(ids) / INSTANCES_PAGE_LIMIT))
    if wanted <= 1 or len(ids) <= 2 * INSTANCES_PAGE_LIMIT:
        return [(None, None)]
    cuts = sorted({ids[len(ids) * k // wanted] for k in range(1, wanted)})
    bounds: list[int | None] = [None, *cuts, None]
    return list(itertools.pairwise(bounds))


def read_vast(
    vast: VastClient | None, snapshots: list[JobSnapshot], issues: list[RecordIssue]
) -> tuple[list[InstanceFacts] | None, VastCharges | None]:
    """The instances and, while any job is active, the charges: in flight together once the
    instances take more than one chain (each chain on its own copy of the client: it is not
    thread-safe); a small fleet reads them one after the other, on this thread, as before.
    Charges count only with the instances read."""
    if vast is None:
        return None, None
    if not snapshots:
        return list_instances(vast, issues), None
    known = [g.instance_id for s in snapshots for g in s.generations if g.instance_id is not None]
    ranges = id_ranges(known)
    if len(ranges) == 1:
        instances = list_instances(vast, issues)
        if instances is None:
            return None, None
        return instances, read_charges(vast, snapshots, issues)
    charge_issues: list[RecordIssue] = []
    copied = copy.copy(vast)
    with beside(lambda: read_charges(copied, snapshots, charge_issues)) as pending:
        instances = list_instances(vast, issues, ranges)
        charges = pending.result()
    if instances is None:
        return None, None
    issues.extend(charge_issues)
    return instances, charges


def list_instances(
    vast: VastClient, issues: list[RecordIssue], ranges: Sequence[IdRange] = ((None, None),)
) -> list[InstanceFacts] | None:
    """The account's instances, all pages of every id range (side by side, each on its own
    copy of the client: it is not thread-safe); None when Vast could not be read this run."""

    def chain(id_range: IdRange) -> list[Instance] | VastError:
        try:
            if id_range == (None, None):
                listed = copy.copy(vast).list_instances()
            else:
                listed = copy.copy(vast).list_instances(id_range=id_range)
        except VastError as exc:
            return exc
        issues_by_range[id_range] = list(listed.issues)
        return listed

    issues_by_range: dict[IdRange, list[RecordIssue]] = {}
    found: list[Instance] = []
    for result in map_bounded(chain, ranges, workers=len(ranges)):
        if isinstance(result, VastError):
            logger.warning(
                "monitor: Vast instance list failed; no instance rule this run: %s", result
            )
            return None
        found.extend(result)
    for id_range in ranges:
        issues.extend(issues_by_range.get(id_range, ()))
    return [
        InstanceFacts(
            id=i.id,
            label=i.label,
            actual_status=i.actual_status,
            status_msg=i.status_msg,
            start_date=i.start_date,
            usd_per_hour=i.dph_total,
            intended_status=i.intended_status,
            is_bid=i.is_bid,
        )
        for i in found
    ]


def read_charges(
    vast: VastClient, snapshots: list[JobSnapshot], issues: list[RecordIssue]
) -> VastCharges | None:
    """Vast's own charges per instance, read from each item's `source` (and the label it was
    billed under), best effort (spend falls back to our estimate)."""
    since = min((g.created_at for s in snapshots for g in s.generations), default=None)
    if since is None:
        return None
    try:
        listed = vast.charges(since=since - 86_400)
    except (VastError, ValueError) as exc:
        logger.info("monitor: Vast charges unavailable: %s", exc)
        return None
    issues.extend(listed.issues)
    return vast_charges(listed)


def count_issues(issues: list[RecordIssue], report: MonitorReport) -> None:
    """Count the records this run could not read, and name them all in one warning."""
    report.vast_records_skipped = sum(1 for i in issues if i.action == "skipped")
    report.vast_fields_dropped = sum(len(i.fields) for i in issues if i.action == "trimmed")
    if issues:
        logger.warning(
            "monitor: Vast records that could not be read: %s",
            describe_issues(issues),
            extra={
                "vast_records": [
                    {"kind": i.kind, "id": i.record_id, "fields": list(i.fields),
                     "action": i.action}
                    for i in issues
                ]
            },
        )  # fmt: skip
