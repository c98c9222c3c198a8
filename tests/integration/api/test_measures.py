"""What tether learns per job name, in the table (functions/adapters/measure_records.py) and
through `GET /measures?name=`, under moto: samples add up atomically, a generation's sample
counts once however often its end is recorded, start-ups file per machine and per GPU model."""

from __future__ import annotations

import math

import pytest

from functions.domain.pace import JobMeasures, PaceSample, StartupSample
from tests.integration.api.conftest import Api

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def pace(n: int, steps: float, seconds: float, gpu: str = "RTX 4090") -> PaceSample:
    return PaceSample(
        sample_id=f"qlora-7b-0123abcd:g{n}", gpu_name=gpu, gpu_count=1, steps=steps,
        seconds=seconds,
    )  # fmt: skip


def test_pace_samples_add_up_and_each_counts_once(api: Api) -> None:
    assert api.store.record_pace("qlora-7b", pace(1, 3000, 3600))
    assert not api.store.record_pace("qlora-7b", pace(1, 3000, 3600))  # a retried destroy
    assert api.store.record_pace("qlora-7b", pace(2, 1500.5, 1800.25, gpu="rtx 4090"))
    assert api.store.record_pace("qlora-7b", pace(3, 100, 600, gpu="RTX 3090"))
    assert api.store.record_pace("other-job", pace(4, 1, 600))

    measures = api.store.job_measures("qlora-7b")
    found = measures.pace_for("RTX 4090", 1)
    assert found is not None
    assert (found.steps, found.seconds, found.runs) == (4500.5, 5400.25, 2)
    assert found.steps_per_hour == pytest.approx(4500.5 / 5400.25 * 3600)
    other = measures.pace_for("RTX 3090", 1)
    assert other is not None and other.runs == 1
    assert measures.pace_for("RTX 4090", 2) is None


def test_the_calibration_sums_add_atomically_with_the_pace(api: Api) -> None:
    # Two runs on 4090s that knew the prior's steps and their dlperf, one rented before
    # calibration (neither known): only the first two add to the calibration sums.
    first = pace(1, 3000, 3600).model_copy(update={"prior_steps": 2000.0, "dlperf": 100.0})
    second = pace(2, 1500, 1800).model_copy(update={"prior_steps": 1000.0, "dlperf": 80.0})
    assert api.store.record_pace("qlora-7b", first)
    assert not api.store.record_pace("qlora-7b", first)  # a retried destroy adds nothing
    assert api.store.record_pace("qlora-7b", second)
    assert api.store.record_pace("qlora-7b", pace(3, 600, 600))

    found = api.store.job_measures("qlora-7b").pace_for("RTX 4090", 1)
    assert found is not None
    assert (found.steps, found.seconds, found.runs) == (5100, 6000, 3)
    assert (found.calibrated_steps, found.prior_steps, found.calibrated_runs) == (4500, 3000, 2)
    # Both ran at 3000 steps/h: x = log dlperf, y = log 3000.
    y = math.log(3000)
    assert found.fit_runs == 2
    assert found.fit_x == pytest.approx(math.log(100) + math.log(80))
    assert found.fit_xx == pytest.approx(math.log(100) ** 2 + math.log(80) ** 2)
    assert found.fit_y == pytest.approx(2 * y) and found.fit_xy == pytest.approx(found.fit_x * y)
    # How far the prior was off: 3000 / 4500 of the hours.
    assert found.factor() == pytest.approx(3000 / 4500)


def test_startup_files_per_machine_and_per_gpu_model(api: Api) -> None:
    for n, machine, seconds in ((1, 7, 300.0), (2, 7, 180.0), (3, 8, 600.0)):
        sample = StartupSample(
            sample_id=f"j-0123abcd:g{n}", gpu_name="RTX 4090", machine_id=machine,
            seconds=seconds,
        )  # fmt: skip
        assert api.store.record_startup("qlora-7b", sample)
        assert not api.store.record_startup("qlora-7b", sample)

    measures = api.store.job_measures("qlora-7b")
    by_machine = measures.startup_for("machine", "7")
    assert by_machine is not None and (by_machine.runs, by_machine.minutes) == (2, 4.0)  # 480 / 2
    model = measures.startup_for("gpu", "rtx 4090")
    assert model is not None and (model.runs, model.seconds) == (3, 1080.0)


def test_get_measures_returns_what_was_learned(api: Api) -> None:
    api.store.record_pace("qlora-7b", pace(1, 3000, 3600))
    api.store.record_startup(
        "qlora-7b",
        StartupSample(sample_id="j:g1", gpu_name="RTX 4090", machine_id=7, seconds=240),
    )
    reply = api.jobs("GET", "/measures", query={"name": "qlora-7b"})
    assert reply.status == 200, reply.body
    assert reply.body["name"] == "qlora-7b"
    assert reply.body["paces"] == [
        {"gpu_name": "RTX 4090", "gpu_count": 1, "steps": 3000.0, "seconds": 3600.0, "runs": 1,
         "calibrated_steps": 0.0, "prior_steps": 0.0, "calibrated_runs": 0, "fit_runs": 0,
         "fit_x": 0.0, "fit_xx": 0.0, "fit_y": 0.0, "fit_xy": 0.0, "steps_per_hour": 3000.0}
    ]  # fmt: skip
    kinds = {(s["kind"], s["key"], s["minutes"]) for s in reply.body["startups"]}
    assert kinds == {("gpu", "RTX 4090", 4.0), ("machine", "7", 4.0)}
    assert JobMeasures.model_validate(reply.body).pace_for("RTX 4090", 1) is not None


def test_get_measures_of_a_name_never_run_is_empty(api: Api) -> None:
    reply = api.jobs("GET", "/measures", query={"name": "never-ran"})
    assert reply.status == 200
    assert reply.body == {"name": "never-ran", "paces": [], "startups": []}
