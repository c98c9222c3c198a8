# ruff: noqa: E501  (the corpus is a table: one request per line reads best)
"""Every client mistake is a 4xx with the error shape, and nothing is stored (docs/architecture.md#invariant-5).

A corpus of hand-written bad requests, then hypothesis-generated bodies.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.integration.api.helpers import TOKEN, auth, heartbeat_body, running_job, spec

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")

J, H = "jobs", "heartbeat"
JSON = {"content-type": "application/json"}
HB = "/agent/heartbeat"


def deep(n: int) -> str:
    return "[" * n + "]" * n


def b64(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode()


# (name, target, method, path, request kwargs, status, error code, a details path or None).
# "{job}" in a path or body stands for the running job's id.
CORPUS: list[tuple[str, str, str, str, dict[str, Any], int, str, str | None]] = [
    ("no body", J, "POST", "/jobs", {"headers": JSON}, 400, "invalid_request", "body"),
    ("empty body", J, "POST", "/jobs", {"body": "", "headers": JSON}, 400, "invalid_request", "body"),
    ("truncated json", J, "POST", "/jobs", {"body": "{", "headers": JSON}, 400, "malformed_json", "body"),
    ("trailing garbage", J, "POST", "/jobs", {"body": "{} x", "headers": JSON}, 400, "malformed_json", "body"),
    ("NaN", J, "POST", "/jobs", {"body": '{"budget_usd": NaN}', "headers": JSON}, 400, "malformed_json", "body"),
    ("Infinity", J, "POST", "/jobs", {"body": '{"budget_usd": Infinity}', "headers": JSON}, 400, "malformed_json", "body"),
    ("deep nesting", J, "POST", "/jobs", {"body": deep(100_000), "headers": JSON}, 400, "malformed_json", "body"),
    ("text/plain", J, "POST", "/jobs", {"body": json.dumps(spec()), "headers": {"content-type": "text/plain"}}, 415, "unsupported_media_type", "header.content-type"),
    ("no content type", J, "POST", "/jobs", {"body": json.dumps(spec())}, 415, "unsupported_media_type", "header.content-type"),
    ("yaml body", J, "POST", "/jobs", {"body": "name: x", "headers": {"content-type": "application/yaml"}}, 415, "unsupported_media_type", None),
    ("too large", J, "POST", "/jobs", {"body": spec(run="x" * 300_000)}, 413, "payload_too_large", "body"),
    ("array body", J, "POST", "/jobs", {"body": []}, 400, "invalid_request", "body"),
    ("null body", J, "POST", "/jobs", {"body": "null", "headers": JSON}, 400, "invalid_request", "body"),
    ("string body", J, "POST", "/jobs", {"body": '"job"', "headers": JSON}, 400, "invalid_request", "body"),
    ("bad utf-8", J, "POST", "/jobs", {"body": b"\xff\xfe{}", "headers": JSON, "base64_body": True}, 400, "malformed_json", "body"),
    ("percent garbage", J, "POST", "/jobs", {"body": "%%%", "headers": JSON}, 400, "malformed_json", "body"),
    ("unknown field", J, "POST", "/jobs", {"body": spec(colour="red")}, 400, "invalid_request", "colour"),
    ("unknown nested field", J, "POST", "/jobs", {"body": spec(resources={"gpus": 2})}, 400, "invalid_request", "resources.gpus"),
    ("budget as string", J, "POST", "/jobs", {"body": spec(budget_usd="ten")}, 400, "invalid_request", "budget_usd"),
    ("negative budget", J, "POST", "/jobs", {"body": spec(budget_usd=-1)}, 400, "invalid_request", "budget_usd"),
    ("missing budget", J, "POST", "/jobs", {"body": {k: v for k, v in spec().items() if k != "budget_usd"}}, 400, "invalid_request", "budget_usd"),
    ("bad name", J, "POST", "/jobs", {"body": spec(name="My Job")}, 400, "invalid_request", "name"),
    ("unknown reference gpu", J, "POST", "/jobs", {"body": spec(reference_gpu="RTX 9999")}, 400, "invalid_request", "reference_gpu"),
    ("reference gpu not text", J, "POST", "/jobs", {"body": spec(reference_gpu=4090)}, 400, "invalid_request", "reference_gpu"),
    ("unknown market", J, "POST", "/jobs", {"body": spec(resources={"market": "spot"})}, 400, "invalid_request", "resources.market"),
    ("negative bid margin", J, "POST", "/jobs", {"body": spec(resources={"bid_margin": -0.1})}, 400, "invalid_request", "resources.bid_margin"),
    ("bid margin as string", J, "POST", "/jobs", {"body": spec(resources={"bid_margin": "10%"})}, 400, "invalid_request", "resources.bid_margin"),
    ("hazard too high", J, "POST", "/jobs", {"body": spec(resources={"outbid_hazard_per_hour": 11})}, 400, "invalid_request", "resources.outbid_hazard_per_hour"),
    ("negative hazard", J, "POST", "/jobs", {"body": spec(resources={"outbid_hazard_per_hour": -1})}, 400, "invalid_request", "resources.outbid_hazard_per_hour"),
    ("zero total steps", J, "POST", "/jobs", {"body": spec(total_steps=0)}, 400, "invalid_request", "total_steps"),
    ("fractional total steps", J, "POST", "/jobs", {"body": spec(total_steps=10.5)}, 400, "invalid_request", "total_steps"),
    ("huge total steps", J, "POST", "/jobs", {"body": spec(total_steps=10**12)}, 400, "invalid_request", "total_steps"),
    ("total steps as text", J, "POST", "/jobs", {"body": spec(total_steps="many")}, 400, "invalid_request", "total_steps"),
    ("measures without name", J, "GET", "/measures", {}, 400, "invalid_request", "query.name"),
    ("measures bad name", J, "GET", "/measures", {"query": {"name": "My Job"}}, 400, "invalid_request", "query.name"),
    ("measures long name", J, "GET", "/measures", {"query": {"name": "a" * 64}}, 400, "invalid_request", "query.name"),
    ("measures unknown query", J, "GET", "/measures", {"query": {"name": "a", "x": "1"}}, 400, "invalid_request", "query.x"),
    ("measures unsigned", J, "GET", "/measures", {"query": {"name": "a"}, "iam_arn": None}, 401, "unauthorized", "header.authorization"),
    ("reserved env", J, "POST", "/jobs", {"body": spec(env={"AWS_SECRET_ACCESS_KEY": "x"})}, 400, "invalid_request", "env"),
    ("env not a map", J, "POST", "/jobs", {"body": spec(env=["A=1"])}, 400, "invalid_request", "env"),
    ("code by branch", J, "POST", "/jobs", {"body": spec(code={"git": "https://github.com/u/r", "commit": "main"})}, 400, "invalid_request", "code.commit"),
    ("code with a token", J, "POST", "/jobs", {"body": spec(code={"git": "https://ghp_x@github.com/u/r", "commit": "a" * 40})}, 400, "invalid_request", "code.git"),
    ("code by ext::", J, "POST", "/jobs", {"body": spec(code={"git": "ext::sh -c id", "commit": "a" * 40})}, 400, "invalid_request", "code.git"),
    ("bad idempotency key", J, "POST", "/jobs", {"body": spec(), "headers": {"Idempotency-Key": "a b/c"}}, 400, "invalid_request", "header.idempotency-key"),
    ("long idempotency key", J, "POST", "/jobs", {"body": spec(), "headers": {"Idempotency-Key": "k" * 129}}, 400, "invalid_request", "header.idempotency-key"),
    ("query on submit", J, "POST", "/jobs", {"body": spec(), "query": {"dry": "1"}}, 400, "invalid_request", "query.dry"),
    ("submit unsigned", J, "POST", "/jobs", {"body": spec(), "iam_arn": None}, 401, "unauthorized", "header.authorization"),
    ("list unsigned", J, "GET", "/jobs", {"iam_arn": None}, 401, "unauthorized", "header.authorization"),
    ("get unsigned", J, "GET", "/jobs/{job}", {"iam_arn": None}, 401, "unauthorized", None),
    ("cancel unsigned", J, "POST", "/jobs/{job}/cancel", {"iam_arn": None}, 401, "unauthorized", None),
    ("limit 0", J, "GET", "/jobs", {"query": {"limit": "0"}}, 400, "invalid_request", "query.limit"),
    ("limit word", J, "GET", "/jobs", {"query": {"limit": "ten"}}, 400, "invalid_request", "query.limit"),
    ("limit huge", J, "GET", "/jobs", {"query": {"limit": "100000"}}, 400, "invalid_request", "query.limit"),
    ("unknown state", J, "GET", "/jobs", {"query": {"state": "SLEEPING"}}, 400, "invalid_request", "query.state"),
    ("garbage token", J, "GET", "/jobs", {"query": {"next": "!!!"}}, 400, "invalid_request", "query.next"),
    ("forged token", J, "GET", "/jobs", {"query": {"next": b64('{"pk": "JOB#x"}')}}, 400, "invalid_request", "query.next"),
    ("token not json", J, "GET", "/jobs", {"query": {"next": b64("hello")}}, 400, "invalid_request", "query.next"),
    ("unknown query", J, "GET", "/jobs", {"query": {"colour": "red"}}, 400, "invalid_request", "query.colour"),
    ("delete jobs", J, "DELETE", "/jobs", {}, 405, "method_not_allowed", "method"),
    ("put job", J, "PUT", "/jobs/{job}", {"body": {}}, 405, "method_not_allowed", "method"),
    ("get cancel", J, "GET", "/jobs/{job}/cancel", {}, 405, "method_not_allowed", "method"),
    ("unknown route", J, "GET", "/nowhere", {}, 404, "not_found", None),
    ("route below a job", J, "GET", "/jobs/{job}/files", {}, 404, "not_found", None),
    ("post logs", J, "POST", "/jobs/{job}/logs", {}, 405, "method_not_allowed", "method"),
    ("unknown job", J, "GET", "/jobs/ghost-00000000", {}, 404, "not_found", "path.id"),
    ("odd job id", J, "GET", "/jobs/..%2F..", {}, 404, "not_found", None),
    ("cancel unknown", J, "POST", "/jobs/ghost-00000000/cancel", {}, 404, "not_found", None),
    ("hb unauthenticated", H, "POST", HB, {"body": heartbeat_body("{job}")}, 401, "unauthorized", "header.authorization"),
    ("hb wrong token", H, "POST", HB, {"body": heartbeat_body("{job}"), "headers": auth("nope")}, 401, "unauthorized", "header.authorization"),
    ("hb malformed", H, "POST", HB, {"body": "{", "headers": JSON | auth()}, 400, "malformed_json", "body"),
    ("hb content type", H, "POST", HB, {"body": "{}", "headers": {"content-type": "text/plain"} | auth()}, 415, "unsupported_media_type", None),
    ("hb too large", H, "POST", HB, {"body": heartbeat_body("{job}", gpu={"available": True, "error": "e" * 200_000}), "headers": auth()}, 413, "payload_too_large", None),
    ("hb unknown field", H, "POST", HB, {"body": heartbeat_body("{job}", mood="happy"), "headers": auth()}, 400, "invalid_request", "mood"),
    ("hb generation 0", H, "POST", HB, {"body": heartbeat_body("{job}", generation=0), "headers": auth()}, 400, "invalid_request", "generation"),
    ("hb generation as string", H, "POST", HB, {"body": heartbeat_body("{job}", generation="1"), "headers": auth()}, 400, "invalid_request", "generation"),
    ("hb bad phase", H, "POST", HB, {"body": heartbeat_body("{job}", phase="dancing"), "headers": auth()}, 400, "invalid_request", "phase"),
    ("hb no gpu", H, "POST", HB, {"body": {k: v for k, v in heartbeat_body("{job}").items() if k != "gpu"}, "headers": auth()}, 400, "invalid_request", "gpu"),
    ("hb job id path", H, "POST", HB, {"body": heartbeat_body("../etc"), "headers": auth()}, 400, "invalid_request", "job_id"),
    ("hb utilization 150", H, "POST", HB, {"body": heartbeat_body("{job}", gpu={"available": True, "utilization_pct": 150}), "headers": auth()}, 400, "invalid_request", "gpu.utilization_pct"),
    ("hb get", H, "GET", HB, {"headers": auth()}, 405, "method_not_allowed", "method"),
    ("hb array", H, "POST", HB, {"body": [1], "headers": auth()}, 400, "invalid_request", "body"),
]  # fmt: skip


def _fill(value: Any, job_id: str) -> Any:
    if isinstance(value, str):
        return value.replace("{job}", job_id)
    if isinstance(value, dict):
        return {k: _fill(v, job_id) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, job_id) for v in value]
    return value


@pytest.fixture
def live(api):
    """A table with a running, supervised job and a heartbeat: something a bad request could hurt."""
    job_id = running_job(api)
    assert api.heartbeat("POST", HB, body=heartbeat_body(job_id), headers=auth()).status == 200
    return job_id


def assert_rejected(api, reply, status=None, code=None, path=None):
    assert 400 <= reply.status < 500, reply.body
    if status is not None:
        assert reply.status == status, reply.body
    body = reply.body
    assert set(body) == {"error", "message", "details"}
    assert isinstance(body["message"], str) and body["message"]
    assert all(set(d) == {"path", "reason"} and d["reason"] for d in body["details"])
    if code is not None:
        assert body["error"] == code
    if path is not None:
        assert path in [d["path"] for d in body["details"]], body["details"]
    assert "Traceback" not in json.dumps(body)


def test_the_corpus_is_large_enough():
    assert len(CORPUS) >= 40


@pytest.mark.parametrize(
    ("target", "method", "path", "kwargs", "status", "code", "detail"),
    [c[1:] for c in CORPUS],
    ids=[c[0] for c in CORPUS],
)
def test_bad_request_is_rejected_and_stores_nothing(
    api, live, target, method, path, kwargs, status, code, detail
):
    before, executions = api.items(), api.executions()
    call = api.jobs if target == J else api.heartbeat
    reply = call(method, _fill(path, live), **_fill(kwargs, live))
    assert_rejected(api, reply, status, code, detail)
    assert api.items() == before
    assert api.executions() == executions


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
HYPOTHESIS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@HYPOTHESIS
@given(body=json_values)
def test_arbitrary_json_is_never_a_job(api, body):
    before = api.items()
    reply = api.jobs("POST", "/jobs", body=json.dumps(body), headers=JSON)
    assert_rejected(api, reply)
    assert api.items() == before


@HYPOTHESIS
@given(field=st.sampled_from(sorted(spec())), value=json_values)
def test_a_spec_with_one_field_replaced_is_accepted_or_cleanly_rejected(api, field, value):
    before = api.items()
    reply = api.jobs("POST", "/jobs", body=spec(**{field: value}))
    if reply.status == 201:
        assert api.store.get_job(reply.body["job_id"]) is not None
    else:
        assert_rejected(api, reply)
        assert api.items() == before


@HYPOTHESIS
@given(raw=st.binary(max_size=64))
def test_arbitrary_bytes_never_reach_the_table(api, raw):
    before = api.items()
    reply = api.heartbeat("POST", HB, body=raw, headers=JSON | auth(), base64_body=True)
    assert_rejected(api, reply)
    assert api.items() == before


@HYPOTHESIS
@given(field=st.sampled_from(sorted(heartbeat_body("x"))), value=json_values)
# Numbers DynamoDB cannot store (past 1e125) once made the write fail with a 500.
@example(field="agent_time", value=1e127)
@example(field="step", value=10**40)
@example(field="bytes_uploaded", value=10**40)
def test_a_heartbeat_with_one_field_replaced_is_accepted_or_cleanly_rejected(
    api, live, field, value
):
    body = heartbeat_body(live) | {field: value}
    before = api.items()
    reply = api.heartbeat("POST", HB, body=body, headers=auth(TOKEN))
    if reply.status != 200:
        assert_rejected(api, reply)
        assert api.items() == before
