"""The lifecycle learns from a generation it ends and prices the replacement with it, through
the synthesized state machine under moto (Vast simulated): the replace's destroy step files the
first host's pace and start-up under the job's name, and its provision step prices the steps
left at that pace (functions/domain/pace.py)."""

from __future__ import annotations

import pytest

from functions.domain.cost import download_minutes
from functions.domain.heartbeat_contract import CheckpointRef
from tests.integration.supervision_harness import Supervised


def test_a_replacement_is_priced_at_the_pace_its_predecessor_measured(sup: Supervised) -> None:
    # tiny-cpu: expected_hours 0.5 on any host, so the prior is 1000 steps / 0.5 h = 2000/h.
    job, first = sup.provisioned(total_steps=1000, resources={"gpu_names": ["RTX 3090"]})
    assert (first.gpu_name, first.gpu_count) == ("RTX 3090", 1)
    assert first.prior_steps_per_hour == pytest.approx(2000)
    assert first.inet_down_mbps is not None and first.inet_down_mbps > 0
    assert first.dlperf is not None and first.dlperf > 0  # where the host sits on the prior

    # The first step after the (fresh) start, 240 s after the rent; then 2400 steps in 30 min:
    # 4800 steps/h, within 4 × the prior.
    sup.clock.advance(240)
    sup.first_step(job.job_id, first)
    sup.clock.advance(1800)
    sup.heartbeat(job.job_id, 1, step=2400)
    ref = CheckpointRef(
        step=500, generation=1, manifest_key=f"jobs/{job.job_id}/g1/ckpt-500/manifest.json",
        manifest_sha256="0" * 64,
    )  # fmt: skip
    assert sup.store.record_checkpoints(
        job.job_id, 1, token_hash=first.token_hash, checkpoints=[ref], previous_version=0
    )

    result = sup.run("replace", job.job_id, 2, "test")
    assert result["status"] == "SUCCEEDED", result

    learned = sup.store.job_measures("tiny-cpu")
    pace = learned.pace_for("RTX 3090", 1)
    assert pace is not None and (pace.steps, pace.seconds, pace.runs) == (2400, 1800, 1)
    # The prior's 2000 steps/h over the same 30 min: 1000 steps, against 2400 measured.
    assert (pace.prior_steps, pace.calibrated_steps, pace.calibrated_runs) == (1000, 2400, 1)
    assert pace.fit_runs == 1
    fixed_s = 240 - download_minutes(0.1, first.inet_down_mbps) * 60
    by_machine = learned.startup_for("machine", str(first.machine_id))
    assert by_machine is not None and by_machine.seconds == pytest.approx(fixed_s)

    second = sup.store.get_generation(job.job_id, 2)
    assert second is not None and second.gpu_name == "RTX 3090"
    view = sup.store.get_job_view(job.job_id)
    assert view is not None
    rented = [e for e in view.events if e.kind == "rented"]
    assert len(rented) == 2
    data = max(rented, key=lambda e: e.at).data
    # 1000 − 500 steps left: the prior's 0.25 h × 1000 / 2400, how far it was off on the
    # 3090 (= 500 steps at the measured 4800 steps/h: the host is a 3090 like the first).
    assert data["hours_source"] == "measured" and data["hours_runs"] == 1
    assert data["expected_hours"] == pytest.approx(0.25 * 1000 / 2400)
    assert data["expected_hours"] == pytest.approx(500 / 4800)
    assert data["startup_source"] in ("machine", "gpu")
    assert data["startup_min"] == pytest.approx(fixed_s / 60)
    assert "from measured, 1 run(s)" in max(rented, key=lambda e: e.at).message

    # The first generation's own rent was priced with the prior: nothing was measured yet.
    first_data = min(rented, key=lambda e: e.at).data
    assert first_data["hours_source"] == "spec" and first_data["startup_source"] == "spec"
