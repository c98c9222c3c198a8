"""`VastClient.bounded`: every call of a caller with a deadline of its own (the monitor's
Lambda) ends within the time it was given: no request may wait longer than what is left, no
retry starts that cannot end in it, and a call after it ends at once."""

from __future__ import annotations

import httpx
import pytest

from functions.adapters.vast import VastUnavailable
from tests.unit.adapters.vast_answers import Recorder, make_client, ok


def test_a_bounded_call_gives_no_request_more_time_than_is_left() -> None:
    recorder = Recorder(ok({"instances": []}))
    client, _ = make_client(recorder)
    client.bounded(5.0).list_instances()
    (request,) = recorder.requests
    timeouts = request.extensions["timeout"]
    assert 0 < timeouts["read"] <= 5.0 and timeouts["connect"] <= 5.0
    client.list_instances()  # the client it came from keeps its own timeout
    assert recorder.requests[-1].extensions["timeout"]["read"] == 20


def test_retries_stop_when_the_time_given_is_spent() -> None:
    """A slow Vast (every request times out) is given up on within the budget, where the
    client alone would retry for its whole 60 s deadline."""
    slow = Recorder(httpx.ReadTimeout("slow"))
    client, sleeps = make_client(slow, deadline_s=60)
    with pytest.raises(VastUnavailable):
        client.bounded(3.0).list_instances()
    assert sum(sleeps) <= 3.0
    alone = Recorder(httpx.ReadTimeout("slow"))
    unbounded, unbounded_sleeps = make_client(alone, deadline_s=60)
    with pytest.raises(VastUnavailable):
        unbounded.list_instances()
    assert sum(unbounded_sleeps) > 3.0


def test_no_time_left_means_no_request_at_all() -> None:
    recorder = Recorder(ok({"instances": []}))
    client, _ = make_client(recorder)
    for seconds in (0.0, -4.0):
        with pytest.raises(VastUnavailable, match="no time left"):
            client.bounded(seconds).list_instances()
    assert recorder.requests == []
