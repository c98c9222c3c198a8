"""The tether API from the command line: where it is, and SigV4-signed calls to it.

Where (first match wins):
1. `--local`: the API of `tether local up`, read from its state file (`build/local-stack.json`,
   `{"api_url": …, "aws_url": …}`; `TETHER_LOCAL_STATE` names another), else its default port.
   Nothing answering there is "start it with `tether local up`".
2. `TETHER_API_URL`.
3. The deployed stack's `ApiUrl` output (CloudFormation `DescribeStacks`, stack `Tether` or
   `TETHER_STACK_NAME`, in the region of the one rule: `aws_context.resolve_region`).

Who: with `--local`, the local stack's own key (`aws_context.LOCAL_CREDENTIALS`; no AWS account,
config or variable is read); else the user's AWS credentials from boto3's default chain
(environment, `AWS_PROFILE`, SSO, instance role). Every request is signed with botocore's SigV4
signer for `execute-api`; the API's IAM authorizer checks it. Presigned log URLs are fetched
unsigned.

Errors become `CliError`s with one line: the API's own message and its `path: reason` details
for a 4xx (exit 2), a hint for 403 (exit 1), and "could not reach" for the network (exit 1).
Safe requests (GET, cancel, and a submit with its Idempotency-Key) are retried on network errors,
429 and 5xx, so a lost reply never submits a job twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials

from infra import names
from tether_cli import aws_context
from tether_cli.aws_context import LOCAL_CREDENTIALS as LOCAL_CREDENTIALS
from tether_cli.aws_context import LOCAL_REGION as LOCAL_REGION
from tether_cli.aws_context import LOCAL_UP_HINT
from tether_cli.output import EXIT_FAILURE, EXIT_USAGE, CliError

API_URL_ENV = "TETHER_API_URL"
STACK_NAME_ENV = "TETHER_STACK_NAME"
LOCAL_STATE_ENV = "TETHER_LOCAL_STATE"
LOCAL_STATE_FILE = Path("build") / "local-stack.json"
LOCAL_DEFAULT_URL = "http://127.0.0.1:8787"  # `tether local up`'s default port
SIGNING_SERVICE = "execute-api"
DEFAULT_REGION = "us-east-1"
_EXECUTE_API_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com$")
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# The API's rule (functions/api/job_service.py; a test keeps the two equal), checked here so a
# bad --idempotency-key is a usage error before anything is sent.
IDEMPOTENCY_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
ATTEMPTS = 3


@dataclass(frozen=True)
class ApiTarget:
    url: str
    source: str  # said in error messages: where the URL came from
    local: bool = False  # the local stack's: signed with its key; nothing there: `local up`
    region: str | None = None  # the region resolved for it (signing falls back to it)


# --- where ---------------------------------------------------------------------------------


def write_local_state(
    api_url: str,
    path: Path | None = None,
    *,
    aws_url: str = "",
    control: Mapping[str, str] | None = None,
) -> Path:
    """For `tether local up`: record the API URL so `--local` finds it, its moto's (for
    `secrets --local`), and the control endpoint's URL and token (`tether_cli/local.py`);
    readable by this user only."""
    target = path or local_state_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    state = {"api_url": api_url, **({"aws_url": aws_url} if aws_url else {}), **(control or {})}
    # Written whole under another name, then renamed: a `--local` command reading at the same
    # moment finds the old file or the new one, never an empty or half-written one.
    fd, staged_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    staged = Path(staged_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:  # mkstemp's mode: 0600
            out.write(json.dumps(state) + "\n")
        staged.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            staged.unlink()
        raise
    return target


def read_local_state(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The local stack's state file, or None when there is none; a CliError when it is not one."""
    state = local_state_path(environ)
    if not state.exists():
        return None
    try:
        found = json.loads(state.read_text(encoding="utf-8"))
        return {"api_url": str(found["api_url"]), "aws_url": str(found.get("aws_url") or "")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CliError(
            f"--local: {state} is not a local-stack state file ({exc}); restart `tether local up`"
        ) from None


def local_aws_url(environ: Mapping[str, str] | None = None) -> str:
    """The local stack's AWS (moto) endpoint from its state file; a CliError saying to start
    the stack when there is none."""
    state = read_local_state(environ)
    where = local_state_path(environ)
    if state is None:
        raise CliError(
            f"--local: no local stack is running here (no {where}): {LOCAL_UP_HINT}",
            EXIT_FAILURE,
        )
    if not state["aws_url"]:  # written by an older `tether local up`
        raise CliError(
            f"--local: {where} names no local AWS endpoint: restart `tether local up`",
            EXIT_FAILURE,
        )
    return state["aws_url"]


def target_flags(args: object) -> str:
    """The flags that chose the API (` --local`, ` --region R`), for the `next:` hints, so a
    suggested command talks to the same stack."""
    if getattr(args, "local", False):
        return " --local"
    region = getattr(args, "region", None)
    return f" --region {region}" if region else ""


def local_state_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env[LOCAL_STATE_ENV]) if env.get(LOCAL_STATE_ENV) else LOCAL_STATE_FILE


