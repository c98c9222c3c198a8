"""What the R2 front decides about one S3 request, without I/O: who signed it (SigV4, header or
presigned query), which operation it is, and whether the key's scope allows it
(`tether_local/r2/front.py` relays the allowed ones to `rclone serve s3`).

The answers are R2's, from Cloudflare's error-code table (`r2/api/error-codes`), and only those:

- `Unauthorized` (R2 10002), 401: no credentials; a malformed or non-SigV4 `Authorization`; an
  unknown access key id; an expired key; a revoked parent; a missing or wrong session token.
- `SignatureDoesNotMatch` (10035), 403: the signature is not the one the key's secret makes.
- `ExpiredRequest` (10018), 400: a presigned URL past `X-Amz-Date + X-Amz-Expires`.
- `AccessDenied` (10003), 403: a live, correctly signed key outside its bucket, prefixes or
  objects, or beyond its permission.
- `MissingContentLength` (10033), 411: a body sent chunked, without a readable length.
- `EntityTooLarge` (100100), 400: a `DeleteObjects` or `CompleteMultipartUpload` body over
  16 MiB (the front reads those bodies to judge them); `ServiceUnavailable` (10043), 503: rclone
  cannot be reached.
- At `CompleteMultipartUpload` (`check_part_sizes`): `EntityTooSmall` (10011), 400, for a part
  but the last under 5 MiB; `InvalidPart` (10048), 400, for parts but the last of unequal sizes.

The one answer outside R2's table is S3's 400 `MalformedXML`, for a `DeleteObjects` body the
front cannot parse (it cannot tell which keys are named). Where the table is silent on which of
its codes a case gets (an unknown key, a wrong session token), the front answers 401
`Unauthorized`, the table's "invalid credentials".

An expired or revoked key gets 401, not 403: R2's table gives `Unauthorized` for "missing or
invalid authentication credentials … have not expired", and keeps `AccessDenied` for
"insufficient permissions for the requested operation". The distinction is the one a client must
act on: 401 means "get fresh credentials", 403 `AccessDenied` means "this operation is out of
scope; new credentials of the same scope will not help".

Scope (Cloudflare's temporary credentials: one bucket, optional `prefixes[]` and `objects[]`, a
permission): an object operation's key must be one of `objects` or start with one of `prefixes`
(neither given: the whole bucket); a listing's `prefix` must start with one of `prefixes` (a key
scoped only by `objects` cannot list); `CopyObject`'s source is read under the same rule; every
key of a `DeleteObjects` body must be in scope. Permissions: `object-read-only` reads (GET, HEAD,
listings); `object-read-write` also writes objects (PUT, POST, DELETE, multipart); `admin-*` also
bucket-level operations (`ListBuckets`, create/delete bucket, bucket sub-resources), read or
read-write. `HeadBucket` on the key's own bucket is a read.

Not checked here: the payload hash against the body (the stand-in trusts `x-amz-content-sha256`;
the agent sends `UNSIGNED-PAYLOAD` anyway) and clock skew of `X-Amz-Date` on header-signed
requests (tests move the simulator's clock).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol
from urllib.parse import quote, unquote

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
MAX_PRESIGN_EXPIRES_S = 604_800

READ_PERMISSIONS = frozenset(
    {"object-read-only", "object-read-write", "admin-read-only", "admin-read-write"}
)
OBJECT_WRITE_PERMISSIONS = frozenset({"object-read-write", "admin-read-write"})
ADMIN_READ_PERMISSIONS = frozenset({"admin-read-only", "admin-read-write"})
ADMIN_WRITE_PERMISSIONS = frozenset({"admin-read-write"})

# GET/PUT/DELETE on a bucket with one of these is a bucket-level (admin) operation.
BUCKET_SUBRESOURCES = frozenset(
    {
        "accelerate", "acl", "analytics", "cors", "encryption", "intelligent-tiering",
        "inventory", "lifecycle", "location", "logging", "metrics", "notification",
        "object-lock", "ownershipControls", "policy", "policyStatus", "publicAccessBlock",
        "replication", "requestPayment", "tagging", "versioning", "versions", "website",
    }
)  # fmt: skip

_AUTH_HEADER = re.compile(
    r"^AWS4-HMAC-SHA256\s+"
    r"Credential=(?P<credential>[^,\s]+)\s*,\s*"
    r"SignedHeaders=(?P<signed>[^,\s]+)\s*,\s*"
    r"Signature=(?P<signature>[0-9a-fA-F]+)\s*$"
)
_AMZ_DATE = "%Y%m%dT%H%M%SZ"


# --- refusals ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str

    def because(self, message: str) -> Refusal:
        return Refusal(self.status, self.code, message)


UNAUTHORIZED = Refusal(401, "Unauthorized", "Missing or invalid authentication credentials.")
SIGNATURE = Refusal(
    403,
    "SignatureDoesNotMatch",
    "The request signature we calculated does not match the signature you provided.",
)
EXPIRED_REQUEST = Refusal(400, "ExpiredRequest", "Request has expired.")
ACCESS_DENIED = Refusal(403, "AccessDenied", "Access Denied")
ENTITY_TOO_SMALL = Refusal(
    400, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size."
)
INVALID_PART = Refusal(400, "InvalidPart", "All non-trailing parts must have the same length.")
MISSING_CONTENT_LENGTH = Refusal(
    411, "MissingContentLength", "You must provide the Content-Length HTTP header."
)
ENTITY_TOO_LARGE = Refusal(400, "EntityTooLarge", "Your proposed upload exceeds the maximum size.")
SERVICE_UNAVAILABLE = Refusal(503, "ServiceUnavailable", "Service is temporarily unavailable.")
# Not in R2's table (S3's code): a DeleteObjects body the front cannot read.
MALFORMED_XML = Refusal(400, "MalformedXML", "The XML you provided was not well-formed.")


# --- the keys the front checks against ------------------------------------------------------------


class Scope(Protocol):
    @property
    def bucket(self) -> str: ...
    @property
    def prefixes(self) -> tuple[str, ...]: ...
    @property
    def objects(self) -> tuple[str, ...]: ...
    @property
    def permission(self) -> str: ...


class LiveKey(Protocol):
    """A minted key that is live now (not expired, parent not revoked)."""

    @property
    def secret_access_key(self) -> str: ...
    @property
    def session_token(self) -> str: ...
    @property
    def scope(self) -> Scope: ...


KeyLookup = Callable[[str], LiveKey | None]  # access key id → the live key, or None


# --- SigV4 ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signed:
    """What a request claims about its signature (before it is checked)."""

    access_key_id: str
    date: str  # YYYYMMDD of the credential scope
    region: str
    service: str
    amz_date: str  # the request's X-Amz-Date
    signed_headers: tuple[str, ...]
    signature: str
    session_token: str | None
    presigned: bool
    expires_s: int | None = None  # presigned only


@dataclass(frozen=True)
class Request:
    """The parts of an HTTP request the front judges (the body is not among them)."""

    method: str
    raw_path: str  # as on the request line, still percent-encoded, without the query
    raw_query: str
    headers: Sequence[tuple[str, str]]

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k.lower() == name]
        return ",".join(values) if values else None

    def query(self) -> list[tuple[str, str]]:
        return parse_query(self.raw_query)


def parse_query(raw_query: str) -> list[tuple[str, str]]:
    """Decoded (name, value) pairs in order; `?uploads` gives ("uploads", "")."""
    pairs = []
    for part in raw_query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        pairs.append((unquote(name), unquote(value)))
    return pairs


def parse_signed(request: Request) -> Signed | Refusal:
    """The request's SigV4 claim, or why it has none worth checking (401)."""
    query = dict(request.query())
    authorization = request.header("authorization")
    if "X-Amz-Signature" in query or "X-Amz-Credential" in query:
        if query.get("X-Amz-Algorithm") != ALGORITHM:
            return UNAUTHORIZED.because("Only AWS4-HMAC-SHA256 presigned URLs are supported.")
        try:
            expires_s = int(query.get("X-Amz-Expires", ""))
        except ValueError:
            return UNAUTHORIZED.because("X-Amz-Expires must be a number of seconds.")
        if not 1 <= expires_s <= MAX_PRESIGN_EXPIRES_S:
            return UNAUTHORIZED.because("X-Amz-Expires must be from 1 to 604800 seconds.")
        return _signed(
            query.get("X-Amz-Credential", ""),
            query.get("X-Amz-SignedHeaders", ""),
            query.get("X-Amz-Signature", ""),
            amz_date=query.get("X-Amz-Date", ""),
            session_token=query.get("X-Amz-Security-Token"),
            presigned=True,
            expires_s=expires_s,
        )
    if authorization is None:
        if "AWSAccessKeyId" in query:
            return UNAUTHORIZED.because("Only AWS Signature Version 4 is supported.")
        return UNAUTHORIZED.because("The request carries no credentials.")
    match = _AUTH_HEADER.match(authorization.strip())
    if match is None:
        return UNAUTHORIZED.because("The Authorization header is not AWS Signature Version 4.")
    return _signed(
        match["credential"],
        match["signed"],
        match["signature"],
        amz_date=request.header("x-amz-date") or "",
        session_token=request.header("x-amz-security-token"),
        presigned=False,
    )


