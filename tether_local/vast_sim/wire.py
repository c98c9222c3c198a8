"""Vast's HTTP shapes, shared by every route of the simulator: JSON replies, the error body
(`{"success": false, "error": …, "msg": …}`), request bodies, and the opaque `after_token` that
paginated lists hand out."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import httpx

RATE_LIMIT_TEXT = "API requests too frequent: endpoint threshold=4.5*1.0"


class Reply(Exception):
    """Raised inside a route to answer at once with an error response."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


def json_response(status: int, body: Any) -> httpx.Response:
    return httpx.Response(status, json=body)


def error(status: int, error: str, msg: str, **extra: Any) -> Reply:
    return Reply(json_response(status, {"success": False, "error": error, "msg": msg, **extra}))


def request_body(request: httpx.Request) -> dict[str, Any]:
    if not request.content:
        return {}
    try:
        body = json.loads(request.content)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise error(400, "invalid_args", "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise error(400, "invalid_args", "request body must be a JSON object")
    return body


def encode_token(last_id: int) -> str:
    raw = json.dumps({"values": {"id": last_id}}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_token(token: str) -> int:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        last_id = data["values"]["id"]
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise error(400, "invalid_args", "after_token is not a token this API issued") from None
    if not isinstance(last_id, int):
        raise error(400, "invalid_args", "after_token is not a token this API issued")
    return last_id


__all__ = [
    "RATE_LIMIT_TEXT",
    "Reply",
    "decode_token",
    "encode_token",
    "error",
    "json_response",
    "request_body",
]