def resolve_api_url(
    *,
    local: bool,
    environ: Mapping[str, str] | None = None,
    describe_stacks: Callable[[str], Mapping[str, str]] | None = None,
    region: str | None = None,
) -> ApiTarget:
    """Where the API is (module docstring). `region`: the `--region` flag, if given."""
    env = os.environ if environ is None else environ
    if local:
        state = read_local_state(env)
        if state is None:
            return ApiTarget(
                _checked_url(LOCAL_DEFAULT_URL, "--local"),
                f"--local: no {local_state_path(env)}, so the default port of `tether local up`",
                local=True,
            )
        where = local_state_path(env)
        return ApiTarget(
            _checked_url(state["api_url"], str(where)), f"--local ({where})", local=True
        )
    if env.get(API_URL_ENV):
        choice = aws_context.region_choice(region, env)
        return ApiTarget(
            _checked_url(env[API_URL_ENV], API_URL_ENV),
            API_URL_ENV,
            region=choice[0] if choice else None,
        )
    stack = env.get(STACK_NAME_ENV) or names.STACK_NAME
    resolved: str | None = None
    outputs: Mapping[str, str]
    if describe_stacks is None:
        # The credentials first, then the region (one line for each that is missing).
        access = aws_context.aws_access(region, env)
        resolved = access.region
        outputs = stack_outputs(stack, access.region, access.region_source, access.session)
    else:
        outputs = describe_stacks(stack)
    url = outputs.get(names.OUTPUT_API_URL)
    if not url:
        raise CliError(
            f"stack {stack} has no {names.OUTPUT_API_URL} output: is it fully deployed? "
            "(`tether deploy`)",
            EXIT_FAILURE,
        )
    return ApiTarget(_checked_url(url, f"stack {stack}"), f"stack {stack}", region=resolved)


def _checked_url(url: str, source: str) -> str:
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise CliError(f"{source}: not an http(s) URL: {url!r}")
    return url.rstrip("/") + "/"


def stack_outputs(
    stack_name: str, region: str | None = None, region_source: str = "", session: Any = None
) -> dict[str, str]:
    """The deployed stack's outputs (in `region`, else the one rule's; through `session`, else
    a new default one), or a CliError that says how to get them."""
    from botocore.exceptions import BotoCoreError, ClientError

    if region is None:
        region, region_source = aws_context.resolve_region(None)
    try:
        client = (session or aws_context.user_session()).client(
            "cloudformation", region_name=region
        )
        reply = client.describe_stacks(StackName=stack_name)
    except ClientError as exc:
        message = exc.response.get("Error", {}).get("Message", str(exc))
        if "does not exist" in message:
            source = f", from {region_source}" if region_source else ""
            raise CliError(
                f"stack {stack_name} is not deployed in this account and region ({region}"
                f"{source}): deploy it (`tether deploy --region {region}`), pass --region with "
                f"the region it is in, set {API_URL_ENV}, or use --local with `tether local up`",
                EXIT_FAILURE,
            ) from None
        raise aws_context.aws_failure(
            exc, action=f"read stack {stack_name}", region=region, region_source=region_source
        ) from None
    except BotoCoreError as exc:
        raise aws_context.aws_failure(
            exc, action=f"read stack {stack_name}", region=region, region_source=region_source
        ) from None
    stacks = reply.get("Stacks", [])
    outputs = stacks[0].get("Outputs", []) if stacks else []
    return {o["OutputKey"]: o["OutputValue"] for o in outputs if "OutputKey" in o}


