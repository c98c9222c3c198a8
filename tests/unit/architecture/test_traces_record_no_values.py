"""No trace records what a function returns or raises: the API hands out presigned URLs (code
upload, outputs, checkpoints, logs), the heartbeat hands a host its secrets and R2 keys, the
lifecycle reads the user's secrets and mints R2 keys, and X-Ray keeps a trace 30 days for
anyone with X-Ray read rights. The tracer in functions/observability.py decides it for every
handler and method; these tests hold every traced function to that tracer."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from functions.observability import tracer
from tests.paths import ROOT
from tests.xray_traces import recorded_traces

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")

URL = "https://r2.example/code/abc.tar.gz?X-Amz-Signature=presigned-signature"
SECRET = "hf_secret-value-of-the-user"
CAPTURE_KEYWORDS = {"capture_response", "capture_error"}


def function_modules() -> list[Path]:
    return sorted((ROOT / "functions").rglob("*.py"))


def test_every_traced_function_uses_the_one_tracer_and_leaves_capture_to_it():
    problems = []
    for path in function_modules():
        where = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            called = node.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
            if name == "Tracer" and where != Path("functions/observability.py"):
                problems.append(f"{where}:{node.lineno} builds its own Tracer")
            for keyword in node.keywords:
                if keyword.arg in CAPTURE_KEYWORDS and where != Path("functions/observability.py"):
                    problems.append(f"{where}:{node.lineno} sets {keyword.arg}")
    assert problems == []


def test_the_handlers_are_traced_by_the_one_tracer():
    traced = set()
    for path in function_modules():
        text = path.read_text()
        if path == ROOT / "functions" / "observability.py":
            continue
        if "capture_lambda_handler" in text or "capture_method" in text:
            assert "from functions.observability import" in text and "tracer" in text, path
            traced.add(path.relative_to(ROOT).as_posix())
    assert {
        "functions/api/jobs.py",
        "functions/api/logs.py",
        "functions/api/heartbeat.py",
        "functions/lifecycle/handler.py",
        "functions/monitor/handler.py",
    } <= traced


@tracer.capture_lambda_handler
def handler_returning_a_url(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"statusCode": 200, "body": URL}


@tracer.capture_method
def method_returning_a_secret() -> str:
    return SECRET


class RefusedWithDetail(Exception):
    """An error that keeps what it was given as an attribute, as the provider errors do."""

    def __init__(self, detail: str) -> None:
        super().__init__("refused")
        self.detail = detail


@tracer.capture_method
def method_raising_with_a_secret() -> str:
    raise RefusedWithDetail(SECRET)


def test_a_handler_response_is_not_recorded(monkeypatch):
    with recorded_traces(monkeypatch) as emitter:
        assert handler_returning_a_url({}, None)["body"] == URL
    assert emitter.documents, "nothing was traced: the recorder is not on"
    assert URL not in emitter.text()
    assert "presigned-signature" not in emitter.text()


def test_a_method_result_is_not_recorded(monkeypatch):
    with recorded_traces(monkeypatch) as emitter:
        assert method_returning_a_secret() == SECRET
    assert emitter.documents
    assert SECRET not in emitter.text()


def test_a_raised_error_is_not_recorded_as_metadata(monkeypatch):
    # X-Ray's own `cause` still keeps the exception's type and message; the exception object
    # (its attributes) goes into no metadata beside it.
    with recorded_traces(monkeypatch) as emitter, pytest.raises(RefusedWithDetail):
        method_raising_with_a_secret()
    assert emitter.documents
    assert SECRET not in repr(emitter.metadata())
    assert SECRET not in emitter.text()


def test_asking_a_traced_function_to_record_its_result_is_refused():
    with pytest.raises(ValueError, match="records no"):
        tracer.capture_method(capture_response=True)
    with pytest.raises(ValueError, match="records no"):
        tracer.capture_lambda_handler(capture_error=True)
