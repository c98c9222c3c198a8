"""Which cancelled transactions are failed conditions and which are asked again."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from functions.adapters.table import cancellation_codes, is_condition_failure, is_transient


def cancelled(*codes: str, in_response: bool = True) -> ClientError:
    message = (
        "Transaction cancelled, please refer cancellation reasons for specific reasons "
        f"[{', '.join(codes)}]"
    )
    response: dict[str, Any] = {
        "Error": {"Code": "TransactionCanceledException", "Message": message}
    }
    if in_response:
        response["CancellationReasons"] = [{"Code": c} for c in codes]
    return ClientError(response, "TransactWriteItems")


@pytest.mark.parametrize("in_response", [True, False])
@pytest.mark.parametrize(
    ("codes", "condition", "transient"),
    [
        (("ConditionalCheckFailed", "None"), True, False),
        (("TransactionConflict", "None"), False, True),
        (("None", "ThrottlingError"), False, True),
        (("ProvisionedThroughputExceeded",), False, True),
        (("TransactionConflict", "ConditionalCheckFailed"), True, False),  # mixed: the merits
        (("ValidationError", "None"), True, False),  # not a "not now": read as before
    ],
)
def test_cancellation_reasons_are_told_apart(
    codes: tuple[str, ...], condition: bool, transient: bool, in_response: bool
) -> None:
    exc = cancelled(*codes, in_response=in_response)
    assert cancellation_codes(exc) == list(codes)
    assert is_condition_failure(exc) is condition
    assert is_transient(exc) is transient


def test_a_conditional_write_refused_is_a_condition_failure() -> None:
    exc = ClientError(
        {"Error": {"Code": "ConditionalCheckFailedException", "Message": "no"}}, "UpdateItem"
    )
    assert is_condition_failure(exc) and not is_transient(exc)