# --- who -----------------------------------------------------------------------------------


def region_for(url: str, configured: str | None) -> str:
    """The region to sign for: the one in an execute-api host name, else the configured one."""
    match = _EXECUTE_API_HOST.match(httpx.URL(url).host)
    if match:
        return match.group(1)
    return configured or DEFAULT_REGION


def sign_request(
    credentials: ReadOnlyCredentials,
    region: str,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    service: str = SIGNING_SERVICE,
) -> dict[str, str]:
    """The headers to send: `headers` plus SigV4's (Authorization, X-Amz-Date, token)."""
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    SigV4Auth(credentials, service, region).add_auth(request)
    return {str(k): str(v) for k, v in request.headers.items()}


# --- calls ---------------------------------------------------------------------------------


@dataclass
class ApiReply:
    status: int
    body: Any
    headers: httpx.Headers


class TetherApi:
    """Signed calls to one tether API. `transport`/`sleep` are the seams for tests."""

    def __init__(
        self,
        target: ApiTarget,
        *,
        credentials: ReadOnlyCredentials | None = None,
        region: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.target = target
        if credentials is None and target.local:
            credentials, region = LOCAL_CREDENTIALS, LOCAL_REGION
        elif credentials is None:
            credentials = aws_context.user_credentials()
            if not (region or target.region):
                choice = aws_context.region_choice(None)
                region = choice[0] if choice else None
        self._credentials = credentials
        self._region = region_for(target.url, region or target.region)
        self._client = httpx.Client(transport=transport, timeout=timeout_s)
        self._sleep = sleep

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> TetherApi:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
        retry: bool = True,
    ) -> ApiReply:
        # The query is encoded once, strictly (RFC 3986), and sent exactly as it was signed.
        url = self.target.url + path.lstrip("/")
        if params:
            url += "?" + "&".join(
                f"{quote(str(k), safe='-_.~')}={quote(str(v), safe='-_.~')}"
                for k, v in sorted(params.items())
            )
        data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        base_headers = {"accept": "application/json", **(headers or {})}
        if body is not None:
            base_headers["content-type"] = "application/json"
        attempts = ATTEMPTS if retry else 1
        for attempt in range(1, attempts + 1):
            # Signed per attempt: the signature carries a timestamp.
            signed = sign_request(self._credentials, self._region, method, url, base_headers, data)
            try:
                response = self._client.request(method, url, content=data, headers=signed)
            except httpx.HTTPError as exc:
                if self.target.local and isinstance(exc, httpx.ConnectError):
                    raise CliError(
                        f"no local stack is running at {self.target.url} "
                        f"({self.target.source}): {LOCAL_UP_HINT}",
                        EXIT_FAILURE,
                    ) from None
                if attempt < attempts:
                    self._backoff(attempt)
                    continue
                raise CliError(
                    f"could not reach the tether API at {self.target.url} "
                    f"(from {self.target.source}): {type(exc).__name__}: {exc}",
                    EXIT_FAILURE,
                ) from None
            if response.status_code in RETRY_STATUSES and attempt < attempts:
                self._backoff(attempt, response.headers.get("retry-after"))
                continue
            return self._reply(method, path, response)
        raise AssertionError("unreachable")

    def _backoff(self, attempt: int, retry_after: str | None = None) -> None:
        delay = 0.5 * 2 ** (attempt - 1) * random.uniform(0.5, 1.0)
        if retry_after and retry_after.isdigit():
            delay = min(float(retry_after), 10.0)
        self._sleep(delay)

    def _reply(self, method: str, path: str, response: httpx.Response) -> ApiReply:
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = response.text
        if response.is_success:
            return ApiReply(response.status_code, body, response.headers)
        raise api_error(method, path, response.status_code, body)

    # -- the routes --------------------------------------------------------------------------

    def submit(self, spec: Mapping[str, Any], idempotency_key: str) -> ApiReply:
        return self.request(
            "POST", "jobs", body=dict(spec), headers={"idempotency-key": idempotency_key}
        )

    def code_upload(self, sha256: str, size_bytes: int) -> dict[str, Any]:
        """Where to PUT a packed working directory, or `exists: true` (POST /code/uploads)."""
        body = {"sha256": sha256, "size_bytes": size_bytes}
        return dict(self.request("POST", "code/uploads", body=body).body)

    def put_file(self, url: str, path: Path, on_bytes: Callable[[int], None]) -> None:
        """PUT the file at `path` to a presigned URL, streamed, reporting bytes as they go.
        Failures are retried from the start."""
        size = path.stat().st_size
        for attempt in range(1, ATTEMPTS + 1):
            sent = 0

            def chunks() -> Iterator[bytes]:
                nonlocal sent
                with path.open("rb") as source:
                    while chunk := source.read(1024 * 1024):
                        sent += len(chunk)
                        on_bytes(len(chunk))
                        yield chunk

            try:
                response = self._client.put(
                    url, content=chunks(), headers={"content-length": str(size)}
                )
            except httpx.HTTPError as exc:
                on_bytes(-sent)
                if attempt < ATTEMPTS:
                    self._backoff(attempt)
                    continue
                raise CliError(f"could not upload the job's code: {exc}", EXIT_FAILURE) from None
            if response.is_success:
                return
            on_bytes(-sent)
            if response.status_code in RETRY_STATUSES and attempt < ATTEMPTS:
                self._backoff(attempt)
                continue
            raise CliError(
                f"could not upload the job's code: HTTP {response.status_code} "
                f"{response.text.strip()[:200]}",
                EXIT_FAILURE,
            )

    def list_jobs(
        self, *, state: str | None = None, limit: int = 50, next_token: str | None = None
    ) -> dict[str, Any]:
        params: dict[str, str | int] = {"limit": limit}
        if state:
            params["state"] = state
        if next_token:
            params["next"] = next_token
        return dict(self.request("GET", "jobs", params=params).body)

    def get_job(self, job_id: str) -> dict[str, Any]:
        return dict(self.request("GET", f"jobs/{_segment(job_id)}").body)

    def measures(self, name: str) -> dict[str, Any]:
        """The pace and start-up learned for a job name (GET /measures); one try, no retry:
        `tether plan` falls back to priors rather than wait."""
        return dict(self.request("GET", "measures", params={"name": name}, retry=False).body)

    def cancel_job(self, job_id: str) -> dict[str, Any]:
        return dict(self.request("POST", f"jobs/{_segment(job_id)}/cancel").body)

    def job_logs(self, job_id: str, *, after: str | None = None, limit: int = 50) -> dict[str, Any]:
        params: dict[str, str | int] = {"limit": limit}
        if after:
            params["after"] = after
        return dict(self.request("GET", f"jobs/{_segment(job_id)}/logs", params=params).body)

    def job_files(
        self, job_id: str, *, outputs: bool, checkpoint: int | None, offset: int = 0
    ) -> dict[str, Any]:
        params: dict[str, str | int] = {"offset": offset}
        if outputs:
            params["outputs"] = "true"
        if checkpoint is not None:
            params["checkpoint"] = checkpoint
        return dict(self.request("GET", f"jobs/{_segment(job_id)}/files", params=params).body)

    def stream_to(self, url: str, out: BinaryIO, on_bytes: Callable[[int], None]) -> str | None:
        """Write a presigned URL's content to `out` as it arrives; its sha256, or None when the
        URL has expired or is gone (list again). Failures before any byte arrived are retried."""
        written = 0
        for attempt in range(1, ATTEMPTS + 1):
            digest = hashlib.sha256()
            out.seek(0)
            out.truncate()
            on_bytes(-written)  # a retry starts the file again
            written = 0
            try:
                with self._client.stream("GET", url) as response:
                    if response.status_code in (401, 403, 404):
                        return None
                    if response.status_code == 400:
                        response.read()
                        if _expired_request(response):
                            return None
                    if response.status_code in RETRY_STATUSES and attempt < ATTEMPTS:
                        self._backoff(attempt)
                        continue
                    if not response.is_success:
                        raise CliError(
                            f"could not download a file: HTTP {response.status_code}",
                            EXIT_FAILURE,
                        )
                    for chunk in response.iter_bytes(1024 * 1024):
                        out.write(chunk)
                        digest.update(chunk)
                        written += len(chunk)
                        on_bytes(len(chunk))
                    return digest.hexdigest()
            except httpx.HTTPError as exc:
                if attempt < ATTEMPTS:
                    self._backoff(attempt)
                    continue
                raise CliError(f"could not download a file: {exc}", EXIT_FAILURE) from None
        return None

    def fetch(self, url: str) -> bytes | None:
        """A presigned URL's content; None when it has expired or is gone (list again).

        R2 says "expired" three ways: 400 `ExpiredRequest` (the URL's own expiry), 401
        `Unauthorized` (the credentials that signed it expired or were revoked) and, like S3,
        403; a fresh listing brings a URL signed with fresh credentials."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                response = self._client.get(url)
            except httpx.HTTPError as exc:
                if attempt < ATTEMPTS:
                    self._backoff(attempt)
                    continue
                raise CliError(f"could not download a log segment: {exc}", EXIT_FAILURE) from None
            if response.status_code in (401, 403, 404) or _expired_request(response):
                return None
            if response.status_code in RETRY_STATUSES and attempt < ATTEMPTS:
                self._backoff(attempt)
                continue
            if not response.is_success:
                raise CliError(
                    f"could not download a log segment: HTTP {response.status_code}", EXIT_FAILURE
                )
            return response.content
        return None


def _expired_request(response: httpx.Response) -> bool:
    return response.status_code == 400 and b"<Code>ExpiredRequest</Code>" in response.content


def _segment(job_id: str) -> str:
    """A job id as one path segment (ids are [A-Za-z0-9_-]; anything else is escaped, and the
    API answers 404 for it)."""
    return quote(job_id, safe="")


def api_error(method: str, path: str, status: int, body: Any) -> CliError:
    """One line for the user from the API's error contract (or API Gateway's bare message)."""
    if isinstance(body, Mapping):
        message = str(body.get("message") or body.get("error") or f"HTTP {status}")
        details = [
            f"{d.get('path')}: {d.get('reason')}"
            for d in body.get("details") or []
            if isinstance(d, Mapping)
        ]
    else:
        message, details = (str(body).strip()[:200] or f"HTTP {status}"), []
    if status == 403 and message == "Forbidden":
        return CliError(
            "the API refused the request (403 Forbidden): your AWS identity needs "
            "execute-api:Invoke on the tether API, and the signature must match the API's "
            "region",
            EXIT_FAILURE,
        )
    if status in (401, 403):
        return CliError(f"{message} (HTTP {status})", EXIT_FAILURE, details)
    if 400 <= status < 500:
        if len(details) == 1:  # one problem: one line
            return CliError(f"{message}: {details[0]}", EXIT_USAGE)
        return CliError(message, EXIT_USAGE, details)
    return CliError(
        f"the tether API failed ({method} /{path}: HTTP {status}): {message}", EXIT_FAILURE, details
    )