def _signed(
    credential: str,
    signed_headers: str,
    signature: str,
    *,
    amz_date: str,
    session_token: str | None,
    presigned: bool,
    expires_s: int | None = None,
) -> Signed | Refusal:
    parts = credential.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request" or not parts[0]:
        return UNAUTHORIZED.because("The credential scope is malformed.")
    try:
        datetime.strptime(amz_date, _AMZ_DATE)
    except ValueError:
        return UNAUTHORIZED.because("X-Amz-Date is missing or malformed.")
    headers = tuple(signed_headers.split(";")) if signed_headers else ()
    if "host" not in headers or not signature:
        return UNAUTHORIZED.because("The signature must cover the host header.")
    return Signed(
        access_key_id=parts[0],
        date=parts[1],
        region=parts[2],
        service=parts[3],
        amz_date=amz_date,
        signed_headers=headers,
        signature=signature.lower(),
        session_token=session_token,
        presigned=presigned,
        expires_s=expires_s,
    )


def _uri_encode(value: str, safe: str = "") -> str:
    return quote(value, safe="-_.~" + safe)


def canonical_request(request: Request, signed: Signed, *, as_sent: bool = False) -> str:
    """SigV4's canonical request. S3 clients sign the path and query as they send them, which a
    strict client encodes the canonical way (RFC 3986 unreserved characters left as they are);
    `as_sent` takes them exactly as they came instead, for a client that encoded less."""
    if as_sent:
        path = request.raw_path or "/"
        pairs = [p.partition("=")[::2] for p in request.raw_query.split("&") if p]
    else:
        path = _uri_encode(unquote(request.raw_path), safe="/") or "/"
        pairs = [(_uri_encode(k), _uri_encode(v)) for k, v in request.query()]
    if signed.presigned:
        pairs = [(k, v) for k, v in pairs if unquote(k) != "X-Amz-Signature"]
    query = "&".join(f"{k}={v}" for k, v in sorted(pairs))
    lines = []
    for name in signed.signed_headers:
        values = [v for k, v in request.headers if k.lower() == name]
        lines.append(f"{name}:{','.join(' '.join(v.split()) for v in values)}\n")
    payload = UNSIGNED_PAYLOAD if signed.presigned else request.header("x-amz-content-sha256") or ""
    return "\n".join(
        [request.method, path, query, "".join(lines), ";".join(signed.signed_headers), payload]
    )


