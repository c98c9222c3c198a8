"""`SupervisionRecords`: what the monitor measures and keeps outside the generations: a job's
spend (only upwards), its unrecorded instances and incidents, hosts' reputations (blame) and
the first sightings of instances listed without a start date."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from functions.adapters.store_base import StoreBase
from functions.adapters.table import (
    TTL_ATTRIBUTE,
    as_reputation,
    deserialize,
    host_key,
    job_key,
    serialize,
    serialize_value,
    sighting_key,
)
from functions.domain.blame import blamed_again
from functions.domain.job import HostReputation, UnrecordedInstance

SIGHTING_TTL_S = 7 * 86_400
BLAME_WRITE_ATTEMPTS = 5


class SupervisionRecords(StoreBase):
    """Spend, unrecorded instances, incidents, host reputations, first sightings."""

    def record_spend(self, job_id: str, spent_usd: float) -> bool:
        """The job's spend as the monitor measured it, only upwards: overlapping monitor runs
        (or a run that could not read Vast's charges) never lower it. Written in steps and at
        transitions (`functions.domain.spend.job_item_spend_due`), and when the job ends; every
        run's figure goes on the current generation (`record_supervised`). False when it was
        not written (no such job, or a higher spend is stored)."""
        return self._table.update(
            job_key(job_id),
            UpdateExpression="SET spent_usd = :s",
            ConditionExpression="attribute_exists(pk) AND "
            "(attribute_not_exists(spent_usd) OR spent_usd < :s)",
            ExpressionAttributeValues=serialize({":s": spent_usd}),
        )

    def record_unrecorded_instances(
        self, job_id: str, sightings: Iterable[UnrecordedInstance]
    ) -> bool:
        """Sightings of the job's instances that no generation records (each under its id, so
        the cost of an instance destroyed since stays counted). False if no such job."""
        fields = {str(s.instance_id): s.model_dump(mode="json") for s in sightings}
        if not fields:
            return True
        key = job_key(job_id)
        if not self._table.update(  # the map, for jobs stored before it existed
            key,
            UpdateExpression="SET unrecorded_instances = if_not_exists(unrecorded_instances, :e)",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues=serialize({":e": {}}),
        ):
            return False
        names = {"#m": "unrecorded_instances"}
        values: dict[str, Any] = {}
        sets = []
        for i, (instance_id, sighting) in enumerate(fields.items()):
            names[f"#i{i}"] = instance_id
            values[f":i{i}"] = sighting
            sets.append(f"#m.#i{i} = :i{i}")
        return self._table.update(
            key,
            UpdateExpression="SET " + ", ".join(sets),
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=serialize(values),
        )

    def record_incident(self, job_id: str, *, at: float, reason: str, generation: int) -> bool:
        """A replace was started at `at` for `reason`, ending `generation`: the heartbeat API
        measures detection → training resumed from it. False if no such job."""
        fields = {"incident_at": at, "incident_reason": reason, "incident_generation": generation}
        return self._table.set_fields(job_key(job_id), fields)

    def record_host_failure(self, machine_id: int, *, failure: str, kind: str, now: float) -> bool:
        """Remember that `machine_id` failed a job generation, and add one blame to its
        decaying weight (`functions/domain/blame.py`). `failure` (`<job>:g<n>`) goes into a
        string set, and the write is conditional on it not being there yet and on the weight
        read, so overlapping monitor runs count one failure once. False when it was counted
        already."""
        for _attempt in range(BLAME_WRITE_ATTEMPTS):
            item = self._table.get(host_key(machine_id))
            if item is not None and failure in item.get("failures", ()):
                return False
            reputation = as_reputation(item) if item is not None else None
            values: dict[str, Any] = {
                ":f": {"SS": [failure]},
                ":m": {"N": str(machine_id)},
                ":now": serialize_value(now),
                ":blame": serialize_value(blamed_again(reputation, now)),
            }
            condition = "attribute_not_exists(pk)"
            if item is not None:
                condition = "NOT contains(failures, :fs) AND "
                values[":fs"] = serialize_value(failure)
                if "blame_at" in item:
                    condition += "blame_at = :seen"
                    values[":seen"] = serialize_value(item["blame_at"])
                else:
                    condition += "attribute_not_exists(blame_at)"
            if self._table.update(
                host_key(machine_id),
                UpdateExpression="ADD failures :f, #kind :f SET machine_id = :m, "
                "last_failure_at = :now, blame = :blame, blame_at = :now",
                ConditionExpression=condition,
                ExpressionAttributeNames={"#kind": f"{kind}_failures"},
                ExpressionAttributeValues=values,
            ):
                return True
        return False  # lost the race every time: another run wrote a blame meanwhile

    def host_reputations(self, machine_ids: Iterable[int]) -> dict[int, HostReputation]:
        """The reputation items of these machines (missing ones: never failed)."""
        ids = sorted(set(machine_ids))
        found: dict[int, HostReputation] = {}
        for start in range(0, len(ids), 100):  # BatchGetItem takes at most 100 keys
            keys = [serialize(host_key(i)) for i in ids[start : start + 100]]
            request: dict[str, Any] = {self.table_name: {"Keys": keys}}
            for item in self._table.batch_get(request)[self.table_name]:
                reputation = as_reputation(deserialize(item))
                found[reputation.machine_id] = reputation
        return found

    def first_sightings(self, instance_ids: Iterable[int]) -> dict[int, float]:
        """When each of these instances was first seen (those never recorded are missing)."""
        ids = sorted(set(instance_ids))
        found: dict[int, float] = {}
        for start in range(0, len(ids), 100):  # BatchGetItem takes at most 100 keys
            keys = [serialize(sighting_key(i)) for i in ids[start : start + 100]]
            request: dict[str, Any] = {self.table_name: {"Keys": keys, "ConsistentRead": True}}
            for item in self._table.batch_get(request)[self.table_name]:
                plain = deserialize(item)
                found[int(str(plain["pk"]).split("#", 1)[1])] = float(plain["first_seen"])
        return found

    def record_first_sighting(self, instance_id: int, at: float) -> bool:
        """The first sighting of an instance listed without a start date (kept if there is
        one already); it expires after a week."""
        return self._table.update(
            sighting_key(instance_id),
            UpdateExpression="SET first_seen = if_not_exists(first_seen, :at), #ttl = :ttl",
            ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE},
            ExpressionAttributeValues=serialize({":at": at, ":ttl": int(at + SIGHTING_TTL_S)}),
        )
