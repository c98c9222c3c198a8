"""The health policy as a table: every transition, with its boundaries
(docs/architecture.md#health-policy)."""

from __future__ import annotations

import pytest

from functions.domain.health import (
    ACTIONS,
    RULES,
    Health,
    HealthInput,
    InstanceView,
    Verdict,
    classify,
)
from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.jobspec import Policy
from tests.unit.domain.health_facts import NOW, gpu, hb, inst, starting, state

CASES: list[tuple[str, HealthInput, Health]] = [
    ("baseline", state(), Health.HEALTHY),
    # starting, and stuck starting
    ("just rented, Vast null", starting(5, instance=inst(None)), Health.STARTING),
    ("loading 1199 s", starting(1199), Health.STARTING),
    ("loading 1200 s", starting(1200), Health.DEAD),
    ("restoring 1199 s", starting(1199, heartbeat=hb(phase="restoring")), Health.STARTING),
    ("restoring 1200 s", starting(1200, heartbeat=hb(phase="restoring")), Health.DEAD),
    ("agent starting 1200 s", starting(1200, heartbeat=hb(phase="starting")), Health.DEAD),
    # heartbeat timeout
    ("heartbeat 179 s old", state(heartbeat=hb(age=179)), Health.HEALTHY),
    ("heartbeat 180 s old", state(heartbeat=hb(age=180)), Health.DEAD),
    (
        "heartbeat stale while Vast list failed",
        state(heartbeat=hb(age=180), instance=InstanceView(listed=False)),
        Health.DEAD,
    ),
    # instance status
    ("instance gone", state(instance=InstanceView(present=False)), Health.DEAD),
    ("exited", state(instance=inst("exited")), Health.DEAD),
    ("offline", state(instance=inst("offline")), Health.DEAD),
    ("stopped", state(instance=inst("stopped")), Health.DEAD),
    ("frozen is left to the timeouts", state(instance=inst("frozen")), Health.HEALTHY),
    ("rebooting is left to the timeouts", state(instance=inst("rebooting")), Health.HEALTHY),
    (
        "Vast list failed: one failed call never kills",
        state(instance=InstanceView(listed=False, present=False)),
        Health.HEALTHY,
    ),
    (
        "Vast list failed hides a stale exited status",
        state(instance=InstanceView(listed=False, actual_status="exited")),
        Health.HEALTHY,
    ),
    (
        "unknown 179 s before any heartbeat",
        starting(300, instance=inst("unknown", unknown_for_s=179)),
        Health.STARTING,
    ),
    (
        "unknown 180 s before any heartbeat",
        starting(300, instance=inst("unknown", unknown_for_s=180)),
        Health.DEAD,
    ),
    (
        "unknown for hours but the agent heartbeats",
        state(instance=inst("unknown", unknown_for_s=36_000)),
        Health.HEALTHY,
    ),
    # hung: GPU unresponsive
    (
        "GPU unresponsive 299 s",
        state(heartbeat=hb(gpu=gpu(None, responsive=False, unresponsive_s=299))),
        Health.HEALTHY,
    ),
    (
        "GPU unresponsive 300 s",
        state(heartbeat=hb(gpu=gpu(None, responsive=False, unresponsive_s=300))),
        Health.HUNG,
    ),
    (
        "GPU unresponsive during the final upload",
        state(
            heartbeat=hb(
                phase="uploading",
                exit_code=0,
                gpu=gpu(None, responsive=False, unresponsive_s=900),
            )
        ),
        Health.HEALTHY,
    ),
    # hung: no progress with the GPU idle
    (
        "no progress 1799 s, GPU 0 %",
        state(progress_at=NOW - 1799, heartbeat=hb(gpu=gpu(0))),
        Health.HEALTHY,
    ),
    (
        "no progress 1800 s, GPU 0 %",
        state(progress_at=NOW - 1800, heartbeat=hb(gpu=gpu(0))),
        Health.HUNG,
    ),
    (
        "no progress 1800 s, GPU exactly at the idle line",
        state(progress_at=NOW - 1800, heartbeat=hb(gpu=gpu(5))),
        Health.HUNG,
    ),
    (
        "no progress 1800 s, GPU just above the idle line",
        state(progress_at=NOW - 1800, heartbeat=hb(gpu=gpu(5.1))),
        Health.HEALTHY,
    ),
    (
        "no progress for hours on a CPU host: never hung by utilisation",
        state(progress_at=NOW - 36_000, heartbeat=hb(gpu=GpuProbe(available=False))),
        Health.HEALTHY,
    ),
    (
        "no progress, no utilisation reading",
        state(progress_at=NOW - 36_000, heartbeat=hb(gpu=gpu(None))),
        Health.HEALTHY,
    ),
    (
        "no progress, no GPU probe at all",
        state(progress_at=NOW - 36_000, heartbeat=hb(gpu=None)),
        Health.HEALTHY,
    ),
    (
        "never reported a step, 1799 s since rent, GPU idle",
        state(started_at=NOW - 1799, progress_at=None, heartbeat=hb(step=None, gpu=gpu(0))),
        Health.HEALTHY,
    ),
    (
        "never reported a step, 1800 s since rent, GPU idle",
        state(started_at=NOW - 1800, progress_at=None, heartbeat=hb(step=None, gpu=gpu(0))),
        Health.HUNG,
    ),
    (
        "no progress while restoring is not hung",
        starting(600, progress_at=None, heartbeat=hb(phase="restoring", gpu=gpu(0))),
        Health.STARTING,
    ),
    # hung: GPU idleness over the whole no-progress window (gpu_busy_at: last busy heartbeat)
    (
        "no progress 1800 s, idle now, busy 1799 s ago: inside the window",
        state(progress_at=NOW - 1800, gpu_busy_at=NOW - 1799, heartbeat=hb(gpu=gpu(0))),
        Health.HEALTHY,
    ),
    (
        "no progress 1800 s, idle now, last busy 1800 s ago: idle the whole window",
        state(progress_at=NOW - 1800, gpu_busy_at=NOW - 1800, heartbeat=hb(gpu=gpu(0))),
        Health.HUNG,
    ),
    (
        "no progress 3600 s, busy until 10 min ago",
        state(progress_at=NOW - 3600, gpu_busy_at=NOW - 600, heartbeat=hb(gpu=gpu(0))),
        Health.HEALTHY,
    ),
    # hung: the no-progress clock starts with the first training heartbeat
    (
        "no step ever, 3600 s since rent, training for 1799 s, GPU idle",
        state(
            started_at=NOW - 3600,
            training_started_at=NOW - 1799,
            progress_at=None,
            heartbeat=hb(step=None, gpu=gpu(0)),
        ),
        Health.HEALTHY,
    ),
    (
        "no step ever, training for 1800 s, GPU idle",
        state(
            started_at=NOW - 3600,
            training_started_at=NOW - 1800,
            progress_at=None,
            heartbeat=hb(step=None, gpu=gpu(0)),
        ),
        Health.HUNG,
    ),
    (
        "a step seen while restoring, long before training began",
        state(
            started_at=NOW - 3600,
            progress_at=NOW - 3500,
            training_started_at=NOW - 1000,
            heartbeat=hb(gpu=gpu(0)),
        ),
        Health.HEALTHY,
    ),
    # over budget (spend by the next monitor run), $60/h × 60 s = $1
    ("lands exactly on the cap", state(spend_usd=99.0, usd_per_hour=60.0), Health.HEALTHY),
    ("passes the cap", state(spend_usd=99.01, usd_per_hour=60.0), Health.OVER_BUDGET),
    ("already past the cap, free host", state(spend_usd=100.5, usd_per_hour=0), Health.OVER_BUDGET),
    (
        "over budget while starting",
        starting(30, spend_usd=99.5, usd_per_hour=60.0),
        Health.OVER_BUDGET,
    ),
    # finished
    ("finished", state(heartbeat=hb(phase="finished", exit_code=0)), Health.FINISHED),
    (
        "exit 0 but final upload still running",
        state(heartbeat=hb(phase="uploading", exit_code=0)),
        Health.HEALTHY,
    ),
    (
        "finished with its outputs recorded",
        state(
            heartbeat=hb(phase="finished", exit_code=0, outputs_recorded=True),
            outputs_required=True,
        ),
        Health.FINISHED,
    ),
    (
        "finished, the spec names outputs, none recorded yet",
        state(heartbeat=hb(phase="finished", exit_code=0), outputs_required=True),
        Health.HEALTHY,
    ),
    (
        "finished without recorded outputs, heartbeats stopped",
        state(heartbeat=hb(age=180, phase="finished", exit_code=0), outputs_required=True),
        Health.DEAD,
    ),
    (
        "finished without recorded outputs, host stopped",
        state(
            heartbeat=hb(phase="finished", exit_code=0),
            instance=inst("stopped"),
            outputs_required=True,
        ),
        Health.DEAD,
    ),
    (
        "outputs recorded but the training exited 1",
        state(
            heartbeat=hb(phase="failed", exit_code=1, outputs_recorded=True),
            outputs_required=True,
        ),
        Health.CRASHED,
    ),
    # crashed / failed
    ("exit 1, 0 of 3 restarts", state(heartbeat=hb(phase="failed", exit_code=1)), Health.CRASHED),
    (
        "exit 1, 2 of 3 restarts",
        state(heartbeat=hb(phase="failed", exit_code=1), restarts_so_far=2),
        Health.CRASHED,
    ),
    (
        "exit 1, 3 of 3 restarts",
        state(heartbeat=hb(phase="failed", exit_code=1), restarts_so_far=3),
        Health.FAILED,
    ),
    (
        "exit 137 with max_restarts 0",
        state(
            heartbeat=hb(phase="uploading", exit_code=137),
            policy=Policy(max_restarts=0),
        ),
        Health.FAILED,
    ),
    (
        "phase failed without an exit code",
        state(heartbeat=hb(phase="failed"), restarts_so_far=3),
        Health.FAILED,
    ),
    # precedence
    (
        "finished beats the host stopping itself",
        state(heartbeat=hb(phase="finished", exit_code=0), instance=inst("stopped")),
        Health.FINISHED,
    ),
    (
        "finished beats over budget",
        state(heartbeat=hb(phase="finished", exit_code=0), spend_usd=100.5),
        Health.FINISHED,
    ),
    (
        "failed beats over budget",
        state(heartbeat=hb(phase="failed", exit_code=2), restarts_so_far=3, spend_usd=100.5),
        Health.FAILED,
    ),
    (
        "over budget beats hung",
        state(spend_usd=100.5, progress_at=NOW - 3600, heartbeat=hb(gpu=gpu(0))),
        Health.OVER_BUDGET,
    ),
    (
        "over budget beats dead",
        state(spend_usd=100.5, instance=inst("exited")),
        Health.OVER_BUDGET,
    ),
    (
        "over budget beats crashed",
        state(spend_usd=100.5, heartbeat=hb(phase="failed", exit_code=1)),
        Health.OVER_BUDGET,
    ),
    (
        "dead beats crashed",
        state(heartbeat=hb(phase="failed", exit_code=1), instance=inst("offline")),
        Health.DEAD,
    ),
    (
        "dead beats hung",
        state(heartbeat=hb(age=200, gpu=gpu(0)), progress_at=NOW - 3600),
        Health.DEAD,
    ),
    (
        "crashed beats hung",
        state(
            heartbeat=hb(exit_code=1, gpu=gpu(0, responsive=False, unresponsive_s=900)),
        ),
        Health.CRASHED,
    ),
]


