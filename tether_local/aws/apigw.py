"""API Gateway HTTP API (payload format 2.0) events, as API Gateway hands them to Lambda.

One builder for the tests and the local stack (which turns real HTTP requests into these
events). For IAM-authorized routes API Gateway puts the SigV4 caller under
`requestContext.authorizer.iam`; pass `iam_arn=None` to model an unsigned request.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

DEFAULT_IAM_ARN = "arn:aws:iam::123456789012:user/alice"


def http_api_event(
    method: str,
    path: str,
    *,
    body: Any = None,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
    iam_arn: str | None = DEFAULT_IAM_ARN,
    route_key: str = "$default",
    path_parameters: dict[str, str] | None = None,
    base64_body: bool = False,
    source_ip: str = "203.0.113.7",
) -> dict[str, Any]:
    """`body`: a str/bytes is sent as is; anything else is JSON-encoded (and, unless `headers`
    says otherwise, sent with `content-type: application/json`)."""
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    raw_body: str | None
    if body is None:
        raw_body = None
    elif isinstance(body, bytes):
        raw_body = base64.b64encode(body).decode() if base64_body else body.decode("latin-1")
    elif isinstance(body, str):
        raw_body = base64.b64encode(body.encode()).decode() if base64_body else body
    else:
        lowered.setdefault("content-type", "application/json")
        encoded = json.dumps(body)
        raw_body = base64.b64encode(encoded.encode()).decode() if base64_body else encoded
    if raw_body is not None:
        lowered.setdefault("content-length", str(len(raw_body)))
    now = time.time()
    context: dict[str, Any] = {
        "accountId": "123456789012",
        "apiId": "local",
        "domainName": "local.execute-api.localhost",
        "domainPrefix": "local",
        "http": {
            "method": method.upper(),
            "path": path,
            "protocol": "HTTP/1.1",
            "sourceIp": source_ip,
            "userAgent": lowered.get("user-agent", "tether-tests"),
        },
        "requestId": uuid.uuid4().hex,
        "routeKey": route_key,
        "stage": "$default",
        "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
        "timeEpoch": int(now * 1000),
    }
    if iam_arn is not None:
        context["authorizer"] = {
            "iam": {
                "accessKey": "ASIATESTING",
                "accountId": iam_arn.split(":")[4] if iam_arn.count(":") >= 5 else "",
                "callerId": "AIDATESTING",
                "cognitoIdentity": None,
                "principalOrgId": None,
                "userArn": iam_arn,
                "userId": "AIDATESTING",
            }
        }
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": urlencode(query or {}),
        "headers": lowered,
        "requestContext": context,
        "isBase64Encoded": base64_body,
    }
    if query:
        event["queryStringParameters"] = dict(query)
    if path_parameters:
        event["pathParameters"] = dict(path_parameters)
    if raw_body is not None:
        event["body"] = raw_body
    return event


@dataclass
class LocalLambdaContext:
    """What the Lambda runtime passes as `context` (Powertools' logger reads these)."""

    function_name: str = "tether-local"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:tether-local"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"
    function_version: str = "$LATEST"
    log_group_name: str = "/aws/lambda/tether-local"
    log_stream_name: str = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000
