"""The S3 features R2 does not take, which `rclone serve s3` would accept: a table the R2 front
(`tether_local/r2/front.py`) checks each allowed request against before relaying it.

Cloudflare's R2 S3 compatibility reference: R2 refuses boto3's default CRC32 request checksums
and aws-chunked trailers on PutObject and UploadPart (a client must set
`request_checksum_calculation="when_required"`, as the agent does), and does not implement ACLs,
tagging or object lock (501 `NotImplemented`). A client that regresses on any of these works
against rclone and fails against R2; the front makes it fail here first.

Scope refusals come first (the front runs `authorize` before this), so an out-of-scope write
sent with a default boto3 client is still answered 403 `AccessDenied`. Checksums are refused
only where R2 refuses them: a `DeleteObjects` must carry one (botocore sends its CRC32 there even
with `when_required`), and `x-amz-checksum-mode` on a GET is not a request checksum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from tether_local.r2.auth import Refusal

INVALID_REQUEST = Refusal(400, "InvalidRequest", "R2 does not take this request checksum.")
NOT_IMPLEMENTED = Refusal(501, "NotImplemented", "A header you provided is not implemented.")

_BODY_UPLOADS = frozenset({"PutObject", "UploadPart"})


@dataclass(frozen=True)
class Unsupported:
    """One row: a request naming `name` (a header or a query parameter; a trailing `*` matches
    any name with that start), with a value matching `value` when given, in one of
    `operations` (None: any), is refused with `refusal`."""

    where: Literal["header", "query"]
    name: str
    refusal: Refusal
    operations: frozenset[str] | None = None
    value: str | None = None  # the value, lowercased, must contain this

    def matches(self, operation: str, names: Mapping[str, str]) -> str | None:
        """The name this row refuses in `names` (lowercased name → value), or None."""
        if self.operations is not None and operation not in self.operations:
            return None
        for name, value in names.items():
            named = (
                name.startswith(self.name[:-1]) if self.name.endswith("*") else name == self.name
            )
            if named and (self.value is None or self.value in value.lower()):
                return name
        return None


UNSUPPORTED: tuple[Unsupported, ...] = (
    # Not implemented by R2, on any operation (first: `?tagging` must not read as a PutObject).
    Unsupported("header", "x-amz-acl", NOT_IMPLEMENTED),
    Unsupported("header", "x-amz-grant-*", NOT_IMPLEMENTED),
    Unsupported("query", "acl", NOT_IMPLEMENTED),
    Unsupported("header", "x-amz-tagging", NOT_IMPLEMENTED),
    Unsupported("header", "x-amz-tagging-directive", NOT_IMPLEMENTED),
    Unsupported("query", "tagging", NOT_IMPLEMENTED),
    Unsupported("header", "x-amz-object-lock-*", NOT_IMPLEMENTED),
    Unsupported("header", "x-amz-bypass-governance-retention", NOT_IMPLEMENTED),
    Unsupported("query", "object-lock", NOT_IMPLEMENTED),
    Unsupported("query", "retention", NOT_IMPLEMENTED),
    Unsupported("query", "legal-hold", NOT_IMPLEMENTED),
    # boto3's default request checksums (botocore ≥ 1.36: a CRC32 header over http, an
    # aws-chunked body with a trailer over https).
    Unsupported("header", "x-amz-checksum-*", INVALID_REQUEST, _BODY_UPLOADS),
    Unsupported("header", "x-amz-sdk-checksum-algorithm", INVALID_REQUEST, _BODY_UPLOADS),
    Unsupported("header", "x-amz-trailer", INVALID_REQUEST, _BODY_UPLOADS),
    Unsupported("header", "content-encoding", INVALID_REQUEST, _BODY_UPLOADS, "aws-chunked"),
    Unsupported("header", "x-amz-content-sha256", INVALID_REQUEST, _BODY_UPLOADS, "-trailer"),
)


def unsupported_feature(
    operation: str, headers: Sequence[tuple[str, str]], query: Mapping[str, str]
) -> Refusal | None:
    """R2's refusal of a request (`operation` as `auth.classify` names it) that uses a feature
    R2 does not take, or None. The first row of `UNSUPPORTED` that matches answers."""
    header_names = {name.lower(): value for name, value in headers}
    query_names = {name.lower(): value for name, value in query.items()}
    for row in UNSUPPORTED:
        names = header_names if row.where == "header" else query_names
        name = row.matches(operation, names)
        if name is not None:
            what = f"header {name}" if row.where == "header" else f"?{name}"
            return row.refusal.because(f"R2 does not take {what} on {operation}.")
    return None


__all__ = [
    "INVALID_REQUEST",
    "NOT_IMPLEMENTED",
    "UNSUPPORTED",
    "Unsupported",
    "unsupported_feature",
]