def signature(secret: str, signed: Signed, canonical: str) -> str:
    scope = f"{signed.date}/{signed.region}/{signed.service}/aws4_request"
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    to_sign = f"{ALGORITHM}\n{signed.amz_date}\n{scope}\n{digest}"
    key = f"AWS4{secret}".encode()
    for part in (signed.date, signed.region, signed.service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def authenticate(request: Request, lookup: KeyLookup, now: float) -> LiveKey | Refusal:
    """The live key that signed `request`, or the refusal (checked at the time of the call)."""
    signed = parse_signed(request)
    if isinstance(signed, Refusal):
        return signed
    key = lookup(signed.access_key_id)
    if key is None:
        return UNAUTHORIZED.because(
            "The access key id does not exist, has expired, or its parent token was revoked."
        )
    if not signed.session_token:
        return UNAUTHORIZED.because("Temporary credentials need their session token.")
    if not hmac.compare_digest(signed.session_token, key.session_token):
        return UNAUTHORIZED.because("The session token does not belong to this access key id.")
    if not any(
        hmac.compare_digest(
            signature(
                key.secret_access_key, signed, canonical_request(request, signed, as_sent=raw)
            ),
            signed.signature,
        )
        for raw in (False, True)
    ):
        return SIGNATURE
    if signed.presigned:
        assert signed.expires_s is not None
        signed_at = datetime.strptime(signed.amz_date, _AMZ_DATE).replace(tzinfo=UTC).timestamp()
        if now > signed_at + signed.expires_s:
            return EXPIRED_REQUEST
    return key


# --- operations and scope ------------------------------------------------------------------------

Level = Literal["service", "bucket", "listing", "object"]
Access = Literal["read", "write"]


@dataclass(frozen=True)
class Operation:
    name: str
    level: Level
    access: Access
    bucket: str | None = None
    key: str | None = None  # object operations
    list_prefix: str = ""  # listings
    copy_source: tuple[str, str] | None = None  # (bucket, key) CopyObject reads
    upload_id: str | None = None
    part_number: int | None = None
    needs_body: bool = False  # DeleteObjects, CompleteMultipartUpload: judged on their body


def classify(
    method: str, raw_path: str, query: Mapping[str, str], copy_source: str | None
) -> Operation:
    """The S3 operation of a path-style request (the front serves path-style only)."""
    bucket, _, key = unquote(raw_path).lstrip("/").partition("/")
    if not bucket:
        if method in ("GET", "HEAD"):
            return Operation("ListBuckets", "service", "read")
        return Operation(f"{method} /", "service", "write")
    if not key:
        return _bucket_operation(method, bucket, query)
    upload_id = query.get("uploadId")
    source = _copy_source(copy_source) if copy_source and method == "PUT" else None
    part = query.get("partNumber", "")
    if method in ("GET", "HEAD"):
        name, access = ("ListParts" if upload_id else f"{method.title()}Object"), "read"
    elif method == "PUT" and upload_id:
        name, access = ("UploadPartCopy" if source else "UploadPart"), "write"
    elif method == "PUT":
        name, access = ("CopyObject" if source else "PutObject"), "write"
    elif method == "DELETE":
        name, access = ("AbortMultipartUpload" if upload_id else "DeleteObject"), "write"
    elif method == "POST" and "uploads" in query:
        name, access = "CreateMultipartUpload", "write"
    elif method == "POST" and upload_id:
        name, access = "CompleteMultipartUpload", "write"
    else:
        name, access = f"{method} object", "write"
    return Operation(
        name,
        "object",
        "read" if access == "read" else "write",
        bucket=bucket,
        key=key,
        copy_source=source,
        upload_id=upload_id,
        part_number=int(part) if part.isdigit() else None,
        needs_body=name == "CompleteMultipartUpload",
    )


def _bucket_operation(method: str, bucket: str, query: Mapping[str, str]) -> Operation:
    sub = sorted(BUCKET_SUBRESOURCES & set(query))
    if method == "HEAD":
        return Operation("HeadBucket", "listing", "read", bucket=bucket, list_prefix="")
    if method == "GET":
        if sub:
            return Operation(f"GetBucket:{sub[0]}", "bucket", "read", bucket=bucket)
        name = "ListMultipartUploads" if "uploads" in query else "ListObjects"
        return Operation(
            name, "listing", "read", bucket=bucket, list_prefix=query.get("prefix", "")
        )
    if method == "POST" and "delete" in query:
        return Operation("DeleteObjects", "object", "write", bucket=bucket, needs_body=True)
    name = {"PUT": "CreateBucket", "DELETE": "DeleteBucket"}.get(method, f"{method} bucket")
    if sub:
        name = f"{method.title()}Bucket:{sub[0]}"
    return Operation(name, "bucket", "write", bucket=bucket)


def _copy_source(header: str) -> tuple[str, str] | None:
    source = unquote(header.split("?", 1)[0]).lstrip("/")
    bucket, _, key = source.partition("/")
    return (bucket, key) if bucket and key else None


def key_in_scope(scope: Scope, key: str) -> bool:
    if not scope.prefixes and not scope.objects:
        return True
    return key in scope.objects or any(key.startswith(p) for p in scope.prefixes)


def prefix_in_scope(scope: Scope, prefix: str) -> bool:
    if not scope.prefixes and not scope.objects:
        return True
    return any(prefix.startswith(p) for p in scope.prefixes)


def authorize(scope: Scope, op: Operation, body_keys: Iterable[str] = ()) -> Refusal | None:
    """None when `scope` allows `op` (with `body_keys`, the keys a DeleteObjects names)."""
    permission = scope.permission
    if op.level in ("service", "bucket"):
        allowed = ADMIN_READ_PERMISSIONS if op.access == "read" else ADMIN_WRITE_PERMISSIONS
        if permission not in allowed:
            return ACCESS_DENIED.because(f"{op.name} needs an admin permission.")
        if op.level == "bucket" and op.bucket != scope.bucket:
            return ACCESS_DENIED.because(f"These credentials are for bucket {scope.bucket}.")
        return None
    if op.bucket != scope.bucket:
        return ACCESS_DENIED.because(f"These credentials are for bucket {scope.bucket}.")
    allowed = READ_PERMISSIONS if op.access == "read" else OBJECT_WRITE_PERMISSIONS
    if permission not in allowed:
        return ACCESS_DENIED.because(f"{op.name} is not allowed with {permission} credentials.")
    if op.level == "listing":
        if op.name != "HeadBucket" and not prefix_in_scope(scope, op.list_prefix):
            return ACCESS_DENIED.because(f"Listing prefix {op.list_prefix!r} is out of scope.")
        return None
    keys = [op.key] if op.key is not None else list(body_keys)
    for key in keys:
        if not key_in_scope(scope, key):
            return ACCESS_DENIED.because(f"Key {key!r} is out of scope.")
    if op.copy_source is not None:
        bucket, key = op.copy_source
        if bucket != scope.bucket or not key_in_scope(scope, key):
            return ACCESS_DENIED.because(f"Copy source {bucket}/{key} is out of scope.")
    return None


# --- multipart part sizes (R2 refuses what rclone accepts) ----------------------------------------

MIN_PART_BYTES = 5 * 1024 * 1024


def check_part_sizes(sizes: Sequence[int]) -> Refusal | None:
    """R2's rule at CompleteMultipartUpload: every part but the last ≥ 5 MiB, all the same size."""
    leading = sizes[:-1]
    if any(size < MIN_PART_BYTES for size in leading):
        return ENTITY_TOO_SMALL
    if len(set(leading)) > 1:
        return INVALID_PART
    return None


def error_xml(refusal: Refusal, resource: str = "") -> bytes:
    from xml.sax.saxutils import escape

    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{escape(refusal.code)}</Code><Message>{escape(refusal.message)}</Message>"
        + (f"<Resource>{escape(resource)}</Resource>" if resource else "")
        + "</Error>"
    )
    return body.encode()
