"""`tether demo --scenario outbid` end to end: an interruptible host,
outbid and waited for, wins its machine back and trains on in the same generation; outbid
again, the wait runs out and it is replaced through the state machine; every invariant holds
and the weights are those of an uninterrupted run."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from functions.adapters.store import JobStore
from tether_cli.local_ship import SHIPPER
from tether_cli.main import main
from tether_local.demo import demo_stack_config, run_scenario
from tether_local.stack import LocalStack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(demo_stack_config(tmp_path_factory.mktemp("demo"))) as stack:
        yield stack


def test_outbid_waits_then_replaces_and_ends_identical(demo_stack: LocalStack) -> None:
    summary = run_scenario("outbid", stack=demo_stack, shipper=SHIPPER)

    failed = {k: summary.invariant_details[k] for k, ok in summary.invariants.items() if not ok}
    assert not failed, failed
    assert summary.scenario_checks == {
        "rented_interruptible_at_its_bid": True,
        "outbid_bills_no_gpu": True,
        "first_outbid_waited_for": True,
        "same_generation_trained_on_after_the_win": True,
        "second_outbid_replaced_after_the_wait": True,
        "outbids_counted": True,
    }
    assert summary.final_state == summary.expected_state
    assert summary.identical_to_uninterrupted and summary.compared_step == 300
    assert [i.kind for i in summary.incidents] == ["outbid"]
    store = JobStore(demo_stack.table_name())
    generations = store.list_generations(summary.job_id)
    assert [g.generation for g in generations] == [1, 2]
    assert all(g.interruptible and g.bid_usd_per_hour for g in generations)
    view = store.get_job_view(summary.job_id, max_events=1000)
    assert view is not None
    waits = [e for e in view.events if e.kind == "outbid_wait"]
    assert len(waits) == 2 and all("waiting up to" in e.message for e in waits)
    (replaced,) = [e for e in view.events if e.kind == "outbid"]
    assert "worth waiting" in replaced.message


def test_the_cli_runs_the_outbid_scenario_as_json(
    demo_stack: LocalStack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tether demo --scenario outbid --json` on the module's stack: the summary on stdout."""
    import tether_local.demo.driver as driver

    monkeypatch.setattr(driver, "LocalStack", lambda _config: _Borrowed(demo_stack))
    assert main(["demo", "--scenario", "outbid", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["scenario"] == "outbid" and all(summary["invariants"].values())


class _Borrowed:
    """The module's stack as a context manager that leaves it running."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack

    def __enter__(self) -> LocalStack:
        return self.stack

    def __exit__(self, *_exc: object) -> None:
        return None
