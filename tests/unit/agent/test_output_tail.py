"""The end of the training output the heartbeat carries after a non-zero exit (`exit_output`):
bounded in lines and characters, scrubbed of the agent's secrets, control characters kept as
data (the CLI shows them escaped), and within the wire model's bound."""

from __future__ import annotations

from tether_agent.logs import OutputTail, TeeLog
from tether_agent.protocol import MAX_EXIT_OUTPUT, MAX_EXIT_OUTPUT_LINES, GpuProbe, HeartbeatRequest

SECRET = "hf_s3cr3t-token-value"


def fed(*lines: bytes, **kw: object) -> OutputTail:
    tail = OutputTail(MAX_EXIT_OUTPUT_LINES, MAX_EXIT_OUTPUT, **kw)  # type: ignore[arg-type]
    for line in lines:
        tail.write(line)
    return tail


def test_only_the_last_lines_are_kept() -> None:
    tail = fed(*(f"line {i}\n".encode() for i in range(100)))
    assert tail.text() == "".join(f"line {i}\n" for i in range(80, 100))


def test_the_tail_is_cut_to_its_characters_at_a_line_start() -> None:
    long_line = b"x" * 1500 + b"\n"
    text = fed(long_line, long_line, b"NameError: nme\n").text()
    assert text is not None
    assert len(text) <= MAX_EXIT_OUTPUT
    assert text == "x" * 1500 + "\nNameError: nme\n"
    single = fed(b"y" * 10_000).text()  # one line longer than the tail keeps its end
    assert single == "y" * MAX_EXIT_OUTPUT


def test_secrets_are_scrubbed_before_anything_is_cut() -> None:
    tail = fed(
        f"token={SECRET}\n".encode(),
        b"z" * (4 * MAX_EXIT_OUTPUT) + SECRET.encode() + b"\n",
        secrets=lambda: [SECRET],
    )
    text = tail.text()
    assert text is not None
    assert SECRET not in text and SECRET[4:] not in text
    assert text.endswith("z[redacted]\n")


def test_control_characters_are_kept_as_data_and_bad_bytes_replaced() -> None:
    text = fed(b"\x1b]0;owned\x07\x1b[2J boom\r\n", b"\xff\xfe end\n").text()
    assert text == "\x1b]0;owned\x07\x1b[2J boom\r\n\ufffd\ufffd end\n"
    request = HeartbeatRequest(
        job_id="j", generation=1, phase="failed", gpu=GpuProbe(available=False),
        agent_time=1.0, exit_code=1, exit_output=text,
    )  # fmt: skip
    assert HeartbeatRequest.model_validate_json(request.model_dump_json()).exit_output == text


def test_nothing_written_says_nothing() -> None:
    assert fed().text() is None
    assert fed(b"\n", b"  \n").text() is None


def test_the_tail_is_fed_with_the_log() -> None:
    tail = fed()
    TeeLog(tail).write(b"boom: NameError nme\n")
    assert tail.text() == "boom: NameError nme\n"
