"""`tether validate` and `tether plan`: exit codes and output shapes, through main([...])."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from functions.domain.offer import Offer
from tests.paths import ROOT
from tether_cli import main as cli_main
from tether_cli.main import main

QLORA = str(ROOT / "examples" / "qlora-7b" / "job.yaml")
TINY = str(ROOT / "examples" / "tiny-cpu" / "job.yaml")
OFFERS = str(ROOT / "tests" / "fixtures" / "offers_small.json")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


# --- validate ----------------------------------------------------------------------------------


@pytest.mark.parametrize("job", [QLORA, TINY])
def test_validate_examples(capsys, job):
    code, out, err = run(capsys, "validate", job)
    assert code == 0
    first, *rest = out.strip().splitlines()
    assert first.startswith(f"OK {job}: job ")
    (shipped,) = rest  # `code: {dir: .}`: a second line says what submit would ship, the folder
    files = 3 if job == TINY else 4
    assert shipped.startswith(f"code: {Path(job).parent} would ship {files} files, ")
    assert err == ""


def test_validate_summary_says_what_the_job_asks_for(capsys):
    _, out, _ = run(capsys, "validate", QLORA)
    assert "'qlora-7b'" in out
    assert "1x RTX 4090 | RTX 3090 | RTX A5000 | +2 more" in out
    assert "3 h expected on RTX 4090," in out
    assert "budget $5" in out


def test_validate_prints_every_error_and_exits_2(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    text = Path(QLORA).read_text()
    text = text.replace("gpu_count: 1", "gpu_count: 0").replace("keep_last: 3", "keep_lst: 3")
    bad.write_text(text)
    code, out, err = run(capsys, "validate", str(bad))
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert lines[0] == f"tether: error: {bad} is not a valid job spec (2 problems):"
    assert "  resources.gpu_count: must be ≥ 1" in lines
    assert any(line.startswith("  checkpoint.keep_lst: unknown field") for line in lines)
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "no such file"),
        ("name: [unclosed\n", "YAML syntax error at line"),
        ("- just\n- a list\n", "must be a mapping of fields, got list"),
        ("", "must be a mapping of fields, got nothing"),
    ],
)
def test_validate_unusable_file_is_one_line(capsys, tmp_path, content, fragment):
    path = tmp_path / "job.yaml"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "validate", str(path))
    assert code == 2
    assert out == ""
    if content in (None, "name: [unclosed\n"):
        assert fragment in one_line(err)
    else:
        assert fragment in err


def test_validate_directory(capsys, tmp_path):
    code, _, err = run(capsys, "validate", str(tmp_path))
    assert code == 2
    assert "is a directory" in one_line(err)


# --- argument mistakes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["validate"], "the following arguments are required: JOB.yaml"),
        (["plan", QLORA, "--top", "0"], "--top: must be ≥ 1"),
        (["plan", QLORA, "--top", "five"], "--top: must be a whole number"),
        (["plan", QLORA, "--startup-min", "-3"], "--startup-min: must be between 0 and 1440"),
        (["plan", QLORA, "--colour"], "unrecognized arguments: --colour"),
        (["launch"], "invalid choice: 'launch'"),
    ],
)
def test_argument_mistakes_exit_2_with_one_line(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    line = one_line(err)
    assert line.startswith("tether")
    assert fragment in line


def test_no_command_prints_help_and_exits_2(capsys):
    code, _, err = run(capsys)
    assert code == 2
    assert "validate" in err and "plan" in err


def test_help_exits_0(capsys):
    code, out, _ = run(capsys, "plan", "--help")
    assert code == 0
    assert "--offers FILE" in out


def test_unexpected_failure_is_one_line_exit_1(capsys, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("tether_cli.plan.plan_job", explode)
    code, out, err = run(capsys, "plan", QLORA, "--offers", OFFERS)
    assert code == 1
    assert out == ""
    assert one_line(err) == "tether: error: unexpected RuntimeError: boom"


# --- plan: table -------------------------------------------------------------------------------


def test_plan_table_ranks_by_total_and_shows_the_saving(capsys):
    code, out, err = run(capsys, "plan", QLORA, "--offers", OFFERS)
    assert code == 0, err
    assert err == ""
    for header in (
        "offer",
        "GPU",
        "location",
        "$/h",
        "start-up min",
        "traffic $",
        "expected total",
    ):
        assert header in out
    rows = [line for line in out.splitlines() if line.strip()[:2] in {"1 ", "2 ", "3 "}]
    assert [row.split()[2] for row in rows] == ["1002", "1003", "1001"]
    assert "1x RTX 3090 (cheapest $/h)" in rows[2]
    assert "Texas, US" in rows[0]
    assert "Cheapest by $/h: offer 1001" in out
    assert "offer 1002 saves $" in out
    assert "Recommended checkpoint interval:" in out
    assert "3 qualifying offers (8 considered" in out


def test_plan_top_limits_rows(capsys):
    code, out, _ = run(capsys, "plan", TINY, "--offers", OFFERS, "--top", "2")
    assert code == 0
    assert "top 2 of 5 qualifying offers" in out


# --- plan: JSON --------------------------------------------------------------------------------


def plan_json(capsys, *extra: str, job: str = QLORA) -> dict[str, Any]:
    code, out, err = run(capsys, "plan", job, "--offers", OFFERS, "--json", *extra)
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_plan_json_shape(capsys, monkeypatch):
    monkeypatch.delenv("TETHER_API_URL", raising=False)
    doc = plan_json(capsys)
    assert set(doc) == {
        "hours_basis",
        "measures",
        "ranking",
        "naive_choice",
        "checkpoint_interval_min",
        "market",
    }
    assert doc["hours_basis"] == {
        "expected_hours": 3,
        "reference_gpu": "RTX 4090",
        "gpu_count": 1,
        "total_steps": None,
    }
    assert doc["measures"]["source"] == "offline"
    assert [r["offer_id"] for r in doc["ranking"]] == [1002, 1003, 1001]
    for row in doc["ranking"]:
        assert set(row) == {
            "offer_id",
            "gpu",
            "usd_per_hour",
            "expected_total_usd",
            "expected_hours",
            "hours_from",
            "startup_min",
            "startup_from",
            "breakdown",
            "market",
            "bid_usd_per_hour",
            "expected_outbids",
            "hazard_per_hour",
            "hazard_from",
            "other_market",
        }
        assert row["startup_from"] == {"source": "spec", "runs": 0, "fixed_min": 6.0}
        # The small book has no dlperf or total_flops: the job's 3 h on an RTX 4090, as given.
        assert row["expected_hours"] == 3
        assert row["hours_from"] == {
            "source": "spec",
            "runs": 0,
            "detail": "as given: the offer has no dlperf or total_flops; hours on 1x RTX 4090",
        }
        assert set(row["breakdown"]) == {
            "compute_usd",
            "startup_usd",
            "download_usd",
            "upload_usd",
            "interruption_usd",
            "outbid_usd",
        }
        assert row["expected_total_usd"] == pytest.approx(sum(row["breakdown"].values()), abs=1e-3)
    assert doc["ranking"][0]["gpu"] == "1x RTX 4090"
    assert doc["naive_choice"] == {
        "offer_id": 1001,
        "expected_total_usd": doc["ranking"][2]["expected_total_usd"],
    }
    assert doc["checkpoint_interval_min"] > 0


def test_plan_json_top_and_startup_override(capsys):
    base = plan_json(capsys)
    quick = plan_json(capsys, "--top", "1", "--startup-min", "0")
    assert len(quick["ranking"]) == 1
    assert (
        quick["ranking"][0]["breakdown"]["startup_usd"]
        < base["ranking"][0]["breakdown"]["startup_usd"]
    )


def test_plan_reads_a_bare_list_and_skips_bad_records(capsys, tmp_path):
    records = json.loads(Path(OFFERS).read_text())["offers"]
    path = tmp_path / "offers.json"
    path.write_text(json.dumps([*records, {"id": "not a number"}, "junk", {"gpu_name": "x"}]))
    code, out, err = run(capsys, "plan", QLORA, "--offers", str(path), "--json")
    assert code == 0
    assert json.loads(out)["ranking"][0]["offer_id"] == 1002
    assert "skipped 3 offer record(s)" in one_line(err)


def test_plan_warns_when_the_best_offer_is_over_budget(capsys, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(Path(QLORA).read_text().replace("budget_usd: 5", "budget_usd: 0.5"))
    code, _, err = run(capsys, "plan", str(job), "--offers", OFFERS)
    assert code == 0
    assert "over budget_usd $0.500" in one_line(err)


# --- plan: failures ----------------------------------------------------------------------------


def test_plan_with_no_qualifying_offer_exits_3_and_names_the_constraint(capsys, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(Path(QLORA).read_text().replace('"RTX 4090", "RTX 3090"', '"B200"'))
    code, out, err = run(capsys, "plan", str(job), "--offers", OFFERS)
    assert code == 3
    assert out == ""
    first = err.splitlines()[0]
    assert "no offer qualifies for qlora-7b" in first
    assert "resources.gpu_names excluded the most (8 of 8 offers)" in first
    assert "  resources.gpu_names: 8" in err.splitlines()
    assert "  resources.min_reliability: 1" in err.splitlines()


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "no such file"),
        ("{not json", "not JSON (line 1"),
        ('{"offers": {"a": 1}}', "got dict"),
        ("42", "got int"),
    ],
)
def test_plan_bad_offers_file_exits_2(capsys, tmp_path, content, fragment):
    path = tmp_path / "offers.json"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "plan", QLORA, "--offers", str(path))
    assert code == 2
    assert out == ""
    assert fragment in one_line(err)
    assert one_line(err).startswith(f"tether: error: --offers {path}")


def test_plan_bad_job_exits_2_before_reading_offers(capsys, tmp_path):
    code, _, err = run(capsys, "plan", str(tmp_path / "missing.yaml"), "--offers", "nowhere")
    assert code == 2
    assert "missing.yaml: no such file" in one_line(err)


def test_plan_live_needs_vast_api_key(capsys, monkeypatch):
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    code, _, err = run(capsys, "plan", QLORA)
    assert code == 2
    assert "VAST_API_KEY is not set" in one_line(err)


def fake_vast_module(search) -> types.ModuleType:
    """A stand-in for functions.adapters.vast with the agreed interface."""
    module = types.ModuleType("functions.adapters.vast")

    class VastError(Exception):
        def __init__(self, message: str) -> None:
            super().__init__(message)
            self.message = message

    class VastClient:
        def __init__(self, api_key: str) -> None:
            self.api_key = api_key

        def search_offers(self, resources, *, disk_gb=None):
            return search(self, resources, disk_gb)

    class AuthFailed(VastError):
        pass

    module.VastError = VastError  # type: ignore[attr-defined]
    module.AuthFailed = AuthFailed  # type: ignore[attr-defined]
    module.VastClient = VastClient  # type: ignore[attr-defined]
    return module


def test_plan_live_search_uses_the_key_and_the_job_disk(capsys, monkeypatch):
    calls = []
    offers = [Offer.model_validate(o) for o in json.loads(Path(OFFERS).read_text())["offers"]]

    def search(client, resources, disk_gb):
        calls.append((client.api_key, resources.gpu_count, disk_gb))
        return offers

    monkeypatch.setitem(sys.modules, "functions.adapters.vast", fake_vast_module(search))
    monkeypatch.setenv("VAST_API_KEY", "k-123")
    code, out, _ = run(capsys, "plan", QLORA, "--json")
    assert code == 0
    assert calls == [("k-123", 1, 60)]
    assert json.loads(out)["ranking"][0]["offer_id"] == 1002


def test_plan_live_vast_error_is_one_line_exit_1(capsys, monkeypatch):
    module = fake_vast_module(None)

    def search(client, resources, disk_gb):
        raise module.AuthFailed("invalid api key")

    module.VastClient.search_offers = lambda self, r, *, disk_gb=None: search(self, r, disk_gb)
    monkeypatch.setitem(sys.modules, "functions.adapters.vast", module)
    monkeypatch.setenv("VAST_API_KEY", "bad")
    code, out, err = run(capsys, "plan", QLORA)
    assert code == 1
    assert out == ""
    assert one_line(err) == (
        "tether: error: Vast search failed: invalid api key (check VAST_API_KEY)"
    )


def test_commands_register_through_modules():
    names = {cmd.__name__.rsplit(".", 1)[-1] for cmd in cli_main.COMMANDS}
    assert {"validate", "plan"} <= names


# --- the installed console script --------------------------------------------------------------


def test_console_script_runs(tmp_path):
    script = Path(sys.executable).parent / "tether"
    if not script.exists():
        pytest.skip("the tether console script is not installed in this environment")
    ok = subprocess.run(
        [str(script), "plan", QLORA, "--offers", OFFERS, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["ranking"][0]["offer_id"] == 1002
    bad = subprocess.run(
        [str(script), "validate", str(tmp_path / "none.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert bad.stderr.strip().endswith("none.yaml: no such file")


def test_deploy_finds_the_clone_from_any_folder_inside_it(tmp_path) -> None:
    from tether_cli import deploy

    assert deploy.source_root(ROOT / "tests" / "unit") == ROOT
    clone = tmp_path / "tether"
    for marker in deploy.SOURCE_MARKERS:
        (clone / marker).parent.mkdir(parents=True, exist_ok=True)
        (clone / marker).write_text("")
    (clone / "examples").mkdir()
    assert deploy.source_root(clone / "examples") == clone


def test_startup_min_reaches_the_recommended_interval(capsys) -> None:
    intervals = []
    for minutes in ("1", "30"):
        code, out, _ = run(
            capsys,
            "plan",
            str(ROOT / "examples" / "tiny-cpu" / "job.yaml"),
            "--offers",
            str(ROOT / "tests" / "fixtures" / "offers_small.json"),
            "--startup-min",
            minutes,
            "--json",
        )
        assert code == 0
        intervals.append(json.loads(out)["checkpoint_interval_min"])
    # One lost interval must cost less than one start-up: a longer start-up allows a longer one.
    assert intervals[1] > intervals[0] + 20
