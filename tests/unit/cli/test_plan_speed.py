"""`tether plan` with hours per offer: the hours it used and where they came from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.paths import ROOT
from tether_cli.main import main

QLORA = ROOT / "examples" / "qlora-7b" / "job.yaml"
TINY = str(ROOT / "examples" / "tiny-cpu" / "job.yaml")
OFFERS = str(ROOT / "tests" / "fixtures" / "offers_small.json")


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def offer(offer_id: int, gpu: str, dph: float, **speed: float) -> dict[str, Any]:
    return {
        "id": offer_id,
        "machine_id": offer_id,
        "gpu_name": gpu,
        "num_gpus": 1,
        "gpu_ram": 24564,
        "disk_space": 200,
        "dph_base": dph,
        "inet_down": 1000,
        "inet_up": 1000,
        "reliability2": 0.999,
        "rentable": True,
        "rented": False,
        **speed,
    }


def book(tmp_path: Path) -> str:
    """A slow 3090 at 0.26 $/h, a 4090 at the reference's dlperf at 0.40 $/h, and a 4090 known
    only by its TFLOPS (half the reference's 82.4) at 0.20 $/h. Hours: the mean over the speed
    laws (functions/domain/speed_law.py), 3 h × Σ w_a (reference ÷ offer speed)^a."""
    path = tmp_path / "offers.json"
    offers = [
        offer(1, "RTX 3090", 0.26, dlperf=39.04),  # 3 h × mean 2.5^a = 4.52 h (7.5 if ∝ dlperf)
        offer(2, "RTX 4090", 0.40, dlperf=97.6),  # 3 h under every law
        offer(3, "RTX 4090", 0.20, total_flops=41.2),  # 3 h × mean 2^a = 4.05 h (6 if ∝ TFLOPS)
    ]
    path.write_text(json.dumps({"offers": offers}))
    return str(path)


def test_the_table_shows_the_hours_and_their_source(capsys: Any, tmp_path: Path) -> None:
    code, out, err = run(capsys, "plan", str(QLORA), "--offers", book(tmp_path))
    assert code == 0, err
    rows = {line.split()[2]: line for line in out.splitlines() if line[:3] in {" 1 ", " 2 ", " 3 "}}
    assert "4.52" in rows["1"] and "dlperf 39, law ^0.39" in rows["1"]
    assert "3.00" in rows["2"] and "dlperf 98, law ^0.39" in rows["2"]
    assert "4.05" in rows["3"] and "41 TFLOPS, law ^0.39" in rows["3"]
    assert "Hours: expected_hours 3 on 1x RTX 4090, scaled per offer by its dlperf" in out
    assert "under an uncertain law" in out
    # Start-up 6 min + 15 GB at 1000 Mbit/s (2 min) = 8 min on each. 3: 0.20 × 4.18 h = $0.84;
    # 1: 0.26 × 4.65 h = $1.21; 2: 0.40 × 3.133 h = $1.25. With hours ∝ dlperf the slow 3090
    # was last ($1.98); under the uncertain law it is second, ahead of the 4090.
    assert [line.split()[2] for line in rows.values()] == ["3", "1", "2"]


def test_json_gives_hours_and_source_per_offer(capsys: Any, tmp_path: Path) -> None:
    code, out, err = run(capsys, "plan", str(QLORA), "--offers", book(tmp_path), "--json")
    assert code == 0, err
    doc = json.loads(out)
    by_id = {row["offer_id"]: row for row in doc["ranking"]}
    assert by_id[1]["expected_hours"] == 4.516
    assert by_id[1]["hours_from"] == {
        "source": "prior",
        "runs": 0,
        "detail": "prior over the speed law (mean exponent 0.39): dlperf 39.0 vs 1x RTX 4090 "
        "ref 97.6",
    }
    assert by_id[3]["expected_hours"] == 4.049
    assert by_id[3]["hours_from"]["detail"] == (
        "prior over the speed law (mean exponent 0.39): 41.2 effective TFLOPS vs 1x RTX 4090 "
        "ref 82.4"
    )


def test_without_reference_gpu_the_plan_says_the_hours_are_on_any_host(capsys: Any) -> None:
    code, out, _ = run(capsys, "plan", TINY, "--offers", OFFERS)
    assert code == 0
    assert (
        "Hours: expected_hours 0.5 as given, on any host (no reference_gpu; set one to scale "
        "the hours by each host's speed)." in out
    )
    assert "as given" in out.splitlines()[3]  # the first row's "from" column


def test_an_unknown_reference_gpu_exits_2_naming_the_field(capsys: Any, tmp_path: Path) -> None:
    spec = yaml.safe_load(QLORA.read_text())
    spec["reference_gpu"] = "RTX 9999"
    bad = tmp_path / "job.yaml"
    bad.write_text(yaml.safe_dump(spec))
    for argv in (["validate", str(bad)], ["plan", str(bad), "--offers", OFFERS]):
        code, _, err = run(capsys, *argv)
        assert code == 2
        assert "reference_gpu: 'RTX 9999' is not a GPU model with a reference speed" in err


def test_on_real_records_the_example_rents_a_4090(capsys: Any, shared_vast_offers: Path) -> None:
    code, out, err = run(capsys, "plan", str(QLORA), "--offers", str(shared_vast_offers), "--json")
    assert code == 0, err
    doc = json.loads(out)
    best = doc["ranking"][0]
    assert best["gpu"] == "1x RTX 4090" and best["offer_id"] != 47957880
    assert best["hours_from"]["source"] == "prior"
    assert doc["naive_choice"]["offer_id"] == 47957880  # the 3090 at $0.257/h, now not chosen
