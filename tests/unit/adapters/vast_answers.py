"""Canned Vast HTTP answers in the real API's shapes (tests/fixtures/vast) and a client that
talks to them, for the Vast adapter's tests."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import httpx

from functions.adapters.vast import VastClient
from tests.paths import FIXTURES as TEST_FIXTURES

FIXTURES = TEST_FIXTURES / "vast"
KEY = "acct-key-5f2c9e7b"
RATE_LIMIT_TEXT = "API requests too frequent: endpoint threshold=4.5*1.0"

Handler = Callable[[httpx.Request], httpx.Response]


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


class Recorder:
    """Answers requests from a script of responses (or exceptions) and records them."""

    def __init__(self, *answers: httpx.Response | Exception | Handler) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if callable(answer) and not isinstance(answer, httpx.Response):
            return answer(request)
        return answer

    def body(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


def make_client(
    handler: Handler, *, deadline_s: float = 60, seed: int = 1
) -> tuple[VastClient, list[float]]:
    sleeps: list[float] = []
    client = VastClient(
        KEY,
        base_url="https://console.vast.ai",
        client=httpx.Client(transport=httpx.MockTransport(handler)),
        deadline_s=deadline_s,
        sleep=sleeps.append,
        rng=random.Random(seed),
    )
    return client, sleeps


def ok(body: Any) -> httpx.Response:
    return httpx.Response(200, json=body)


def rent_kwargs(**overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "image": "pytorch/pytorch:2.4.1-cuda12.4-cudnn9-runtime",
        "disk_gb": 40,
        "label": "tether:job-7:g1",
        "env": {"TETHER_JOB_ID": "job-7"},
        "onstart": "curl -fsS $URL | bash",
    }
    kwargs.update(overrides)
    return kwargs
