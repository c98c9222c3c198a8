"""`tether demo`'s fault scenarios end to end on one local stack: each asserts the invariants
(docs/architecture.md#invariants) through stored state (DynamoDB, the S3 stand-in) and
the Vast simulator's ledger."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from functions.adapters.store import JobStore
from tests.paths import ROOT
from tether_cli.local_ship import SHIPPER
from tether_cli.main import main
from tether_local.aws.deployed import Throttle
from tether_local.demo import DemoSummary, demo_stack_config, run_scenario
from tether_local.demo.job import DEMO_HEARTBEAT_BURST, DEMO_HEARTBEAT_RATE_PER_S
from tether_local.stack import LocalStack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(demo_stack_config(tmp_path_factory.mktemp("demo"))) as stack:
        yield stack


def _assert_sound(summary: DemoSummary) -> None:
    failed = {k: summary.invariant_details[k] for k, ok in summary.invariants.items() if not ok}
    assert not failed, failed
    assert all(summary.scenario_checks.values()), summary.scenario_checks
    assert summary.final_state == summary.expected_state, summary


def _generations(stack: LocalStack, job_id: str) -> list[int]:
    return [g.generation for g in JobStore(stack.table_name()).list_generations(job_id)]


def test_dead_twice_resumes_twice_and_ends_identical(demo_stack: LocalStack) -> None:
    summary = run_scenario("dead-twice", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert summary.identical_to_uninterrupted and summary.compared_step == 300
    assert [i.kind for i in summary.incidents] == ["dead", "dead"]
    assert _generations(demo_stack, summary.job_id) == [1, 2, 3]
    store = JobStore(demo_stack.table_name())
    for incident, number in zip(summary.incidents, (2, 3), strict=True):
        # Recovery ends at the replacement's first step after its restore, as the agent
        # reported it: after the verdict, the rent, the boot and the restore, and after the
        # process's own time to its first step (imports, building the model).
        g = store.get_generation(summary.job_id, number)
        assert g is not None and g.first_step_at is not None and g.resumed_started_at is not None
        start_to_step = g.first_step_at - g.resumed_started_at
        assert incident.first_step_after_start_s is not None
        assert incident.first_step_after_start_s == pytest.approx(start_to_step, abs=0.01)
        assert incident.first_step_after_start_s > 0
        assert incident.resumed_after_s is not None and incident.detected_after_s is not None
        assert incident.resumed_after_s >= incident.detected_after_s + start_to_step
        # it resumed at the checkpoint it restored; the steps lost are a lower bound
        restored = g.heartbeat.restored_checkpoint if g.heartbeat is not None else None
        assert restored is not None and g.resumed_step == restored.step
        assert incident.lost_steps is not None and incident.lost_steps_lower_bound
    # Each ended generation filed its start-up under the job's name, and the replacements were
    # priced with it: a learned start-up, not the spec's (functions/domain/pace.py). (Training
    # here is far shorter than a pace sample's five minutes: no pace is learned.)
    job = store.get_job(summary.job_id)
    assert job is not None
    learned = store.job_measures(job.name)
    assert sum(s.runs for s in learned.startups if s.kind == "gpu") >= 3
    view = store.get_job_view(summary.job_id)
    assert view is not None
    rents = sorted((e for e in view.events if e.kind == "rented"), key=lambda e: e.at)
    assert len(rents) == 3
    for n, rent in enumerate(rents):
        seen = {r.data["gpu_name"] for r in rents[:n]}
        if rent.data["gpu_name"] in seen:  # started on this model before: learned, not spec
            assert rent.data["startup_source"] in ("machine", "gpu"), rent.message


def test_zombie_is_superseded_never_billed_and_its_checkpoints_never_restored(
    demo_stack: LocalStack,
) -> None:
    """The zombie's key (still live) is refused (403) in g2's prefix and the job root; a
    complete checkpoint it plants in its own prefix at step 99,950 is never restored: g3
    restores g2's latest recorded one."""
    summary = run_scenario("zombie", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert summary.scenario_checks == {
        "zombie_stopped_itself": True,
        "zombie_never_billed": True,
        "zombie_key_refused_outside_its_prefix": True,
        "third_generation_restored_the_latest_recorded": True,
    }
    assert _generations(demo_stack, summary.job_id) == [1, 2, 3]
    g3 = JobStore(demo_stack.table_name()).get_generation(summary.job_id, 3)
    assert g3 is not None and g3.heartbeat is not None and g3.heartbeat.restored_checkpoint
    restored = g3.heartbeat.restored_checkpoint
    assert restored.generation == 2 and restored.step < 99_950
    assert summary.identical_to_uninterrupted and summary.compared_step == 600


def test_forged_manifests_are_skipped_and_the_real_checkpoint_restored(
    demo_stack: LocalStack,
) -> None:
    summary = run_scenario("forged-manifest", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert summary.scenario_checks == {
        "crafted_manifests_recorded": True,
        "old_key_refused_outside_its_prefix": True,
        "crafted_never_restored": True,
        "every_crafted_one_skipped_with_its_reason": True,
        "skips_on_the_timeline": True,
    }
    assert summary.identical_to_uninterrupted and summary.compared_step == 300
    store = JobStore(demo_stack.table_name())
    g2 = store.get_generation(summary.job_id, 2)
    assert g2 is not None and g2.heartbeat is not None and g2.heartbeat.restore is not None
    report = g2.heartbeat.restore
    assert report.outcome == "restored" and len(report.skipped) == 4
    view = store.get_job_view(summary.job_id, max_events=1000)
    assert view is not None
    (event,) = [e for e in view.events if e.kind == "restore_skipped"]
    assert "g2 restored step" in event.message and "malformed manifest" in event.message


def test_hung_gpu_is_replaced(demo_stack: LocalStack) -> None:
    summary = run_scenario("hung-gpu", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert summary.identical_to_uninterrupted
    assert summary.incidents[0].detected_after_s is not None


def test_hung_gpu_through_the_real_nvml_probe_is_replaced(demo_stack: LocalStack) -> None:
    summary = run_scenario("hung-gpu-real-probe", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert summary.scenario_checks == {
        "probed_through_nvml": True,
        "nvml_reading_before_the_fault": True,
        "hang_seen_by_the_probe_deadline": True,
    }
    assert [i.kind for i in summary.incidents] == ["hung"]
    assert _generations(demo_stack, summary.job_id) == [1, 2]
    assert summary.identical_to_uninterrupted
    # The next scenario's hosts are back on the fake probe.
    assert demo_stack.hosts is not None and demo_stack.hosts.gpu == "fake-probe"


def test_no_progress_with_idle_gpu_is_replaced(demo_stack: LocalStack) -> None:
    summary = run_scenario("no-progress", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert _generations(demo_stack, summary.job_id) == [1, 2]


def test_supervisor_dead_host_stops_itself_within_the_lease(demo_stack: LocalStack) -> None:
    summary = run_scenario("supervisor-dead", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert summary.scenario_checks["host_stopped_itself"]
    assert summary.scenario_checks["no_gpu_billing_after_stop"]
    assert summary.identical_to_uninterrupted


def test_monitor_crash_renews_no_lease_and_the_host_stops_itself(demo_stack: LocalStack) -> None:
    """Reproduction: a monitor failing after its first step wrote its pulse
    first, so leases went on being renewed and the host never stopped. Now nothing is renewed,
    the host stops itself within its lease, and the job resumes when the monitor is fixed."""
    summary = run_scenario("monitor-crash", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert summary.scenario_checks == {
        "monitor_failed_while_broken": True,
        "no_evaluation_completed_while_broken": True,
        "host_stopped_itself": True,
        "no_gpu_billing_after_stop": True,
    }
    assert summary.identical_to_uninterrupted
    assert _generations(demo_stack, summary.job_id) == [1, 2]


def test_over_budget_stops_within_one_interval(demo_stack: LocalStack) -> None:
    summary = run_scenario("over-budget", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert summary.final_state == "OVER_BUDGET"
    assert summary.identical_to_uninterrupted  # the last checkpoint equals the reference's


def test_vast_flaky_api_still_replaces_once(demo_stack: LocalStack) -> None:
    summary = run_scenario("vast-flaky", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert _generations(demo_stack, summary.job_id) == [1, 2]
    assert not demo_stack.vast.pending_faults()


def test_vast_outage_during_stop_is_retried_and_the_host_destroyed_after_recovery(
    demo_stack: LocalStack,
) -> None:
    summary = run_scenario("vast-outage-during-stop", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert summary.final_state == "CANCELLED"
    assert summary.scenario_checks == {
        "first_attempt_failed_during_the_outage": True,
        "retried_as_a_new_attempt": True,
        "destroyed_within_two_intervals_of_recovery": True,
    }
    executions = demo_stack.aws.client("stepfunctions").list_executions(
        stateMachineArn=demo_stack.state_machine_arn()
    )["executions"]
    first = f"{summary.job_id}-stop-a1"
    stops = {
        e["name"]: e["status"]
        for e in executions
        if e["name"].startswith(f"{summary.job_id}-stop-a")
    }
    assert stops.pop(first) == "FAILED"
    assert "SUCCEEDED" in stops.values()  # a later attempt ended the job
    assert not demo_stack.vast.in_outage and demo_stack.vast.instances() == []


def test_crash_loop_fails_after_max_restarts(demo_stack: LocalStack) -> None:
    summary = run_scenario("crash-loop", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    job = JobStore(demo_stack.table_name()).get_job(summary.job_id)
    assert job is not None and job.state.value == "FAILED" and job.restarts == 2
    assert len(summary.incidents) == 3
    assert summary.log_tail and "crashing on purpose" in summary.log_tail


def test_heartbeat_flood_is_refused_and_replaces_no_host(demo_stack: LocalStack) -> None:
    """Junk heartbeats at three times the heartbeat route's throttle for 10 s
    (docs/architecture.md#bounded-input): every junk request a 4xx (429 past the bucket, as API
    Gateway answers), nothing stored, the agent's heartbeats never stopped for a heartbeat timeout,
    generation 1 trains to the end. The demo deploys a smaller heartbeat bucket than the
    template's default (`DEMO_HEARTBEAT_RATE_PER_S`), one this machine's junk can outrun."""
    assert demo_stack.front is not None
    assert demo_stack.front.throttle("POST /agent/heartbeat") == Throttle(
        rate_per_s=DEMO_HEARTBEAT_RATE_PER_S, burst=DEMO_HEARTBEAT_BURST
    )
    summary = run_scenario("heartbeat-flood", stack=demo_stack, shipper=SHIPPER)
    _assert_sound(summary)
    assert set(summary.scenario_checks) == {
        "junk_never_accepted",
        "no_5xx",
        "junk_throttled",
        "junk_stored_nothing",
        "agent_heartbeats_kept_up",
        "no_host_replaced_or_blamed",
    }
    assert summary.incidents == []
    assert _generations(demo_stack, summary.job_id) == [1]
    generation = JobStore(demo_stack.table_name()).list_generations(summary.job_id)[0]
    assert not generation.host_blamed
    assert summary.identical_to_uninterrupted


def test_cli_rejects_an_unknown_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--scenario", "nope"]) == 2
    assert "--scenario" in capsys.readouterr().err


def test_makefile_demo_runs_the_cli() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "$(VENV)/bin/tether demo" in makefile
