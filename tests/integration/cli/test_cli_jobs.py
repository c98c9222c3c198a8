"""`tether submit | jobs | status | cancel | logs | secrets | destroy` against the real API
handlers under moto. The CLI's HTTP goes through an `httpx.MockTransport` that checks the SigV4
signature (as API Gateway's IAM authorizer would), turns the request into an API Gateway event
and calls the real handler; log segments come from an in-memory bucket behind the same
transport."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import httpx
import pytest
import yaml
from moto import mock_aws

from functions.adapters import factory
from functions.adapters.r2 import ObjectInfo
from functions.adapters.store import JobStore
from functions.adapters.table import create_table
from functions.api import job_service, jobs, logs
from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.job import Generation, Heartbeat, JobState, TimelineEvent
from functions.settings import (
    CLOUDFLARE_SECRET_ARN_ENV,
    METRICS_NAMESPACE_ENV,
    SERVICE_NAME_ENV,
    STATE_MACHINE_ARN_ENV,
    TABLE_NAME_ENV,
)
from infra import names
from tests.paths import ROOT
from tests.unit.cli.test_sigv4 import verify_sigv4
from tether_cli import api_client, deploy
from tether_cli import jobs as cli_jobs
from tether_cli.main import main
from tether_cli.output import CliError
from tether_local.aws.apigw import LocalLambdaContext, http_api_event

# The example without its code.dir: this backend has no code bucket (tests/e2e ship code).
EXAMPLE = str(ROOT / "tests" / "fixtures" / "tiny-cpu-no-code.yaml")
TABLE = "tether-cli-test"
API_URL = "https://cliapi.execute-api.us-east-1.amazonaws.com/"
R2_HOST = "r2.test"
PASS = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}})


class FakeBucket:
    """The R2 bucket as the logs handler sees it; URLs are served by the same transport."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.expire_once: set[str] = set()
        self.on_put: Callable[[str, int], None] = lambda job_id, generation: None
        # What an expired URL gets (R2: 400 ExpiredRequest past the URL's own expiry, 401
        # Unauthorized once the credentials that signed it have expired).
        self.expired_answer = (400, "ExpiredRequest")

    def put(self, job_id: str, generation: int, sequence: int, text: str) -> None:
        """A segment as generation `generation`'s agent writes it (that generation exists)."""
        self.on_put(job_id, generation)
        self.objects[f"jobs/{job_id}/g{generation}/logs/{sequence:06d}.log"] = text.encode()

    def list_after(self, prefix: str, start_after: str | None, limit: int) -> list[ObjectInfo]:
        keys = sorted(k for k in self.objects if k.startswith(prefix))
        keys = [k for k in keys if start_after is None or k > start_after]
        return [ObjectInfo(k, len(self.objects[k])) for k in keys[:limit]]

    def presign_get(self, prefix: str, key: str, expires_s: int) -> tuple[str, float]:
        assert key.startswith(prefix), (prefix, key)  # a key is read only under its prefix
        return f"https://{R2_HOST}/{quote(key)}?X-Amz-Signature=ok", 2e9  # as R2's signer

    def get_bytes(self, prefix: str, key: str, max_bytes: int) -> bytes | None:
        assert key.startswith(prefix), (prefix, key)
        return self.objects.get(key)

    def serve(self, request: httpx.Request) -> httpx.Response:
        key = request.url.path.lstrip("/")
        if key in self.expire_once:
            self.expire_once.discard(key)
            status, code = self.expired_answer
            return httpx.Response(status, text=f"<Error><Code>{code}</Code></Error>")
        if key not in self.objects:
            return httpx.Response(404)
        return httpx.Response(200, content=self.objects[key])


