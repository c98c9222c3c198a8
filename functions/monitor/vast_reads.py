"""What a monitor run reads from Vast: the account's instances as the rules see them, Vast's own
charges per instance (best effort), and the count of records that could not be read.

The two listings are read at once (`read_vast`). Each is a chain of keyset pages (`next_token`
→ `after_token`; /api/v1/instances/ gives 25 a page): a page's token comes only with the page
before it, and the API offers no offset, so the pages of one chain cannot be fetched in
parallel even though the first reply says how many there are (`total_instances`).
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor

from functions.adapters.vast import RecordIssue, VastClient, VastError, describe_issues
from functions.domain.reconcile import InstanceFacts, JobSnapshot
from functions.domain.spend import VastCharges, vast_charges
from functions.monitor.report import MonitorReport
from functions.observability import logger


def read_vast(
    vast: VastClient | None, snapshots: list[JobSnapshot], issues: list[RecordIssue]
) -> tuple[list[InstanceFacts] | None, VastCharges | None]:
    """The instances and, while any job is active, the charges: the two page chains in
    flight together (each on its own copy of the client: it is not thread-safe). Charges
    count only with the instances read (as when they were read one after the other)."""
    if vast is None:
        return None, None
    if not snapshots:
        return list_instances(vast, issues), None
    charge_issues: list[RecordIssue] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(read_charges, copy.copy(vast), snapshots, charge_issues)
        instances = list_instances(vast, issues)
        charges = pending.result()
    if instances is None:
        return None, None
    issues.extend(charge_issues)
    return instances, charges


def list_instances(vast: VastClient, issues: list[RecordIssue]) -> list[InstanceFacts] | None:
    """The account's instances, all pages; None when Vast could not be read this run."""
    try:
        listed = vast.list_instances()
    except VastError as exc:
        logger.warning("monitor: Vast instance list failed; no instance rule this run: %s", exc)
        return None
    issues.extend(listed.issues)
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
        for i in listed
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
