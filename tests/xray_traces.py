"""What X-Ray would keep of a traced call, recorded in memory: the X-Ray SDK's own recorder with
the SDK switched on and an emitter that keeps each segment document it would have sent to the
daemon (Powertools streams every closed subsegment at once, so each arrives as its own
document)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from aws_xray_sdk import global_sdk_config
from aws_xray_sdk.core import xray_recorder


class RecordingEmitter:
    """The X-Ray SDK's emitter interface (`send_entity`, `set_daemon_address`), keeping each
    serialised segment document instead of sending it over UDP."""

    def __init__(self) -> None:
        self.documents: list[dict[str, Any]] = []

    def send_entity(self, entity: Any) -> None:
        self.documents.append(json.loads(entity.serialize()))

    def set_daemon_address(self, address: str | None) -> None:
        del address

    def metadata(self) -> list[Any]:
        """The `metadata` of every document sent and of every subsegment within."""
        found: list[Any] = []

        def walk(document: dict[str, Any]) -> None:
            if "metadata" in document:
                found.append(document["metadata"])
            for child in document.get("subsegments", []):
                walk(child)

        for document in self.documents:
            walk(document)
        return found

    def text(self) -> str:
        return json.dumps(self.documents)


@contextmanager
def recorded_traces(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingEmitter]:
    """Everything traced inside, under one sampled segment, as the emitter received it."""
    monkeypatch.delenv("AWS_XRAY_SDK_ENABLED", raising=False)
    was_enabled = global_sdk_config.sdk_enabled()
    emitter = RecordingEmitter()
    monkeypatch.setattr(xray_recorder, "_emitter", emitter)
    global_sdk_config.set_sdk_enabled(True)
    try:
        xray_recorder.begin_segment("tether-test", sampling=True)
        try:
            yield emitter
        finally:
            xray_recorder.end_segment()
    finally:
        global_sdk_config.set_sdk_enabled(was_enabled)
