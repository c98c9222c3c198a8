"""What a monitor run reads from Vast: the shard's instances as the rules see them, Vast's own
charges per instance (or the fact that they could not be read: `ChargesUnread`, never the same as
no charges), and the count of records that could not be read.

Both are chains of keyset pages (`next_token` → `after_token`; /api/v1/instances/ gives 25 a
page): a page's token comes only with the page before it and the API offers no offset, so the
pages of one chain cannot be fetched in parallel, even though the first reply says how many
there are (`total_instances`). What runs side by side: the charges chain beside the instances,
and the instances split into disjoint label ranges (`select_filters` on `label`): the shard's
label slots cut into up to `LIST_CHAINS` runs, and the labels written before slots
(`functions/domain/shards.py`). Vast limits calls per endpoint (429 past it, retried by the
adapter with back-off), which is why the chains are few.

A filter narrows the pages; it does not decide what is ours. Each listed record is kept only if
its label is one of this shard's jobs, and every instance a live generation of the shard
records must be in the listing: one that is not is looked up by id (`MISSING_CHECKS` at most a
run), and only an instance Vast no longer shows is gone. More missing than that means the
filter did not select what it should: the listing counts as unread this run (no instance rule,
no orphan sweep), never as a fleet of dead hosts.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

from functions.adapters.pool import map_bounded, run_in_background
from functions.adapters.vast import (
    INSTANCES_PAGE_LIMIT,
    Instance,
    RecordIssue,
    VastClient,
    VastError,
    describe_issues,
)
from functions.domain.labels import LabelRange
from functions.domain.reconcile import InstanceFacts, JobSnapshot
from functions.domain.shards import Shard
from functions.domain.spend import ChargesRead, ChargesUnread, vast_charges
from functions.monitor.report import MonitorReport
from functions.observability import logger

LIST_CHAINS = 4
MISSING_CHECKS = 16


def list_chains(known: int) -> int:
    """Page chains for a shard that knows `known` live instances: one while they fit in two
    pages, up to `LIST_CHAINS` past that."""
    if known <= 2 * INSTANCES_PAGE_LIMIT:
        return 1
    return min(LIST_CHAINS, math.ceil(known / INSTANCES_PAGE_LIMIT))


def live_instance_ids(snapshots: Sequence[JobSnapshot]) -> list[int]:
    """The instances the shard's live generations record (those not ended)."""
    return [
        g.instance_id
        for s in snapshots
        for g in s.generations
        if g.instance_id is not None and g.ended_at is None
    ]


def read_vast(
    vast: VastClient | None,
    snapshots: list[JobSnapshot],
    issues: list[RecordIssue],
    shard: Shard,
) -> tuple[list[InstanceFacts] | None, ChargesRead]:
    """The shard's instances and, while any job is active, the charges: in flight together
    once the instances take more than one chain (each chain on its own copy of the client: it
    is not thread-safe); a small fleet reads them one after the other, on this thread.
    Charges count only with the instances read: without them they are unread."""
    if vast is None:
        return None, ChargesUnread(reason="no Vast key")
    known = live_instance_ids(snapshots)
    ranges = shard.label_ranges(list_chains(len(known)))
    if not snapshots:
        return list_instances(vast, issues, shard, ranges, known), ChargesUnread(reason="no job")
    if len(ranges) == 1:
        instances = list_instances(vast, issues, shard, ranges, known)
        if instances is None:
            return None, ChargesUnread(reason="Vast's instances unread")
        return instances, read_charges(vast, snapshots, issues)
    charge_issues: list[RecordIssue] = []
    copied = copy.copy(vast)
    with run_in_background(lambda: read_charges(copied, snapshots, charge_issues)) as pending:
        instances = list_instances(vast, issues, shard, ranges, known)
        charges = pending.result()
    if instances is None:
        return None, ChargesUnread(reason="Vast's instances unread")
    issues.extend(charge_issues)
    return instances, charges