class Backend:
    """The API behind a MockTransport: signature check, then the real handlers."""

    def __init__(self, store: JobStore, bucket: FakeBucket) -> None:
        self.store = store
        self.bucket = bucket
        bucket.on_put = self._generation_exists
        self.requests: list[httpx.Request] = []
        self.drop_next_reply = False

    def _generation_exists(self, job_id: str, generation: int) -> None:
        """The job got as far as `generation` (the logs API lists the generations it had)."""
        job = self.store.get_job(job_id)
        if job is not None and job.current_generation < generation:
            self.store.client.update_item(
                TableName=self.store.table_name,
                Key={"pk": {"S": f"JOB#{job_id}"}, "sk": {"S": "JOB"}},
                UpdateExpression="SET current_generation = :g",
                ExpressionAttributeValues={":g": {"N": str(generation)}},
            )

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == R2_HOST:
            return self.bucket.serve(request)
        request.read()
        self.requests.append(request)
        try:
            # The caller's secret: whatever the default chain holds (moto sets its own).
            key_id = verify_sigv4(request, os.environ["AWS_SECRET_ACCESS_KEY"])
        except (AssertionError, KeyError):
            return httpx.Response(403, json={"message": "Forbidden"})
        path = request.url.path
        handler = logs.handler if path.endswith(("/logs", "/files")) else jobs.handler
        event = http_api_event(
            request.method,
            path,
            body=request.content.decode() if request.content else None,
            headers=dict(request.headers),
            query=dict(request.url.params) or None,
            iam_arn=f"arn:aws:iam::123456789012:user/{key_id}",
        )
        with contextlib.redirect_stdout(io.StringIO()):  # the handlers' EMF lines
            result = handler(event, LocalLambdaContext())
        response = httpx.Response(
            result["statusCode"],
            content=(result.get("body") or "").encode(),
            headers=result.get("headers") or {},
        )
        if self.drop_next_reply:  # the job is stored, but the reply never arrives
            self.drop_next_reply = False
            raise httpx.ReadError("connection reset")
        return response

    def job_ids(self) -> list[str]:
        return [j.job_id for j in self.store.list_jobs(state=None, limit=100, token=None).jobs]


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    with mock_aws():
        ddb = boto3.client("dynamodb")
        create_table(ddb, TABLE)
        arn = boto3.client("stepfunctions").create_state_machine(
            name="lifecycle", definition=PASS, roleArn="arn:aws:iam::123456789012:role/x"
        )["stateMachineArn"]
        for key, value in {
            TABLE_NAME_ENV: TABLE,
            STATE_MACHINE_ARN_ENV: arn,
            SERVICE_NAME_ENV: "tether-test",
            METRICS_NAMESPACE_ENV: "TetherTest",
            CLOUDFLARE_SECRET_ARN_ENV: "arn:aws:secretsmanager:us-east-1:123456789012:secret:cf",
            api_client.API_URL_ENV: API_URL,
        }.items():
            monkeypatch.setenv(key, value)
        factory.reset()  # a cold start
        bucket = FakeBucket()
        backend = Backend(JobStore(TABLE, ddb), bucket)
        monkeypatch.setattr(factory, "read_only_bucket", lambda *_: bucket)
        transport = httpx.MockTransport(backend)

        def connect(args: argparse.Namespace) -> api_client.TetherApi:
            target = api_client.resolve_api_url(local=args.local)
            return api_client.TetherApi(target, transport=transport, sleep=lambda _s: None)

        monkeypatch.setattr(cli_jobs, "connect", connect)
        yield backend
        factory.reset()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def submit(capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    code, out, err = run(capsys, "submit", EXAMPLE, "--json", *extra)
    assert code == 0, err
    return str(json.loads(out)["job_id"])


def finish_job(store: JobStore, job_id: str, state: JobState = JobState.FINISHED) -> None:
    store.transition_job(
        job_id,
        state,
        expected=list(JobState),
        now=1.9e9,
        event=TimelineEvent(job_id=job_id, at=1.9e9, kind="finished", message="done"),
    )


# --- submit -----------------------------------------------------------------------------------


def test_submit_validates_signs_and_prints_the_job(backend: Backend, capsys) -> None:
    code, out, err = run(capsys, "submit", EXAMPLE)
    assert code == 0, err
    (job_id,) = backend.job_ids()
    assert f"submitted: {job_id} (PENDING)" in out
    assert "plan: job 'tiny-cpu'" in out and "budget $" in out
    assert out.endswith(
        "note: marketplace hosts can see everything on the machine (the host's operator has root "
        "on it): fine for public models and data and non-sensitive fine-tunes, not for regulated "
        "or secret data.\n"
    )
    (request,) = backend.requests
    assert request.headers["idempotency-key"].startswith("cli-")
    job = backend.store.get_job(job_id)
    assert job is not None
    assert job.submitted_by.endswith(f":user/{os.environ['AWS_ACCESS_KEY_ID']}")


def test_a_retried_submit_never_creates_a_second_job(backend: Backend, capsys) -> None:
    backend.drop_next_reply = True
    code, out, err = run(capsys, "submit", EXAMPLE, "--json")
    assert code == 0, err
    assert len(backend.requests) == 2  # the lost reply was retried…
    assert len({r.headers["idempotency-key"] for r in backend.requests}) == 1  # …with one key
    assert backend.job_ids() == [json.loads(out)["job_id"]]
    assert json.loads(out)["replayed"] is True


def test_resubmitting_with_the_same_key_is_reported_not_duplicated(backend, capsys) -> None:
    first = submit(capsys, "--idempotency-key", "train-2026-01")
    code, out, _ = run(capsys, "submit", EXAMPLE, "--idempotency-key", "train-2026-01")
    assert code == 0
    assert f"already submitted (same Idempotency-Key): {first}" in out
    assert backend.job_ids() == [first]


def test_the_fixture_is_the_example_without_its_code() -> None:
    example = yaml.safe_load((ROOT / "examples" / "tiny-cpu" / "job.yaml").read_text())
    assert example.pop("code") == {"dir": "."}
    assert yaml.safe_load(Path(EXAMPLE).read_text()) == example


def test_an_invalid_spec_is_refused_before_anything_is_sent(backend, capsys, tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(EXAMPLE).read_text().replace("budget_usd:", "budget_usd: -1 #"))
    code, out, err = run(capsys, "submit", str(bad))
    assert code == 2 and out == ""
    assert "budget_usd" in err and "Traceback" not in err
    assert backend.requests == []


def test_a_bad_git_code_spec_is_refused_before_anything_is_sent(backend, capsys, tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    spec = Path(EXAMPLE).read_text()
    bad.write_text(spec + "code: {git: 'https://github.com/u/r.git', commit: main}\n")
    code, out, err = run(capsys, "submit", str(bad))
    assert code == 2 and out == ""
    assert "code.commit" in err and "full commit SHA" in err and "Traceback" not in err
    assert backend.requests == []


# --- jobs / status / cancel ---------------------------------------------------------------


def test_jobs_lists_and_filters(backend: Backend, capsys) -> None:
    first, second = submit(capsys), submit(capsys)
    finish_job(backend.store, first)
    code, out, _ = run(capsys, "jobs")
    assert code == 0 and first in out and second in out and "FINISHED" in out
    code, out, _ = run(capsys, "jobs", "--state", "pending", "--json")
    assert code == 0
    assert [j["job_id"] for j in json.loads(out)["jobs"]] == [second]


def test_status_shows_state_spend_checkpoint_health_and_timeline(backend, capsys) -> None:
    job_id = submit(capsys)
    code, out, _ = run(capsys, "status", job_id)
    assert code == 0
    assert f"job       {job_id} (tiny-cpu)" in out
    assert "state     PENDING" in out
    assert "spend     $0.000 of $" in out
    assert "host      none yet" in out and "checkpoint none uploaded yet" in out
    assert "health    no heartbeat yet" in out
    assert "timeline" in out and "submitted" in out
    code, out, _ = run(capsys, "status", job_id, "--json")
    view = json.loads(out)
    assert view["job_id"] == job_id and view["spend"]["spent_usd"] == 0


def test_status_of_an_unknown_job_is_one_line_and_exit_2(backend, capsys) -> None:
    code, out, err = run(capsys, "status", "nope-12345678")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "tether: error: no job 'nope-12345678': path.id: unknown job"
    ]


def test_cancel_stops_the_job_and_refuses_an_ended_one(backend, capsys) -> None:
    job_id = submit(capsys)
    code, out, _ = run(capsys, "cancel", job_id)
    assert code == 0 and f"cancel requested: {job_id} is STOPPING" in out
    code, _, _ = run(capsys, "cancel", job_id)  # idempotent while stopping
    assert code == 0
    finish_job(backend.store, job_id, JobState.CANCELLED)
    code, _, err = run(capsys, "cancel", job_id)
    assert code == 2 and "has already ended (CANCELLED)" in err


# --- logs -------------------------------------------------------------------------------------


def test_logs_prints_every_segment_in_order_across_generations(backend, capsys) -> None:
    job_id = submit(capsys)
    backend.bucket.put(job_id, 2, 0, "g2 first\n")
    backend.bucket.put(job_id, 1, 1, "g1 second\n")
    backend.bucket.put(job_id, 1, 0, "g1 first\n")
    code, out, _ = run(capsys, "logs", job_id)
    assert code == 0
    assert out == "g1 first\ng1 second\ng2 first\n"


@pytest.mark.parametrize(
    "expired_answer", [(400, "ExpiredRequest"), (401, "Unauthorized"), (403, "AccessDenied")]
)
def test_logs_pages_and_refetches_an_expired_url(
    backend, capsys, monkeypatch, expired_answer
) -> None:
    backend.bucket.expired_answer = expired_answer
    monkeypatch.setattr(cli_jobs, "LOG_PAGE", 2)
    job_id = submit(capsys)
    for i in range(5):
        backend.bucket.put(job_id, 1, i, f"line {i}\n")
    backend.bucket.expire_once.add(f"jobs/{job_id}/g1/logs/000003.log")
    code, out, _ = run(capsys, "logs", job_id, "--json")
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["text"] for r in records] == [f"line {i}\n" for i in range(5)]
    assert records[0]["name"] == "g0001-000000.log" and records[0]["generation"] == 1


