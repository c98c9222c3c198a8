"""`tether plan` with `resources.market`: the bid, the outbid hazard and which market won.

The book and the job are tests/unit/domain/test_market.py's hand-computed case: on demand the
offer costs $1.8285, as a bid ($0.22/h) 1.417425 + 1.4217 × hazard ($1.559595 at 0.1/h).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.paths import ROOT
from tests.unit.domain.test_market import market_spec, offer_record
from tether_cli.main import main

QLORA = ROOT / "examples" / "qlora-7b" / "job.yaml"


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def offer(offer_id: int, **fields: Any) -> dict[str, Any]:
    return offer_record(offer_id, **({"geolocation": "Texas, US"} | fields))


def job_file(tmp_path: Path, **resources: Any) -> str:
    spec = market_spec(**resources)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def book(tmp_path: Path, *offers: dict[str, Any]) -> str:
    path = tmp_path / "offers.json"
    path.write_text(json.dumps({"offers": list(offers)}))
    return str(path)


def test_auto_table_says_which_market_won_each_offer_and_by_how_much(
    capsys: Any, tmp_path: Path
) -> None:
    # Offer 2 has no min_bid: on demand only, nothing to compare with.
    offers = book(tmp_path, offer(1), offer(2, min_bid=None, dph_base=0.5))
    code, out, err = run(capsys, "plan", job_file(tmp_path, market="auto"), "--offers", offers)
    assert code == 0, err
    header = out.splitlines()[1]
    assert "market" in header and "outbids" in header and "won by $" in header
    rows = [line.split("│") for line in out.splitlines() if line[:3] in {" 1 ", " 2 "}]
    first, second = ([cell.strip() for cell in row] for row in rows)
    assert first[1] == "1" and first[5] == "bid 0.220" and first[6] == "0.21"
    assert first[7] == "0.269"  # 1.8285 − 1.559595
    assert first[-1] == "1.560"
    assert second[1] == "2" and second[5] == "on-demand" and second[6] == "—" and second[7] == "—"
    assert "Market: auto. Bids are min_bid + 10%; outbid hazard 0.1/h (from " in out
    assert (
        "Market of #1: interruptible, bid $0.220/h (min_bid $0.200), 0.21 expected outbids "
        "($0.142); on-demand would cost $1.83 on this offer, $0.269 (15%) more." in out
    )
    assert "outbids $0.142 (0.21 expected outbids)." in out  # the breakdown of #1


def test_json_gives_market_bid_outbids_and_hazard(capsys: Any, tmp_path: Path) -> None:
    offers = book(tmp_path, offer(1), offer(2, min_bid=None, dph_base=0.5))
    job = job_file(tmp_path, market="auto")
    code, out, err = run(capsys, "plan", job, "--offers", offers, "--json")
    assert code == 0, err
    doc = json.loads(out)
    spec_hazard = {
        "source": "spec",
        "outbids": 0,
        "hours": 0.0,
        "detail": "from resources.outbid_hazard_per_hour; no outbids measured yet",
    }
    assert doc["market"] == {
        "requested": "auto",
        "bid_margin": 0.1,
        "hazard_per_hour": 0.1,
        "hazard_from": spec_hazard,
    }
    first, second = doc["ranking"]
    assert first["offer_id"] == 1
    assert first["market"] == "interruptible"
    assert first["bid_usd_per_hour"] == 0.22
    assert first["usd_per_hour"] == 0.22
    assert first["expected_outbids"] == 0.21
    assert first["hazard_per_hour"] == 0.1 and first["hazard_from"] == spec_hazard
    assert first["breakdown"]["outbid_usd"] == pytest.approx(0.1422, abs=1e-4)
    assert first["other_market"] == {
        "market": "on-demand",
        "expected_total_usd": 1.8285,
        "saving_usd": pytest.approx(0.2689, abs=1e-4),
    }
    assert second["market"] == "on-demand" and second["bid_usd_per_hour"] is None
    assert second["expected_outbids"] == 0 and second["hazard_from"] is None
    assert second["other_market"] is None


def test_on_demand_plans_as_before_and_says_so(capsys: Any, tmp_path: Path) -> None:
    offers = book(tmp_path, offer(1))
    code, out, err = run(capsys, "plan", job_file(tmp_path), "--offers", offers)
    assert code == 0, err
    assert "market" not in out.splitlines()[1]  # no column where every row is on demand
    assert "Market: on-demand (resources.market: auto would also price interruptible" in out
    code, out, _ = run(capsys, "plan", job_file(tmp_path), "--offers", offers, "--json")
    doc = json.loads(out)
    assert doc["market"]["requested"] == "on-demand" and doc["market"]["hazard_from"] is None
    row = doc["ranking"][0]
    assert (row["market"], row["bid_usd_per_hour"], row["expected_outbids"]) == (
        "on-demand",
        None,
        0,
    )
    assert row["expected_total_usd"] == 1.8285


def test_a_high_hazard_keeps_auto_on_demand(capsys: Any, tmp_path: Path) -> None:
    job = job_file(tmp_path, market="auto", outbid_hazard_per_hour=0.5)
    code, out, err = run(capsys, "plan", job, "--offers", book(tmp_path, offer(1)), "--json")
    assert code == 0, err
    row = json.loads(out)["ranking"][0]
    assert row["market"] == "on-demand" and row["expected_total_usd"] == 1.8285
    assert row["other_market"]["market"] == "interruptible"
    assert row["other_market"]["expected_total_usd"] == pytest.approx(2.1283, abs=1e-4)


def test_interruptible_without_any_min_bid_exits_3_naming_the_field(
    capsys: Any, tmp_path: Path
) -> None:
    offers = book(tmp_path, offer(1, min_bid=None), offer(2, min_bid=0))
    job = job_file(tmp_path, market="interruptible")
    code, _, err = run(capsys, "plan", job, "--offers", offers)
    assert code == 3
    assert "resources.market excluded the most (2 of 2 offers)" in err


def test_validate_says_the_market_when_it_is_not_on_demand(capsys: Any, tmp_path: Path) -> None:
    code, out, _ = run(capsys, "validate", job_file(tmp_path, market="auto", bid_margin=0.2))
    assert code == 0
    assert "auto (bid min_bid + 20%, 0.1 outbids/h expected)" in out
    code, out, _ = run(capsys, "validate", job_file(tmp_path))
    assert "bid" not in out


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("market", "spot", "resources.market: "),
        ("bid_margin", -0.1, "resources.bid_margin: "),
        ("bid_margin", "10%", "resources.bid_margin: "),
        ("outbid_hazard_per_hour", 11, "resources.outbid_hazard_per_hour: "),
        ("outbid_hazard_per_hour", -1, "resources.outbid_hazard_per_hour: "),
    ],
)
def test_bad_market_fields_exit_2_naming_the_path(
    capsys: Any, tmp_path: Path, field: str, value: Any, reason: str
) -> None:
    spec = yaml.safe_load(QLORA.read_text())
    spec["resources"][field] = value
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec))
    for argv in (["validate", str(bad)], ["plan", str(bad), "--offers", book(tmp_path, offer(1))]):
        code, _, err = run(capsys, *argv)
        assert code == 2
        assert reason in err


def test_a_wide_auto_table_is_not_cut_in_a_pipe(capsys: Any, tmp_path: Path) -> None:
    where = "Ho Chi Minh City, Vietnam, VN"
    offers = book(tmp_path, offer(1, geolocation=where), offer(2, min_bid=None, dph_base=0.5))
    code, out, err = run(capsys, "plan", job_file(tmp_path, market="auto"), "--offers", offers)
    assert code == 0, err
    table = out.splitlines()[:4]
    assert max(len(line) for line in table) > 140  # wider than a pipe's default width
    assert "…" not in "\n".join(table)
    assert where in table[3] and "expected total $" in table[1]


def test_on_real_records_auto_keeps_the_4090_on_demand(
    capsys: Any, shared_vast_offers: Path, tmp_path: Path
) -> None:
    spec = yaml.safe_load(QLORA.read_text())
    spec["resources"]["market"] = "auto"
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(spec))
    code, out, err = run(capsys, "plan", str(job), "--offers", str(shared_vast_offers), "--json")
    assert code == 0, err
    by_id = {row["offer_id"]: row for row in json.loads(out)["ranking"]}
    # 16014632's min_bid is its on-demand price: a bid at +10 % loses. 51934649's is 0.83 of it.
    assert by_id[16014632]["market"] == "on-demand"
    assert by_id[16014632]["other_market"]["market"] == "interruptible"
    assert by_id[51934649]["market"] == "interruptible"
    assert by_id[51934649]["bid_usd_per_hour"] == pytest.approx(0.3667, abs=1e-4)
