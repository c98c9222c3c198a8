"""Host-supplied text never drives the terminal: every control character and bidi control is
shown as an escape (tether_cli/terminal_text.py), at every print site of host data."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.paths import ROOT
from tether_cli import output
from tether_cli.demo import timeline_printer
from tether_cli.job_status import status_lines
from tether_cli.main import main
from tether_cli.terminal_text import json_visible, visible

ESC = "\x1b"
OSC52_BEL = ESC + "]52;c;cm0gLXJmIH4K\x07"  # writes "rm -rf ~" to the operator's clipboard
OSC52_ST = ESC + "]52;c;cm0gLXJmIH4K" + ESC + "\\"
CSI_7BIT = ESC + "[2J"  # clear the screen
CSI_8BIT = "\x9b2J"
RAW = ("\x1b", "\x9b", "\x07", "\x7f", "\u202e")


def assert_harmless(text: str) -> None:
    """Nothing a terminal obeys: no C0 but newline and tab, no DEL, no C1, no bidi control."""
    hidden = [c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]
    hidden += [c for c in text if "\u202a" <= c <= "\u202e" or "\u2066" <= c <= "\u2069"]
    hidden += [c for c in text if "\u200b" <= c <= "\u200f" or "\u2060" <= c <= "\u2064"]
    hidden += [c for c in text if c in "\u2028\u2029\ufeff"]
    assert hidden == [], text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (ESC, "\\x1b"),
        (CSI_7BIT + "red", "\\x1b[2Jred"),
        (CSI_8BIT + "red", "\\x9b2Jred"),
        (OSC52_BEL, "\\x1b]52;c;cm0gLXJmIH4K\\x07"),
        (OSC52_ST, "\\x1b]52;c;cm0gLXJmIH4K\\x1b\\"),
        ("\x00\x08\x0b\x0c\x7f", "\\x00\\x08\\x0b\\x0c\\x7f"),
        ("".join(chr(c) for c in range(0x80, 0xA0, 0x1F)), "\\x80\\x9f"),
        ("\x85 next line", "\\x85 next line"),
        ("invoice\u202egpj.exe", "invoice\\u202egpj.exe"),
        ("\u202a\u202b\u202c\u202d", "\\u202a\\u202b\\u202c\\u202d"),
        ("\u2066x\u2067y\u2068z\u2069", "\\u2066x\\u2067y\\u2068z\\u2069"),
        ("a\tb\r\nc", "a\\tb\\r\\nc"),
        # Invisible: they hide or split what is read (a zero-width space inside a job id).
        ("job\u200b-1\u200d\u200e\u200f", "job\\u200b-1\\u200d\\u200e\\u200f"),
        ("a\u2028b\u2029c\u2060\u2064\ufeff", "a\\u2028b\\u2029c\\u2060\\u2064\\ufeff"),
    ],
)
def test_every_control_is_shown_as_an_escape(text: str, shown: str) -> None:
    assert visible(text, keep_newlines=False) == shown
    assert_harmless(visible(text, keep_newlines=False))


def test_a_log_keeps_its_newlines_and_tabs_but_not_the_rest() -> None:
    log = f"step 1\tloss 2.3\nstep 2\r{OSC52_BEL}\n{CSI_8BIT}\n"
    shown = visible(log, keep_newlines=True)
    assert shown == "step 1\tloss 2.3\nstep 2\\r\\x1b]52;c;cm0gLXJmIH4K\\x07\n\\x9b2J\n"
    assert_harmless(shown)


def test_ordinary_text_is_unchanged() -> None:
    text = "ckpt-400 ≥ 3 GPUs: RTX 4090, 日本, C:\\path\\x1b, café, [bold]x[/bold], :fire:"
    assert visible(text, keep_newlines=False) == text
    assert visible(text, keep_newlines=True) == text


def test_json_stays_the_same_data_with_no_raw_control_in_it() -> None:
    data = {"message": f"{OSC52_BEL} {CSI_8BIT} \x7f \u202e é ≥", "n": 1}
    document = json_visible(json.dumps(data, ensure_ascii=False))
    assert_harmless(document)
    assert "é ≥" in document  # other text stays readable
    assert json.loads(document) == data


def test_print_json_escapes_what_the_encoder_leaves_raw(capsys: pytest.CaptureFixture[str]) -> None:
    data = {"reason": f"{OSC52_BEL}{CSI_8BIT}\u2067"}
    output.print_json(data)
    out = capsys.readouterr().out
    assert_harmless(out)
    assert json.loads(out) == data


def test_status_shows_a_hostile_timeline_and_reason_escaped() -> None:
    view = {
        "job_id": "tiny-cpu-1234abcd",
        "state": "FAILED",
        "state_reason": f"training exited 1: {CSI_7BIT}",
        "last_checkpoint": {"step": 4, "generation": 1},
        "host": {
            "generation": 1,
            "status": "running",
            "last_heartbeat": {"phase": "training", "at": 1.9e9, "gpu": {"available": True}},
        },
        "timeline": [
            {"at": 1.9e9, "kind": "checkpoints_misplaced", "message": f"paths {OSC52_BEL}"},
            {"at": 1.9e9, "kind": f"x{CSI_8BIT}", "message": "one\nstate     FINISHED"},
        ],
    }
    lines = status_lines(view, 1.9e9)
    for line in lines:
        assert_harmless(line)
        assert "\n" not in line  # a host's line break cannot forge a line
    text = "\n".join(lines)
    assert "state     FAILED: training exited 1: \\x1b[2J" in text
    assert "paths \\x1b]52;c;cm0gLXJmIH4K\\x07" in text
    assert "x\\x9b2J" in text and "one\\nstate     FINISHED" in text


def test_the_demo_timeline_shows_a_hostile_event_escaped() -> None:
    sink = io.StringIO()
    timeline_printer(output.console(sink))(1.0, f"dead{ESC}", f"replace: {OSC52_ST}\n{CSI_8BIT}")
    assert sink.getvalue() == (
        "   1.0s     dead\\x1b replace: \\x1b]52;c;cm0gLXJmIH4K\\x1b\\\\n\\x9b2J\n"
    )


def test_an_error_from_a_host_is_shown_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    output.error(f"jobs/x/g1/outputs/a{OSC52_BEL}: got 3 bytes")
    output.error_detail(f"path: {CSI_8BIT}")
    output.warn(f"skipped {ESC}[8m hidden")
    err = capsys.readouterr().err
    assert_harmless(err)
    assert err == (
        "tether: error: jobs/x/g1/outputs/a\\x1b]52;c;cm0gLXJmIH4K\\x07: got 3 bytes\n"
        "  path: \\x9b2J\n"
        "tether: warning: skipped \\x1b[8m hidden\n"
    )


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_styling_stays_and_the_data_is_escaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """rich's own colour sequences still reach a terminal; the host's sequence does not."""
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    sink = _Terminal()
    timeline_printer(output.console(sink))(1.0, "finished", f"done{OSC52_BEL}")
    printed = sink.getvalue()
    assert "\x1b[" in printed  # a style, written by rich
    assert "\\x1b]52;c;cm0gLXJmIH4K\\x07" in printed
    assert "\x1b]" not in printed and "\x07" not in printed


def test_the_demo_summary_shows_the_host_log_tail_and_evidence_escaped() -> None:
    from tether_cli.demo import _print_summary
    from tether_local.demo.summary import DemoSummary

    summary = DemoSummary(
        scenario="dead-twice",
        job_id="tiny-cpu-1234abcd",
        final_state="FINISHED",
        expected_state="FINISHED",
        incidents=[],
        spend_usd=0.01,
        budget_usd=1.0,
        invariants={"budget": True},
        invariant_details={"budget": f"checkpoint ckpt{OSC52_BEL}"},
        identical_to_uninterrupted=True,
        compared_step=10,
        wall_s=1.0,
        log_tail=f"step 9\tloss 1\n{CSI_8BIT}step 10\n",
    )
    sink = io.StringIO()
    _print_summary(output.console(sink), summary)
    printed = sink.getvalue()
    assert_harmless(printed)
    assert "ckpt\\x1b]52;c;cm0gLXJmIH4K\\x07" in printed
    assert "step 9  loss 1\n\\x9b2Jstep 10\n" in printed  # rich expands the tab


def test_the_rehearsal_report_shows_file_names_escaped() -> None:
    from tether_cli.rehearse import print_report
    from tether_local.demo.rehearse import RehearseReport

    report = RehearseReport(
        job="tiny-cpu",
        job_id="tiny-cpu-1234abcd",
        final_state="FINISHED",
        reference_step=10,
        compared_step=10,
        identical=False,
        differences=[f"weights{CSI_7BIT}.bin: sha256 differs"],
        not_compared=[f"training_args.bin{OSC52_ST}: pickled"],
        kills=[],
        reference_s=1.0,
        wall_s=1.0,
    )
    sink = io.StringIO()
    print_report(output.console(sink), report)
    printed = sink.getvalue()
    assert_harmless(printed)
    assert "  weights\\x1b[2J.bin: sha256 differs" in printed
    assert "not compared: training_args.bin\\x1b]52;c;cm0gLXJmIH4K\\x1b\\: pickled" in printed


def test_demo_and_rehearse_json_escape_what_pydantic_leaves_raw() -> None:
    from tether_local.demo.rehearse import RehearseReport

    report = RehearseReport(
        job="tiny-cpu",
        job_id="j",
        final_state="FINISHED",
        reference_step=1,
        compared_step=1,
        identical=True,
        differences=[f"a{CSI_8BIT}\u202e\x7f"],
        not_compared=[],
        kills=[],
        reference_s=1.0,
        wall_s=1.0,
    )
    assert "\x9b" in report.model_dump_json()  # the encoder leaves C1 raw…
    document = json_visible(report.model_dump_json())
    assert_harmless(document)  # …json_visible does not
    assert RehearseReport.model_validate_json(document) == report


def test_plan_shows_a_host_reported_gpu_name_and_location_escaped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    records = json.loads((ROOT / "tests" / "fixtures" / "offers_small.json").read_text())["offers"]
    for record in records:
        record["gpu_name"] += OSC52_BEL
        record["geolocation"] = f"Quebec{CSI_8BIT}"
    offers = tmp_path / "offers.json"
    offers.write_text(json.dumps(records))
    job = str(ROOT / "examples" / "tiny-cpu" / "job.yaml")
    assert main(["plan", job, "--offers", str(offers)]) == 0
    out = capsys.readouterr().out
    assert_harmless(out)
    assert "\\x1b]52;c;cm0gLXJmIH4K\\x07" in out and "Quebec\\x9b2J" in out
    assert main(["plan", job, "--offers", str(offers), "--json"]) == 0
    document = capsys.readouterr().out
    assert_harmless(document)
    assert OSC52_BEL in json.loads(document)["ranking"][0]["gpu"]