def test_logs_follow_tails_across_a_replacement_until_the_job_ends(backend, capsys, monkeypatch):
    job_id = submit(capsys)
    backend.bucket.put(job_id, 1, 0, "g1: step 1\n")
    polls: list[float] = []

    def sleep(seconds: float) -> None:  # each poll, the world moves on
        polls.append(seconds)
        if len(polls) == 1:
            backend.bucket.put(job_id, 1, 1, "g1: step 2\n")
        elif len(polls) == 2:  # host replaced: generation 2 resumes
            backend.bucket.put(job_id, 2, 0, "g2: restored step 2\n")
        elif len(polls) == 3:
            backend.bucket.put(job_id, 2, 1, "g2: done\n")
            finish_job(backend.store, job_id)

    real = cli_jobs.log_segments
    monkeypatch.setattr(cli_jobs, "log_segments", lambda *a, **k: real(*a, **{**k, "sleep": sleep}))
    code, out, _ = run(capsys, "logs", job_id, "--follow", "--interval", "2")
    assert code == 0
    assert out == "g1: step 1\ng1: step 2\ng2: restored step 2\ng2: done\n"
    assert polls == [2.0, 2.0, 2.0]  # the last listing after the end found nothing new


def ended_generation(store: JobStore, job_id: str, n: int, **fields: Any) -> None:
    """Generation `n` as the lifecycle leaves it once its host is destroyed."""
    values: dict[str, Any] = {
        "job_id": job_id, "generation": n, "token_hash": "x", "is_current": False,
        "status": "superseded", "ended_at": 1.8e9, "created_at": 1.8e9 - 600,
    }  # fmt: skip
    store.put_generation(Generation(**(values | fields)))


