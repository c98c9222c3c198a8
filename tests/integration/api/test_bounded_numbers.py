"""Every number of every request is bounded and finite (docs/architecture.md#bounded-input).

Numbers are sent as JSON text, the way a client writes them: `1e400` is valid JSON that Python
reads as infinity, and an integer of 40 digits is one DynamoDB cannot store (38 digits). Each is
a 400 that names the field, and nothing is stored; a number that is accepted is stored and reads
back. Through the real handlers on moto.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from tether_agent import protocol

from functions.domain.heartbeat_contract import HeartbeatRequest
from functions.domain.jobspec import JobSpec
from tests.integration.api.helpers import TOKEN, auth, heartbeat_body, running_job, spec
from tests.integration.api.test_bad_input import HB, JSON, assert_rejected

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")

PLACEHOLDER = "__NUMBER__"


def with_literal(body: dict[str, Any], path: str, literal: str) -> str:
    """`body` as JSON text with the dotted `path` set to the number written as `literal`; a
    part ending in `[]` is a list, and the number goes into its first element."""
    out = json.loads(json.dumps(body))
    *parents, last = path.split(".")
    node = out
    for part in parents:
        if part.endswith("[]"):
            items = node.setdefault(part[:-2], [])
            items[:1] = [items[0] if items else {}]
            node = items[0]
        else:
            node = node.setdefault(part, {})
    if last.endswith("[]"):
        node[last[:-2]] = [PLACEHOLDER]
    else:
        node[last] = PLACEHOLDER
    return json.dumps(out).replace(json.dumps(PLACEHOLDER), literal)


def numeric_fields(model: type[BaseModel], prefix: str = "") -> dict[str, list[Any]]:
    """Dotted path → the constraints (pydantic metadata) of every int/float field, nested
    models included, inside lists too (`name[]`), bounds inside `Annotated` aliases too."""
    found: dict[str, list[Any]] = {}
    for name, info in model.model_fields.items():
        for arg, metadata, suffix in _leaves(info.annotation, list(info.metadata)):
            path = f"{prefix}{name}{suffix}"
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                found.update(numeric_fields(arg, f"{path}."))
            elif arg in (int, float):
                found[path] = metadata
    return found


def _leaves(
    annotation: Any, metadata: list[Any], suffix: str = ""
) -> list[tuple[Any, list[Any], str]]:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return [leaf for arg in args for leaf in _leaves(arg, metadata, suffix)]
    if origin is typing.Annotated:
        inner, *extra = args
        flat = [m for e in extra for m in getattr(e, "metadata", [e])]
        return _leaves(inner, metadata + flat, suffix)
    if origin in (list, tuple, set, frozenset):  # the list's own metadata bounds its length
        return [leaf for arg in args if arg is not Ellipsis for leaf in _leaves(arg, [], "[]")]
    if origin is dict:
        return _leaves(args[1], [], "{}")
    return [(annotation, metadata, suffix)]


def _bounds(metadata: list[Any]) -> tuple[bool, bool]:
    lower = upper = False
    for meta in metadata:
        lower |= any(getattr(meta, k, None) is not None for k in ("ge", "gt"))
        upper |= any(getattr(meta, k, None) is not None for k in ("le", "lt"))
    return lower, upper


@pytest.mark.parametrize("model", [JobSpec, HeartbeatRequest], ids=lambda m: m.__name__)
def test_every_number_a_client_sends_has_both_bounds(model: type[BaseModel]) -> None:
    """A numeric field added without bounds is a 500 waiting for a big enough number."""
    fields = numeric_fields(model)
    assert len(fields) >= 10  # the walk finds the nested models' numbers too
    unbounded = sorted(path for path, meta in fields.items() if _bounds(meta) != (True, True))
    assert unbounded == []


def test_the_walk_sees_the_nested_numbers() -> None:
    assert {
        "gpu.utilization_pct",
        "last_checkpoint.step",
        "restored_checkpoint.generation",
        "restore.candidates",
    } <= set(numeric_fields(HeartbeatRequest))
    assert {"resources.min_gpu_ram_gb", "checkpoint.interval_min", "policy.lease_window_s"} <= set(
        numeric_fields(JobSpec)
    )


# --- the reproductions: authenticated heartbeats with numbers DynamoDB cannot store -----------

BIG = "1" + "0" * 40  # 41 digits: past DynamoDB's 38
HEARTBEAT_CASES = [
    ("step", BIG),
    ("exit_code", BIG),
    ("bytes_downloaded", BIG),
    ("bytes_uploaded", BIG),
    ("agent_time", "1e400"),
    ("agent_time", "-1e400"),
    ("credentials_expire_at", "1e400"),
    ("generation", BIG),
    ("last_checkpoint.step", BIG),
    ("last_checkpoint.generation", BIG),
    ("restored_checkpoint.step", BIG),
    ("restore.candidates", BIG),
    ("restore.candidates", "-1"),
    ("restore.candidates", "17"),  # more than a generation is ever given
    ("gpu.utilization_pct", "1e400"),
    ("gpu.memory_used_mb", "1e400"),
    ("gpu.memory_total_mb", BIG),
    ("gpu.unresponsive_s", "1e400"),
]


@pytest.fixture
def live(api):
    job_id = running_job(api)
    assert api.heartbeat("POST", HB, body=heartbeat_body(job_id), headers=auth()).status == 200
    return job_id


def full_heartbeat(job_id: str) -> dict[str, Any]:
    """A heartbeat with every optional part present, so that each number has a place."""
    body = heartbeat_body(job_id)
    body["restored_checkpoint"] = {"step": 100, "generation": 1, "manifest_key": "m.json"}
    body["restore"] = {"outcome": "fresh", "candidates": 0, "skipped": []}
    return body


@pytest.mark.parametrize(("path", "literal"), HEARTBEAT_CASES)
def test_an_unstorable_number_in_a_heartbeat_is_a_400_naming_it(api, live, path, literal):
    body = full_heartbeat(live)
    raw = with_literal(body, path, literal)
    before = api.items()
    reply = api.heartbeat("POST", HB, body=raw, headers=JSON | auth(TOKEN))
    assert_rejected(api, reply, 400, "invalid_request", path)
    if "e400" in literal:
        reasons = [d["reason"] for d in reply.body["details"] if d["path"] == path]
        assert reasons == ["must be a finite number, not infinity (1e400 is read as infinity)"]
    assert api.items() == before


# --- the job spec: every numeric field, nested ones included ---------------------------------

SPEC_CASES = [
    ("budget_usd", "1e400"),
    ("budget_usd", "-1e400"),
    ("expected_hours", "1e400"),
    ("expected_startup_min", BIG),
    ("resources.gpu_count", BIG),
    ("resources.min_gpu_ram_gb", "1e400"),
    ("resources.max_usd_per_hour", "1e400"),
    ("data.download_gb", "1e400"),
    ("data.upload_gb_per_checkpoint", BIG),
    ("checkpoint.keep_last", BIG),
    ("checkpoint.interval_min", "1e400"),
    ("policy.heartbeat_interval_s", BIG),
    ("policy.lease_window_s", BIG),
    ("policy.gpu_idle_util_pct", "1e400"),
    ("expected_hours", "1e-400"),  # reads as 0.0: not > 0
    ("budget_usd", "1e-300"),  # nearer zero than 1e-9 (the earlier fix, kept)
]


@pytest.mark.parametrize(("path", "literal"), SPEC_CASES)
def test_an_unbounded_number_in_a_spec_is_a_400_naming_it(api, path, literal):
    before, executions = api.items(), api.executions()
    reply = api.jobs("POST", "/jobs", body=with_literal(spec(), path, literal), headers=JSON)
    assert_rejected(api, reply, 400, "invalid_request", path)
    if literal.endswith("e400"):
        reasons = [d["reason"] for d in reply.body["details"] if d["path"] == path]
        assert reasons == ["must be a finite number, not infinity (1e400 is read as infinity)"]
    assert api.items() == before
    assert api.executions() == executions


# --- the same, fuzzed: any number literal in any numeric field --------------------------------

number_literals = st.one_of(
    st.integers().map(str),
    st.integers(min_value=10**37, max_value=10**60).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.tuples(
        st.integers(min_value=-9, max_value=9), st.integers(min_value=-500, max_value=500)
    ).map(lambda t: f"{t[0]}e{t[1]}"),
)
HYPOTHESIS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@HYPOTHESIS
@given(path=st.sampled_from(sorted(numeric_fields(JobSpec))), literal=number_literals)
@example(path="expected_hours", literal="1e400")
@example(path="policy.no_progress_s", literal="1" + "0" * 45)
def test_any_number_in_any_spec_field_is_stored_or_cleanly_refused(api, path, literal):
    before = api.items()
    reply = api.jobs("POST", "/jobs", body=with_literal(spec(), path, literal), headers=JSON)
    if reply.status == 201:
        assert api.store.get_job(reply.body["job_id"]) is not None  # stored, and reads back
    else:
        assert_rejected(api, reply, 400)
        # the field, or the section whose cross-field rule it broke (lease vs timeout), or a
        # field of its section held to it (a timeout's floor of 3 × the heartbeat interval)
        named = [d["path"] for d in reply.body["details"]]
        section = path.rpartition(".")[0]
        assert any(
            path == n
            or path.startswith(f"{n}.")
            or n == "(root)"
            or (section and n.rpartition(".")[0] == section)
            for n in named
        ), named
        assert api.items() == before


@HYPOTHESIS
@given(path=st.sampled_from(sorted(numeric_fields(HeartbeatRequest))), literal=number_literals)
@example(path="agent_time", literal="1e400")
@example(path="gpu.memory_used_mb", literal="9e125")
@example(path="agent_time", literal="1e-166")  # was a 500: DynamoDB cannot store it
@example(path="gpu.utilization_pct", literal="1e-300")
@example(path="restore.candidates", literal="1" + "0" * 40)
def test_any_number_in_any_heartbeat_field_is_stored_or_cleanly_refused(api, live, path, literal):
    body = full_heartbeat(live)
    before = api.items()
    reply = api.heartbeat("POST", HB, body=with_literal(body, path, literal), headers=JSON | auth())
    if reply.status == 200:
        view = api.store.get_job_view(live)
        assert view is not None and view.generations  # stored, and reads back
    else:
        assert_rejected(api, reply, path=None)
        assert api.items() == before


# --- bodies nested past the limit, query parameters -------------------------------------------


@pytest.mark.parametrize("target", ["jobs", "heartbeat"])
@pytest.mark.parametrize("levels", [33, 5000])  # 5000: past the parser's recursion limit
def test_a_body_nested_deeper_than_32_levels_is_refused(api, live, target, levels):
    nested = "[" * (levels - 1) + "]" * (levels - 1)  # inside the body's own object
    before = api.items()
    if target == "jobs":
        raw = json.dumps(spec())[:-1] + f', "env": {{"A": {nested}}}}}'
        reply = api.jobs("POST", "/jobs", body=raw, headers=JSON)
    else:
        raw = json.dumps(heartbeat_body(live))[:-1] + f', "x": {nested}}}'
        reply = api.heartbeat("POST", HB, body=raw, headers=JSON | auth())
    assert_rejected(api, reply, 400, "malformed_json", "body")
    assert reply.body["details"] == [{"path": "body", "reason": "is nested deeper than 32 levels"}]
    assert api.items() == before


@pytest.mark.parametrize(
    "limit", ["1e400", "inf", "nan", "-1", "0", "201", BIG, "1" * 5000, "1e2", "0x10"]
)
def test_a_list_limit_out_of_bounds_or_not_a_number_is_a_400(api, limit):
    reply = api.jobs("GET", "/jobs", query={"limit": limit})
    assert_rejected(api, reply, 400, "invalid_request", "query.limit")


def test_a_heartbeat_number_nearer_zero_than_dynamodb_stores_is_not_a_500(api, live):
    """Found by the fuzz test above: `agent_time: 1e-166` passed `> 0` and failed the write
    (DynamoDB's smallest is 1e-130). Below 1e-9 a heartbeat number reads as 0: agent_time is
    then refused by its own bound, a utilisation of 1e-300 % is stored as 0."""
    before = api.items()
    body = heartbeat_body(live)
    refused = api.heartbeat("POST", HB, body=with_literal(body, "agent_time", "1e-166"),
                            headers=JSON | auth())  # fmt: skip
    assert_rejected(api, refused, 400, "invalid_request", "agent_time")
    assert api.items() == before
    accepted = api.heartbeat(
        "POST", HB, body=with_literal(body, "gpu.utilization_pct", "1e-300"), headers=JSON | auth()
    )
    assert accepted.status == 200, accepted.body
    generation = api.store.get_job_view(live).generations[0]
    assert generation.heartbeat is not None and generation.heartbeat.gpu.utilization_pct == 0.0


# --- the largest heartbeat the contract admits -----------------------------------------------


@pytest.mark.parametrize(
    ("char", "at_least_bytes"),
    # the worst: 25,681 and 146,961 bytes with a 64-character job id (this job's is shorter);
    # \x01 is written \u0001, six bytes a character
    [("a", 25_600), ("\x01", 146_800)],
    ids=["ascii", "control-characters"],
)
def test_the_largest_heartbeat_an_agent_can_send_is_accepted(api, live, char, at_least_bytes):
    """A restore that skipped 16 candidates puts 16 keys and reasons in every heartbeat after
    it (the storage isolation's restore report): every string at its longest, every number at
    its bound, built with the agent's own models and encoded as its HTTP client encodes it. A
    valid heartbeat refused for its size would be refused every time and cost the host."""
    key, reason, error = char * 1024, char * 300, char * 1024
    ref = protocol.CheckpointRef(
        step=10**15, generation=1, manifest_key=key, manifest_sha256="a" * 64
    )
    request = protocol.HeartbeatRequest(
        job_id=live,
        generation=1,
        phase="training",
        step=10**15,
        last_checkpoint=ref,
        restored_checkpoint=ref,
        restore=protocol.RestoreReport(
            outcome="fresh",
            candidates=16,
            skipped=[protocol.SkippedCheckpoint(manifest_key=key, reason=reason)] * 16,
        ),
        gpu=protocol.GpuProbe(
            available=True,
            responsive=False,
            utilization_pct=99.99999999999999,
            memory_used_mb=123_456_789.12345678,
            memory_total_mb=123_456_789.12345678,
            unresponsive_s=123_456_789.12345678,
            error=error,
        ),
        exit_code=-255,
        bytes_downloaded=10**18,
        bytes_uploaded=10**18,
        agent_time=12_345_678_901.123456,
        credentials_expire_at=12_345_678_901.123456,
    )
    sent = httpx.Request("POST", "http://api/agent/heartbeat", json=request.model_dump(mode="json"))
    assert len(sent.content) >= at_least_bytes
    reply = api.heartbeat("POST", HB, body=sent.content.decode("utf-8"), headers=JSON | auth())
    assert reply.status == 200, reply.body
    generation = api.store.get_job_view(live).generations[0]
    assert generation.heartbeat is not None and generation.heartbeat.restore is not None
    assert len(generation.heartbeat.restore.skipped) == 16
