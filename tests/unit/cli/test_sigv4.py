"""SigV4 on the CLI's requests: checked against AWS's published test vector, against botocore's
signer, and by an independent verifier over the bytes httpx actually sends."""

from __future__ import annotations

import datetime
import hashlib
import hmac
from unittest import mock
from urllib.parse import quote

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials

from tether_cli.api_client import ApiTarget, TetherApi, region_for, sign_request

# AWS's SigV4 test suite ("get-vanilla"): credentials, date, and the expected signature.
VECTOR_CREDENTIALS = ReadOnlyCredentials(
    "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None
)
VECTOR_TIME = datetime.datetime(2015, 8, 30, 12, 36, 0, tzinfo=datetime.UTC)
VECTOR_SIGNATURE = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
CREDENTIALS = ReadOnlyCredentials("AKIATESTKEY", "test-secret-key", "test-session-token")


def frozen_clock(at: datetime.datetime = VECTOR_TIME):
    return mock.patch("botocore.auth.get_current_datetime", return_value=at.replace(tzinfo=None))


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def verify_sigv4(request: httpx.Request, secret_key: str, *, service: str = "execute-api") -> str:
    """Recompute the signature of a request as received (AWS SigV4 spec, written from the spec,
    not botocore) and return the caller's access key id; AssertionError when it does not match.
    """
    authorization = request.headers["authorization"]
    algorithm, _, fields = authorization.partition(" ")
    assert algorithm == "AWS4-HMAC-SHA256"
    parts = dict(p.strip().split("=", 1) for p in fields.split(","))
    key_id, date, region, scope_service, terminator = parts["Credential"].split("/")
    assert (scope_service, terminator) == (service, "aws4_request")
    signed_headers = parts["SignedHeaders"].split(";")
    assert "host" in signed_headers and "x-amz-date" in signed_headers
    amz_date = request.headers["x-amz-date"]
    assert amz_date.startswith(date)
    path = request.url.raw_path.split(b"?")[0].decode()
    query = request.url.query.decode()
    canonical_query = "&".join(sorted(query.split("&"))) if query else ""
    canonical_headers = "".join(
        f"{name}:{' '.join(request.headers[name].split())}\n" for name in signed_headers
    )
    canonical_request = "\n".join(
        [
            request.method,
            quote(path, safe="/~"),
            canonical_query,
            canonical_headers,
            ";".join(signed_headers),
            hashlib.sha256(request.content).hexdigest(),
        ]
    )
    scope = f"{date}/{region}/{service}/aws4_request"
    string_to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            amz_date,
            scope,
            hashlib.sha256(canonical_request.encode()).hexdigest(),
        ]
    )
    key = _hmac(f"AWS4{secret_key}".encode(), date)
    for step in (region, service, "aws4_request"):
        key = _hmac(key, step)
    expected = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    assert hmac.compare_digest(expected, parts["Signature"]), "signature does not match"
    return key_id


def test_signing_reproduces_the_aws_test_vector() -> None:
    with frozen_clock():
        headers = sign_request(
            VECTOR_CREDENTIALS,
            "us-east-1",
            "GET",
            "https://example.amazonaws.com/",
            {},
            b"",
            service="service",
        )
    assert headers["X-Amz-Date"] == "20150830T123600Z"
    assert headers["Authorization"].endswith(f"Signature={VECTOR_SIGNATURE}")
    request = httpx.Request("GET", "https://example.amazonaws.com/", headers=headers)
    assert verify_sigv4(request, VECTOR_CREDENTIALS.secret_key, service="service") == (
        "AKIDEXAMPLE"
    )


class Recorder:
    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return httpx.Response(200, json={"jobs": [], "next": None, "job_id": "j"})


def client(recorder: Recorder, url: str = "https://abc123.execute-api.eu-west-1.amazonaws.com/"):
    return TetherApi(
        ApiTarget(url, "test"),
        credentials=CREDENTIALS,
        transport=httpx.MockTransport(recorder),
        sleep=lambda _s: None,
    )


def test_what_goes_on_the_wire_verifies_and_matches_botocore() -> None:
    recorder = Recorder()
    with frozen_clock(datetime.datetime(2026, 1, 2, 3, 4, 5)), client(recorder) as api:
        api.submit({"name": "tiny", "budget_usd": 1.5}, "cli-key-1")
    (sent,) = recorder.requests
    assert verify_sigv4(sent, CREDENTIALS.secret_key) == "AKIATESTKEY"
    assert sent.headers["x-amz-security-token"] == "test-session-token"
    assert sent.headers["idempotency-key"] == "cli-key-1"
    assert "eu-west-1/execute-api/aws4_request" in sent.headers["authorization"]
    # botocore's signer over the same request gives the same signature.
    reference = AWSRequest(
        method="POST",
        url=str(sent.url),
        data=sent.content,
        headers={
            "accept": "application/json",
            "idempotency-key": "cli-key-1",
            "content-type": "application/json",
        },
    )
    with frozen_clock(datetime.datetime(2026, 1, 2, 3, 4, 5)):
        SigV4Auth(CREDENTIALS, "execute-api", "eu-west-1").add_auth(reference)
    assert reference.headers["Authorization"] == sent.headers["authorization"]


def test_query_strings_are_signed_as_sent() -> None:
    recorder = Recorder()
    with client(recorder) as api:
        api.list_jobs(state="RUNNING", limit=7, next_token="ab/c+d==x y")
    (sent,) = recorder.requests
    assert sent.url.query == b"limit=7&next=ab%2Fc%2Bd%3D%3Dx%20y&state=RUNNING"
    verify_sigv4(sent, CREDENTIALS.secret_key)


def test_a_changed_body_or_wrong_secret_fails_verification() -> None:
    recorder = Recorder()
    with client(recorder) as api:
        api.submit({"name": "tiny"}, "k")
    (sent,) = recorder.requests
    with pytest.raises(AssertionError):
        verify_sigv4(sent, "another-secret")
    tampered = httpx.Request(sent.method, sent.url, headers=sent.headers, content=b'{"name":"x"}')
    with pytest.raises(AssertionError):
        verify_sigv4(tampered, CREDENTIALS.secret_key)


def test_every_retry_is_signed_afresh() -> None:
    calls: list[httpx.Request] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        request.read()
        calls.append(request)
        if len(calls) == 1:
            return httpx.Response(503, json={"message": "Service Unavailable"})
        return httpx.Response(200, json={"job_id": "j"})

    api = TetherApi(
        ApiTarget("https://x.execute-api.us-east-2.amazonaws.com/", "test"),
        credentials=CREDENTIALS,
        transport=httpx.MockTransport(flaky),
        sleep=lambda _s: None,
    )
    api.get_job("j")
    assert len(calls) == 2
    for request in calls:
        verify_sigv4(request, CREDENTIALS.secret_key)


@pytest.mark.parametrize(
    ("url", "configured", "region"),
    [
        ("https://abc.execute-api.ap-south-1.amazonaws.com/", "us-east-1", "ap-south-1"),
        ("http://127.0.0.1:8787/", "eu-central-1", "eu-central-1"),
        ("http://127.0.0.1:8787/", None, "us-east-1"),
    ],
)
def test_region_comes_from_the_api_host_first(url: str, configured, region: str) -> None:
    assert region_for(url, configured) == region