BEAT = Heartbeat(at=1.8e9, agent_time=1.8e9, phase="restoring", gpu=GpuProbe(available=True))


def test_logs_name_each_generation_without_a_log_in_its_place(backend, capsys) -> None:
    job_id = submit(capsys)
    backend.bucket.put(job_id, 1, 0, "g1 first\n")
    backend.bucket.put(job_id, 4, 0, "g4 first")  # no line break at its end
    ended_generation(backend.store, job_id, 1, heartbeat=BEAT)
    ended_generation(backend.store, job_id, 2, heartbeat=BEAT, replaced_for="dead")
    ended_generation(backend.store, job_id, 3)  # destroyed before its agent reported
    code, out, _ = run(capsys, "logs", job_id)
    assert code == 0
    assert out == (
        "g1 first\n"
        "[tether] generation 2: no log — its host stopped answering before the first upload\n"
        "[tether] generation 3: no log — its host was destroyed before its agent reported\n"
        "g4 first"
    )
    # The current generation of a job still running may upload yet: not named.
    backend.bucket.on_put(job_id, 5)  # generation 5 rented, nothing uploaded yet
    code, out, _ = run(capsys, "logs", job_id, "--json")
    records = [json.loads(line) for line in out.splitlines()]
    assert [(r["generation"], r.get("missing", False)) for r in records] == [
        (1, False), (2, True), (3, True), (4, False),
    ]  # fmt: skip
    assert records[1]["reason"] == "its host stopped answering before the first upload"
    # Once the job has ended, its last generation without a log is named too.
    finish_job(backend.store, job_id)
    code, out, _ = run(capsys, "logs", job_id)
    assert out.endswith(
        "g4 first\n[tether] generation 5: no log — no record of its host was found\n"
    )