@pytest.mark.parametrize(("name", "facts", "expected"), CASES, ids=[c[0] for c in CASES])
def test_classify(name: str, facts: HealthInput, expected: Health) -> None:
    verdict = classify(facts)
    assert verdict.health is expected, verdict.reason
    assert verdict.reason


def test_reasons_name_the_numbers() -> None:
    assert "180 s" in classify(state(heartbeat=hb(age=180))).reason
    assert "exited" in classify(state(instance=inst("exited"))).reason
    over = classify(state(spend_usd=99.5, usd_per_hour=60.0)).reason
    assert "$100.00" in over and "$100.50" in over
    assert "(1 of 3)" in classify(state(heartbeat=hb(phase="failed", exit_code=1))).reason
    assert (
        "code 1"
        in classify(state(heartbeat=hb(phase="failed", exit_code=1), restarts_so_far=3)).reason
    )


def test_actions_and_blame() -> None:
    assert set(ACTIONS) == set(Health)
    assert [h for h, _ in RULES] == list(dict.fromkeys(h for h, _ in RULES))  # each once
    # `overpriced` is the monitor's move check (functions/domain/move.py), not a rule.
    assert {h for h, _ in RULES} == set(Health) - {Health.OVERPRICED}
    moved = Verdict(health=Health.OVERPRICED, reason="moving saves 25%")
    assert (moved.action, moved.blames_host) == ("replace", False)
    dead = classify(state(instance=inst("exited")))
    assert (dead.action, dead.blames_host) == ("replace", True)
    crashed = classify(state(heartbeat=hb(phase="failed", exit_code=1)))
    assert (crashed.action, crashed.blames_host) == ("replace", False)
    assert classify(state(spend_usd=100.5)).action == "stop"
    assert classify(state()).action == "none"


def test_custom_policy_thresholds_are_used() -> None:
    policy = Policy(heartbeat_timeout_s=60, lease_window_s=600)
    assert classify(state(policy=policy, heartbeat=hb(age=59))).health is Health.HEALTHY
    assert classify(state(policy=policy, heartbeat=hb(age=60))).health is Health.DEAD