def list_instances(
    vast: VastClient,
    issues: list[RecordIssue],
    shard: Shard,
    ranges: Sequence[LabelRange | None],
    known: Sequence[int] = (),
) -> list[InstanceFacts] | None:
    """The shard's instances: every page of every label range (side by side, each on its own
    copy of the client), the shard's own labels kept, the known ones missing looked up by id;
    None when Vast could not be read this run."""

    def chain(label_range: LabelRange | None) -> Sequence[Instance] | VastError:
        try:
            listed = copy.copy(vast).list_instances(label_range=label_range)
        except VastError as exc:
            return exc
        issues_by_range[label_range] = list(listed.issues)
        return listed

    issues_by_range: dict[LabelRange | None, list[RecordIssue]] = {}
    found: dict[int, Instance] = {}
    results = map_bounded(chain, ranges, workers=len(ranges))
    if any(isinstance(r, VastError) and r.status == 400 for r in results):
        logger.warning("monitor: Vast refused the label filter; listing every instance instead")
        issues_by_range.clear()
        ranges, results = [None], [chain(None)]
    for result in results:
        if isinstance(result, VastError):
            logger.warning(
                "monitor: Vast instance list failed; no instance rule this run: %s", result
            )
            return None
        found.update((i.id, i) for i in result if shard.owns_label(i.label))
    for label_range in ranges:
        issues.extend(issues_by_range.get(label_range, ()))
    looked_up = _look_up_missing(vast, [i for i in known if i not in found])
    if looked_up is None:
        return None
    found.update((i.id, i) for i in looked_up)
    return [_facts(i) for i in found.values()]


def _look_up_missing(vast: VastClient, missing: list[int]) -> list[Instance] | None:
    """The known instances the listing did not show, one by one: those Vast still shows (a
    label changed, a filter that selects otherwise than assumed), not those it has destroyed.
    None when too many are missing, or one cannot be read: the listing cannot be trusted."""
    if not missing:
        return []
    if len(missing) > MISSING_CHECKS:
        logger.error(
            "monitor: %d known instances missing from Vast's label listing (at most %d are "
            "looked up); no instance rule this run",
            len(missing),
            MISSING_CHECKS,
        )
        return None

    def show(instance_id: int) -> Instance | VastError | None:
        try:
            return copy.copy(vast).show_instance(instance_id)
        except VastError as exc:
            return exc

    shown = map_bounded(show, missing, workers=LIST_CHAINS)
    failed = [r for r in shown if isinstance(r, VastError)]
    if failed:
        logger.warning("monitor: a missing instance cannot be looked up; no instance rule this "
                       "run: %s", failed[0])  # fmt: skip
        return None
    return [r for r in shown if isinstance(r, Instance)]


def _facts(i: Instance) -> InstanceFacts:
    return InstanceFacts(
        id=i.id,
        label=i.label,
        actual_status=i.actual_status,
        status_msg=i.status_msg,
        start_date=i.start_date,
        usd_per_hour=i.dph_total,
        intended_status=i.intended_status,
        is_bid=i.is_bid,
    )


def read_charges(
    vast: VastClient, snapshots: list[JobSnapshot], issues: list[RecordIssue]
) -> ChargesRead:
    """Vast's own charges per instance, read from each item's `source` (and the label it was
    billed under). A call that fails, or a read with an item (or a record) that cannot be read,
    is `ChargesUnread`: the traffic since the last read is then bounded, not taken as none."""
    since = min((g.created_at for s in snapshots for g in s.generations), default=None)
    if since is None:
        return ChargesUnread(reason="no generation rented")
    try:
        listed = vast.charges(since=since - 86_400)
    except (VastError, ValueError) as exc:
        logger.warning("monitor: Vast charges unread; traffic bounded from above: %s", exc)
        return ChargesUnread(reason=f"charges call failed: {exc}")
    issues.extend(listed.issues)
    charges = vast_charges(listed)
    unreadable = len(listed.issues) + charges.unreadable
    if unreadable:
        logger.warning("monitor: %d Vast charge(s) unreadable; traffic bounded from above",
                       unreadable)  # fmt: skip
        return ChargesUnread(reason=f"{unreadable} charge(s) unreadable")
    return charges


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