def test_logs_follow_names_a_missing_generation_once(backend, capsys, monkeypatch) -> None:
    job_id = submit(capsys)
    backend.bucket.put(job_id, 1, 0, "g1: step 1\n")
    polls: list[float] = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 1:  # generation 2 came and went without a log; 3 is current
            ended_generation(backend.store, job_id, 2, heartbeat=BEAT)
            backend.bucket.on_put(job_id, 3)
        elif len(polls) == 3:
            backend.bucket.put(job_id, 3, 0, "g3: restored\n")
            finish_job(backend.store, job_id)

    real = cli_jobs.log_segments
    monkeypatch.setattr(cli_jobs, "log_segments", lambda *a, **k: real(*a, **{**k, "sleep": sleep}))
    code, out, _ = run(capsys, "logs", job_id, "--follow", "--interval", "1")
    assert code == 0
    assert out == (
        "g1: step 1\n"
        "[tether] generation 2: no log — its host was destroyed before the first upload\n"
        "g3: restored\n"
    )


def test_logs_of_an_unknown_job_and_a_bad_cursor(backend, capsys) -> None:
    code, _, err = run(capsys, "logs", "nope-1")
    assert code == 2 and "no job 'nope-1'" in err


# --- arguments, targets, credentials ---------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["logs"], "the following arguments are required: JOB"),
        (["jobs", "--limit", "0"], "argument --limit: must be between 1 and 1000, got 0"),
        (["jobs", "--state", "sleeping"], "argument --state: unknown state 'sleeping'"),
        (["submit", EXAMPLE, "--idempotency-key", "two words"], "argument --idempotency-key"),
        (["logs", "j", "--interval", "0"], "argument --interval: must be between 0.1"),
        (
            ["deploy", "--email", "not-an-address"],
            "argument --alarm-email/--email: not an e-mail address",
        ),
        (["secrets", "set", "github"], "'github' is not a valid secret name"),
        (["status", "j", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, argv: list[str], fragment: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tether: error:") and fragment in lines[0]


def test_api_url_comes_from_local_state_env_or_stack_outputs(tmp_path, monkeypatch) -> None:
    state = tmp_path / "local-stack.json"
    env = {api_client.LOCAL_STATE_ENV: str(state)}
    assert api_client.resolve_api_url(local=True, environ=env).url == "http://127.0.0.1:8787/"
    api_client.write_local_state("http://127.0.0.1:9999", state)
    assert api_client.resolve_api_url(local=True, environ=env).url == "http://127.0.0.1:9999/"
    env[api_client.API_URL_ENV] = "https://x.example/prod"
    assert api_client.resolve_api_url(local=False, environ=env).url == "https://x.example/prod/"
    target = api_client.resolve_api_url(
        local=False,
        environ={},
        describe_stacks=lambda stack: {names.OUTPUT_API_URL: f"https://{stack.lower()}.test/"},
    )
    assert (target.url, target.source) == ("https://tether.test/", "stack Tether")
    with pytest.raises(CliError, match="has no ApiUrl output"):
        api_client.resolve_api_url(local=False, environ={}, describe_stacks=lambda _s: {})
    with pytest.raises(CliError, match="not an http"):
        api_client.resolve_api_url(local=False, environ={api_client.API_URL_ENV: "ftp://x"})


def test_no_credentials_is_a_clear_error(capsys, monkeypatch, tmp_path) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv(api_client.API_URL_ENV, API_URL)
    code, _, err = run(capsys, "jobs")
    assert code == 1 and "no AWS credentials found" in err


def test_an_unsigned_or_forbidden_reply_names_the_permission(capsys) -> None:
    error = api_client.api_error("GET", "jobs", 403, {"message": "Forbidden"})
    assert error.exit_code == 1 and "execute-api:Invoke" in error.message


def test_the_cli_checks_idempotency_keys_like_the_api() -> None:
    assert api_client.IDEMPOTENCY_KEY_PATTERN.pattern == job_service.IDEMPOTENCY_KEY_PATTERN.pattern


# --- deploy / destroy / secrets ----------------------------------------------------------------


def test_secrets_set_reads_stdin_and_writes_an_ssm_secure_string(capsys, monkeypatch) -> None:
    with mock_aws():
        ssm = boto3.client("ssm")
        values = ["a" * 32, "cf-token-value", "b" * 32, "tether-ckpt"]
        monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(values) + "\n"))
        code, out, err = run(capsys, "secrets", "set", "cloudflare")
        assert code == 0, err
        parameter = ssm.get_parameter(Name=names.CLOUDFLARE_PARAMETER, WithDecryption=True)
        assert parameter["Parameter"]["Type"] == "SecureString"
        stored = json.loads(parameter["Parameter"]["Value"])
        assert stored == dict(zip(names.CLOUDFLARE_SECRET_FIELDS, values, strict=True))
        assert "cf-token-value" not in out + err  # never echoed
        # a second set overwrites (a rotated key)
        monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(values) + "\n"))
        code, out, err = run(capsys, "secrets", "set", "cloudflare")
        assert code == 0 and "version 2" in out, err


