"""`tether status` says when the spend shown is not all known: traffic bounded from above while
Vast's charges were unread (docs/architecture.md#spend)."""

from __future__ import annotations

from typing import Any

from tether_cli.job_status import status_lines

NOW = 1.9e9


def view(**spend: Any) -> dict[str, Any]:
    base = {"spent_usd": 2.5, "budget_usd": 10.0, "remaining_usd": 7.5}
    return {"job_id": "tiny-cpu-1234abcd", "state": "RUNNING", "spend": base | spend}


def test_an_upper_bound_is_shown_with_when_the_charges_were_last_read() -> None:
    lines = status_lines(view(upper_bound_usd=4.0, charges_read_at=NOW - 300), NOW)
    assert (
        "          at most $4.00: traffic is an upper bound, Vast's charges unread "
        "(last read 5 min ago)"
    ) in lines


def test_charges_never_read_are_said_so() -> None:
    lines = status_lines(view(upper_bound_usd=4.0, charges_read_at=None), NOW)
    assert any(line.endswith("Vast's charges unread (never read)") for line in lines)


def test_no_bound_adds_no_line() -> None:
    lines = status_lines(view(upper_bound_usd=None, charges_read_at=NOW - 60), NOW)
    assert not any("upper bound" in line for line in lines)
