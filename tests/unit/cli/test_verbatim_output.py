"""Data reaches the terminal byte for byte: rich reads neither markup (`[bold]`) nor emoji codes
(`:secret:` in a Secrets Manager ARN) in it, and does not break a long line (tether_cli/output.py).
The deploy outputs are checked the same way against moto's server in
tests/integration/cli/test_deploy_walkthrough.py."""

from __future__ import annotations

import io
import sys

import pytest

from tether_cli import output
from tether_cli.demo import timeline_printer
from tether_cli.job_status import outputs_line, status_lines
from tether_cli.main import main

ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tether/vast-api-key-AbCdEf"
REASON = "training exited 1: [bold]CUDA[/bold] error :fire: in [red]step[/]"


def test_a_line_with_an_arn_and_markup_is_printed_as_it_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    output.stdout_console().print(f"  VastSecretArn: {ARN}  reason: {REASON}")
    assert capsys.readouterr().out == f"  VastSecretArn: {ARN}  reason: {REASON}\n"


def test_a_table_cell_is_printed_as_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    table = output.table(None, [("JOB", "left"), ("STATE", "left")])
    table.add_row("job-[bold]1[/bold]", ":secret: RUNNING")
    output.stdout_console().print(table)
    out = capsys.readouterr().out
    assert "job-[bold]1[/bold]" in out and ":secret: RUNNING" in out


def test_the_timeline_prints_reasons_verbatim() -> None:
    sink = io.StringIO()
    timeline_printer(output.console(sink))(11.6, "dead", f"replace: {REASON}; secret {ARN}")
    assert sink.getvalue() == f"  11.6s         dead replace: {REASON}; secret {ARN}\n"


def test_status_prints_the_reason_verbatim(capsys: pytest.CaptureFixture[str]) -> None:
    view = {"job_id": "tiny-cpu-1234abcd", "state": "FAILED", "state_reason": REASON}
    for line in status_lines(view, 1.9e9):
        output.stdout_console().print(line)
    assert f"\nstate     FAILED: {REASON}\n" in capsys.readouterr().out


def test_an_error_message_is_printed_verbatim(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["secrets", "set", "vast", "--region", "eu-west-1"]) == 2
    assert capsys.readouterr().err == ("tether: error: stdin: expected 1 line(s): Vast API key\n")


@pytest.mark.parametrize(
    ("n_bytes", "shown"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (5 * 2**20, "5.0 MiB"),
        (3 * 2**40, "3072.0 GiB"),
    ],
)
def test_sizes_are_shown_in_binary_units(n_bytes: int, shown: str) -> None:
    assert output.size(n_bytes) == shown


def test_status_says_when_outputs_are_awaited() -> None:
    view = {"job_id": "j-1", "spec": {"outputs": {"dir": "/workspace/outputs"}}, "outputs": None}
    assert outputs_line(view) == (
        "outputs   none recorded yet (/workspace/outputs is uploaded when training ends)"
    )
