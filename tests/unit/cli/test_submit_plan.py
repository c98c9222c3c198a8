"""`tether submit`'s price and question (`tether_cli.submit_plan`), without a network: offers
from the fixture book, the answers from a string."""

from __future__ import annotations

import io
import signal

import pytest

from tests.paths import ROOT
from tether_cli.output import EXIT_FAILURE, CliError, Interrupted
from tether_cli.submit_plan import SubmitProgress, confirmed, price_lines, submit_price
from tether_cli.validate import load_job

EXAMPLE = str(ROOT / "tests" / "fixtures" / "tiny-cpu-no-code.yaml")
OFFERS = str(ROOT / "tests" / "fixtures" / "offers_small.json")


def test_the_price_names_the_first_host_the_expected_total_its_range_and_the_budget() -> None:
    price = submit_price(load_job(EXAMPLE), offers_path=OFFERS, local=False, environ={})
    assert price_lines(price) == [
        "host      offer 1001 (1x RTX 3090, Quebec, CA), $0.153/h on-demand, first of 5 the "
        f"control plane tries in order (from {OFFERS})",
        "expected  $0.086 over 0.50 h (compute $0.076, start-up $0.005, traffic $0.004, "
        "interruptions $0.000)",
        "range     $0.086 to $0.152: the expected totals of the 5 offers it tries, should the "
        "cheaper be taken first",
        "budget    $1.00: the job is stopped when its spend reaches it",
    ]


def test_a_budget_under_the_expected_total_is_warned_of(tmp_path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        (ROOT / "tests" / "fixtures" / "tiny-cpu-no-code.yaml")
        .read_text()
        .replace("expected_hours: 0.5", "expected_hours: 20")
    )
    lines = price_lines(
        submit_price(load_job(str(spec)), offers_path=OFFERS, local=False, environ={})
    )
    assert lines[-1] == (
        "warning   the expected total is over the budget: the job would be stopped at $1.00 "
        "before it ends"
    )


@pytest.mark.parametrize(
    ("local", "environ", "why"),
    [
        (False, {}, "VAST_API_KEY is not set on this machine"),
        (False, {"VAST_API_KEY": "  "}, "VAST_API_KEY is not set on this machine"),
        (True, {"VAST_API_KEY": "k"}, "the local stack rents from its own simulated Vast"),
    ],
    ids=["no key", "blank key", "local"],
)
def test_without_offers_the_price_is_unknown_and_says_why(local, environ, why) -> None:
    price = submit_price(load_job(EXAMPLE), offers_path=None, local=local, environ=environ)
    first, budget = price_lines(price)
    assert first.startswith(f"price     unknown: {why}")
    assert budget == "budget    $1.00: the job is stopped when its spend reaches it"


def test_a_failed_search_is_an_unknown_price_not_an_error() -> None:
    def refused(_job: object) -> list[object]:
        raise CliError("Vast search failed: 401 (check VAST_API_KEY)", EXIT_FAILURE)

    price = submit_price(
        load_job(EXAMPLE),
        offers_path=None,
        local=False,
        environ={"VAST_API_KEY": "k"},
        search=refused,  # type: ignore[arg-type]
    )
    assert price_lines(price)[0] == (
        "price     unknown: Vast search failed: 401 (check VAST_API_KEY)"
    )


def test_no_qualifying_offer_is_an_unknown_price(tmp_path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        (ROOT / "tests" / "fixtures" / "tiny-cpu-no-code.yaml")
        .read_text()
        .replace("gpu_count: 1", "gpu_count: 8")
    )
    price = submit_price(load_job(str(spec)), offers_path=OFFERS, local=False, environ={})
    assert price_lines(price)[0].startswith("price     unknown: no offer qualifies now (none of ")
    assert price_lines(price)[0].endswith("; the control plane waits for one")


@pytest.mark.parametrize(
    ("typed", "yes"),
    [("y\n", True), ("YES\n", True), (" yes \n", True), ("\n", False), ("n\n", False),
     ("yep\n", False), ("", False)],
)  # fmt: skip
def test_only_y_or_yes_is_a_yes(typed, yes) -> None:
    err = io.StringIO()
    assert confirmed(io.StringIO(typed), err) is yes
    assert err.getvalue() == "submit and rent a host? [y/N] " + ("\n" if typed == "" else "")


# --- what Ctrl-C says at each point (the handler called as the signal would call it) ----------

JOB_VIEW = {"job_id": "tiny-cpu-1a2b3c4d", "state": "PENDING"}
STORED = (
    "interrupted: job tiny-cpu-1a2b3c4d was submitted (PENDING) and will rent a host: "
    "`tether cancel tiny-cpu-1a2b3c4d` stops it"
)


def interrupted(progress: SubmitProgress) -> str:
    with pytest.raises(Interrupted) as caught:
        progress(signal.SIGINT, None)
    return caught.value.message


def test_ctrl_c_before_sending_says_nothing_was_stored_and_where_the_code_is() -> None:
    progress = SubmitProgress("k-1")
    assert interrupted(progress) == (
        "interrupted: nothing was submitted (no job stored); no code uploaded"
    )
    progress.code_state = "the code archive (sha256 abc…) stays in the bucket"
    assert interrupted(progress).endswith("; the code archive (sha256 abc…) stays in the bucket")


def test_ctrl_c_while_sending_waits_for_the_reply_to_name_the_job(capsys) -> None:
    progress = SubmitProgress("k-1")
    progress.sending = True
    progress(signal.SIGINT, None)  # held: no exception
    assert capsys.readouterr().err == (
        "tether: waiting for the API's reply to say which job was stored (Ctrl-C again to "
        "leave without knowing)\n"
    )
    with pytest.raises(Interrupted) as caught:
        progress.stored(JOB_VIEW)
    assert caught.value.message == STORED


def test_a_second_ctrl_c_while_sending_leaves_with_the_key() -> None:
    progress = SubmitProgress("k-1")
    progress.sending = True
    progress(signal.SIGINT, None)
    assert interrupted(progress) == (
        "interrupted: the job may have been stored: `tether jobs` lists it and `tether cancel "
        "JOB` stops it (Idempotency-Key k-1)"
    )


def test_ctrl_c_after_the_reply_names_the_job() -> None:
    progress = SubmitProgress("k-1")
    progress.sending = True
    progress.stored(JOB_VIEW)  # nothing held: no exception
    assert interrupted(progress) == STORED
