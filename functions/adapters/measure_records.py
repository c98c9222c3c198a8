"""`MeasureRecords`: the pace and start-up tether measured for each job name
(`functions/domain/pace.py`): a generation's samples added atomically when it ends, and all
of a name's figures in one query for the planner and `GET /measures`."""

from __future__ import annotations

from typing import Any

from functions.adapters.store_base import StoreBase
from functions.adapters.table import (
    measures_partition,
    pace_key,
    serialize,
    serialize_value,
    startup_key,
)
from functions.domain.pace import (
    JobMeasures,
    LearnedStartup,
    Pace,
    PaceSample,
    StartupKind,
    StartupSample,
    gpu_key,
    measures_of,
)

# Every sample names its generation in the item's `samples` set: a generation ended twice (a
# retried destroy) adds once. ADD is atomic, so concurrent writers never lose a sample.
# The calibration sums (absent on items stored before them: 0, uncalibrated).
_SUMS = ("calibrated_steps", "prior_steps", "fit_x", "fit_xx", "fit_y", "fit_xy")
_ONCE = "attribute_not_exists(samples) OR NOT contains(samples, :id)"


class MeasureRecords(StoreBase):
    """The `PACE#<name>` partition: paces per GPU model and count, start-ups per machine and
    per GPU model."""

    def record_pace(self, name: str, sample: PaceSample) -> bool:
        """Add a pace sample; False when this generation's sample was added already."""
        values: dict[str, Any] = {
            ":st": serialize_value(sample.steps),
            ":s": serialize_value(sample.seconds),
            ":one": serialize_value(1),
            ":ids": {"SS": [sample.sample_id]},
            ":id": serialize_value(sample.sample_id),
            ":g": serialize_value(sample.gpu_name),
            ":c": serialize_value(sample.gpu_count),
        }
        adds = ["steps :st", "#seconds :s", "runs :one", "samples :ids"]
        if sample.prior_steps is not None:  # what calibrating the prior needs (domain/pace.py)
            adds += ["calibrated_steps :st", "prior_steps :ps", "calibrated_runs :one"]
            values[":ps"] = serialize_value(sample.prior_steps)
        fit = sample.fit_sums()
        if fit.runs:
            adds += ["fit_runs :one", "fit_x :fx", "fit_xx :fxx", "fit_y :fy", "fit_xy :fxy"]
            for key, value in ((":fx", fit.x), (":fxx", fit.xx), (":fy", fit.y), (":fxy", fit.xy)):
                values[key] = serialize_value(value)
        return self._table.update(
            pace_key(name, gpu_key(sample.gpu_name), sample.gpu_count),
            UpdateExpression=f"ADD {', '.join(adds)} SET gpu_name = :g, gpu_count = :c",
            ConditionExpression=_ONCE,
            ExpressionAttributeNames={"#seconds": "seconds"},
            ExpressionAttributeValues=values,
        )

    def record_startup(self, name: str, sample: StartupSample) -> bool:
        """Add a start-up sample to its machine's and its GPU model's figures; False when both
        had it already."""
        keys: list[tuple[StartupKind, str, str]] = [
            ("gpu", gpu_key(sample.gpu_name), sample.gpu_name)
        ]
        if sample.machine_id is not None:
            keys.append(("machine", str(sample.machine_id), str(sample.machine_id)))
        added = False
        for kind, key, label in keys:
            added |= self._table.update(
                startup_key(name, kind, key),
                UpdateExpression="ADD #seconds :s, runs :one, samples :ids "
                "SET kind = :kind, label = :label",
                ConditionExpression=_ONCE,
                ExpressionAttributeNames={"#seconds": "seconds"},
                ExpressionAttributeValues=serialize(
                    {":s": sample.seconds, ":one": 1, ":id": sample.sample_id, ":kind": kind,
                     ":label": label}
                )
                | {":ids": {"SS": [sample.sample_id]}},
            )  # fmt: skip
        return added

    def job_measures(self, name: str) -> JobMeasures:
        """Every pace and start-up learned for `name` (none: empty)."""
        items = self._table.query_all(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues=serialize({":pk": measures_partition(name)}),
            ConsistentRead=True,
        )
        paces, startups = [], []
        for item in items:
            sk = str(item["sk"])
            if sk.startswith("GPU#"):
                paces.append(
                    Pace(
                        gpu_name=str(item["gpu_name"]), gpu_count=int(item["gpu_count"]),
                        steps=float(item.get("steps", 0)), seconds=float(item.get("seconds", 0)),
                        runs=int(item.get("runs", 0)),
                        **{f: float(item.get(f, 0)) for f in _SUMS},
                        calibrated_runs=int(item.get("calibrated_runs", 0)),
                        fit_runs=int(item.get("fit_runs", 0)),
                    )
                )  # fmt: skip
            elif sk.startswith("STARTUP#") and int(item.get("runs", 0)) > 0:
                startups.append(
                    LearnedStartup(
                        kind=item["kind"], key=str(item["label"]),
                        seconds=float(item.get("seconds", 0)), runs=int(item["runs"]),
                    )
                )  # fmt: skip
        return measures_of(name, paces, startups)
