"""`tether plan --local` reads what tether measured for the job's name from the local stack
(`GET /measures` over real HTTP, signed as the CLI signs local calls)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from functions.adapters.store import JobStore
from functions.domain.pace import PaceSample, StartupSample
from tests.e2e.conftest import tiny_spec
from tests.paths import ROOT
from tether_cli.api_client import write_local_state
from tether_cli.main import main
from tether_local.stack import LocalStack

pytestmark = pytest.mark.slow

OFFERS = str(ROOT / "tests" / "fixtures" / "offers_small.json")


def test_plan_local_prices_with_the_measures_of_the_stack(
    stack: LocalStack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = JobStore(stack.table_name())
    # 1000 steps in 30 min on one RTX 4090; machine 502 (offer 1002) started in 2 min.
    store.record_pace(
        "plan-local",
        PaceSample(sample_id="plan-local-0123abcd:g1", gpu_name="RTX 4090", gpu_count=1,
                   steps=1000, seconds=1800),
    )  # fmt: skip
    store.record_startup(
        "plan-local",
        StartupSample(sample_id="plan-local-0123abcd:g1", gpu_name="RTX 4090", machine_id=502,
                      seconds=120),
    )  # fmt: skip
    job = tmp_path / "job.json"
    job.write_text(json.dumps(tiny_spec(name="plan-local", total_steps=500, resources={})))
    monkeypatch.setenv("TETHER_LOCAL_STATE", str(write_local_state(stack.api_url, tmp_path / "s")))
    monkeypatch.delenv("TETHER_API_URL", raising=False)

    code = main(["plan", str(job), "--offers", OFFERS, "--local", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["measures"]["source"] == "api", doc["measures"]
    rows = {r["offer_id"]: r for r in doc["ranking"]}
    # 500 steps at 2000 steps/h: 0.25 h on the RTX 4090s; machine 502 its own 2 min.
    assert rows[1002]["expected_hours"] == 0.25
    assert rows[1002]["hours_from"]["source"] == "measured"
    assert rows[1002]["startup_from"] == {"source": "machine", "runs": 1, "fixed_min": 2.0}
