"""`tether plan` with what tether measured: the pace and start-up learned for the job's name,
read from `GET /measures` when an API is configured, shown per offer beside the hours; offline
it plans with the priors and says so; an API it cannot reach is one warning line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from botocore.credentials import ReadOnlyCredentials

from functions.domain.pace import JobMeasures, LearnedStartup, Pace, measures_json
from tests.paths import ROOT
from tether_cli import plan_measures
from tether_cli.api_client import TetherApi
from tether_cli.main import main

QLORA = ROOT / "examples" / "qlora-7b" / "job.yaml"
OFFERS = str(ROOT / "tests" / "fixtures" / "offers_small.json")
# Learned for qlora-7b: 6000 steps in 2 h on one RTX 4090 (two runs); machine 502 (offer
# 1002) started in 3 min twice; RTX 3090s in 10 min once.
LEARNED = JobMeasures(
    name="qlora-7b",
    paces=(Pace(gpu_name="RTX 4090", gpu_count=1, steps=6000, seconds=7200, runs=2),),
    startups=(
        LearnedStartup(kind="machine", key="502", seconds=360, runs=2),
        LearnedStartup(kind="gpu", key="RTX 3090", seconds=600, runs=1),
    ),
)


@pytest.fixture
def job_with_steps(tmp_path: Path) -> str:
    spec = yaml.safe_load(QLORA.read_text())
    spec["total_steps"] = 6000
    spec.pop("code")  # the copy has no folder to ship
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


@pytest.fixture
def api_answers(monkeypatch: pytest.MonkeyPatch) -> list[httpx.Request]:
    """A configured API that answers GET /measures with LEARNED; the requests it got."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=measures_json(LEARNED))

    def client(target: Any, **kwargs: Any) -> TetherApi:
        kwargs.pop("credentials")
        return TetherApi(
            target, credentials=ReadOnlyCredentials("AKID", "secret", None),
            transport=httpx.MockTransport(handle), **kwargs,
        )  # fmt: skip

    monkeypatch.setenv("TETHER_API_URL", "https://api.example.test/")
    monkeypatch.setattr(plan_measures, "TetherApi", client)
    return seen


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_measured_pace_and_startup_are_shown_per_offer(
    capsys: pytest.CaptureFixture[str], job_with_steps: str, api_answers: list[httpx.Request]
) -> None:
    code, out, err = run(capsys, "plan", job_with_steps, "--offers", OFFERS)
    assert code == 0, err
    assert err == ""
    assert [str(r.url) for r in api_answers] == ["https://api.example.test/measures?name=qlora-7b"]
    rows = {
        line.split()[2]: line for line in out.splitlines() if line.strip()[:2] in {"1 ", "2 ", "3 "}
    }
    # Offer 1002 (RTX 4090, machine 502): 6000 / 3000 steps/h = 2 h measured; start-up 3 min
    # of its own + 15 GB at its inet_down.
    assert "measured, 2 runs" in rows["1002"] and "2.00" in rows["1002"]
    assert "machine×2" in rows["1002"]
    assert "gpu×1" in rows["1003"] and "gpu×1" in rows["1001"]
    assert "Work: total_steps 6000" in out
    assert "Measured: 1 pace(s) and 2 start-up figure(s) for qlora-7b from TETHER_API_URL." in out


def test_json_says_where_hours_and_startup_came_from(
    capsys: pytest.CaptureFixture[str], job_with_steps: str, api_answers: list[httpx.Request]
) -> None:
    code, out, err = run(capsys, "plan", job_with_steps, "--offers", OFFERS, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["measures"]["source"] == "api"
    assert doc["hours_basis"]["total_steps"] == 6000
    rows = {r["offer_id"]: r for r in doc["ranking"]}
    assert rows[1002]["expected_hours"] == 2.0
    assert (rows[1002]["hours_from"]["source"], rows[1002]["hours_from"]["runs"]) == ("measured", 2)
    assert rows[1002]["startup_from"] == {"source": "machine", "runs": 2, "fixed_min": 3.0}
    assert rows[1001]["startup_from"] == {"source": "gpu", "runs": 1, "fixed_min": 10.0}
    assert rows[1001]["hours_from"]["source"] == "spec"  # no pace on a 3090, no dlperf


def test_no_measures_flag_skips_the_api(
    capsys: pytest.CaptureFixture[str], job_with_steps: str, api_answers: list[httpx.Request]
) -> None:
    code, out, _ = run(capsys, "plan", job_with_steps, "--offers", OFFERS, "--no-measures")
    assert code == 0
    assert api_answers == []
    assert "Measured: not asked (--no-measures): priors only." in out
    assert "measured," not in out


def test_offline_plans_with_priors_and_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, job_with_steps: str
) -> None:
    monkeypatch.delenv("TETHER_API_URL", raising=False)
    code, out, err = run(capsys, "plan", job_with_steps, "--offers", OFFERS)
    assert code == 0 and err == ""
    assert "Measured: none: no API configured (TETHER_API_URL or --local): priors only." in out
    assert "Start-up of #1:" in out and "the spec's expected_startup_min" in out


def test_an_unreachable_api_is_one_warning_and_the_plan_goes_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, job_with_steps: str
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def client(target: Any, **kwargs: Any) -> TetherApi:
        kwargs.pop("credentials")
        return TetherApi(
            target, credentials=ReadOnlyCredentials("AKID", "secret", None),
            transport=httpx.MockTransport(refuse), **kwargs,
        )  # fmt: skip

    monkeypatch.setenv("TETHER_API_URL", "https://api.example.test/")
    monkeypatch.setattr(plan_measures, "TetherApi", client)
    code, out, err = run(capsys, "plan", job_with_steps, "--offers", OFFERS, "--json")
    assert code == 0
    (line,) = err.strip().splitlines()
    assert "measures for qlora-7b unavailable (could not reach the tether API" in line
    assert "planning with priors" in line
    assert json.loads(out)["measures"]["source"] == "unavailable"
