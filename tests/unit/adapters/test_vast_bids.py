"""The Vast adapter's interruptible side: bid searches, rents with `price`, and a bid refused
with 400 `invalid_price` (typed, so the lifecycle tries the next offer)."""

from __future__ import annotations

import httpx
import pytest

from functions.adapters.vast import BidTooLow, OfferGone, VastInvalidArgs, offer_query
from functions.domain.jobspec import Resources
from tests.unit.adapters.vast_answers import Recorder, make_client, ok, rent_kwargs


def test_an_interruptible_job_searches_bid_offers() -> None:
    assert offer_query(Resources(market="interruptible"), 40, 10)["type"] == "bid"
    assert offer_query(Resources(market="auto"), 40, 10)["type"] == "on-demand"
    assert offer_query(Resources(), 40, 10)["type"] == "on-demand"


def test_rent_with_a_bid_sends_price() -> None:
    recorder = Recorder(ok({"success": True, "new_contract": 77}))
    client, _ = make_client(recorder)
    assert client.rent(123, **rent_kwargs(), price=0.275).instance_id == 77
    assert recorder.body()["price"] == 0.275


def test_rent_without_a_bid_sends_no_price() -> None:
    recorder = Recorder(ok({"success": True, "new_contract": 77}))
    client, _ = make_client(recorder)
    client.rent(123, **rent_kwargs())
    assert "price" not in recorder.body()


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(400, json={"success": False, "error": "invalid_price",
                                  "msg": "error 400: bid below the minimum", "ask_id": 123}),
        httpx.Response(200, json={"success": False, "error": "invalid_price",
                                  "msg": "error 400: bid below the minimum"}),
    ],
)  # fmt: skip
def test_a_refused_bid_is_bid_too_low_and_not_retried(answer: httpx.Response) -> None:
    recorder = Recorder(answer)
    client, sleeps = make_client(recorder)
    with pytest.raises(BidTooLow) as caught:
        client.rent(123, **rent_kwargs(), price=0.1)
    assert caught.value.code == "invalid_price" and not isinstance(caught.value, OfferGone)
    assert len(recorder.requests) == 1 and sleeps == []


def test_a_bid_that_is_no_number_is_refused_before_any_call() -> None:
    recorder = Recorder()
    client, _ = make_client(recorder)
    with pytest.raises(ValueError, match="price must be a bid"):
        client.rent(123, **rent_kwargs(), price=True)
    assert recorder.requests == []


@pytest.mark.parametrize("price", [0, -0.2, 0.0009, float("nan"), 128.01])
def test_a_bid_outside_vasts_bounds_is_refused_before_any_call(price: float) -> None:
    recorder = Recorder()
    client, _ = make_client(recorder)
    with pytest.raises(VastInvalidArgs) as caught:
        client.rent(123, **rent_kwargs(), price=price)
    assert caught.value.field == "price"
    assert recorder.requests == []