def test_secrets_set_rejects_bad_values_and_needs_no_stack(capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("acct\ntoken\nkey\nBad_Bucket\n"))
    code, _, err = run(capsys, "secrets", "set", "cloudflare")
    assert code == 2
    assert "account_id:" in err and "parent_access_key_id:" in err and "bucket:" in err
    with mock_aws():
        monkeypatch.setattr("sys.stdin", io.StringIO("vast key 123\n"))
        code, _, err = run(capsys, "secrets", "set", "vast")
        assert code == 2 and "Vast API key: must be" in err
        # the parameter needs no stack (CloudFormation cannot create a SecureString)
        monkeypatch.setattr("sys.stdin", io.StringIO("vast-key-123\n"))
        code, _, err = run(capsys, "secrets", "set", "vast")
        assert code == 0, err
        stored = boto3.client("ssm").get_parameter(
            Name=names.VAST_KEY_PARAMETER, WithDecryption=True
        )["Parameter"]["Value"]
        assert stored == "vast-key-123"


def test_deploy_without_node_says_what_to_install() -> None:
    with pytest.raises(CliError, match=r"install Node\.js 22"):
        deploy.check_node(which=lambda _name: None)


def test_destroy_refuses_with_active_jobs_and_asks_for_confirmation(capsys, monkeypatch) -> None:
    monkeypatch.setattr(deploy, "active_jobs", lambda region: ["tiny-cpu-1234abcd"])
    code, _, err = run(capsys, "destroy", "--yes")
    assert code == 2 and "tiny-cpu-1234abcd" in err and "--force" in err
    monkeypatch.setattr(deploy, "active_jobs", lambda region: [])
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    ran: list[Any] = []

    def record(command: Any, **_: Any) -> int:
        ran.append(command)
        return 0

    monkeypatch.setattr(deploy, "run_command", record)
    code, _, err = run(capsys, "destroy")
    assert code == 2 and "pass --yes" in err and ran == []
