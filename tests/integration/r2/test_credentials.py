"""Who may talk to the front at all: a live minted key, signed with its secret, carrying its
session token, judged at the time of each request (no cache past expiry or revocation)."""

from __future__ import annotations

import uuid

import httpx

from tests.integration.r2_harness import BUCKET, PARENT, R2, refused

UNAUTHORIZED = (401, "Unauthorized")


def test_missing_session_token_is_refused(r2: R2) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/A/"]), session_token=None)
    assert refused(s3.put_object, Bucket=BUCKET, Key="jobs/A/x", Body=b"x") == UNAUTHORIZED
    assert refused(s3.list_objects_v2, Bucket=BUCKET, Prefix="jobs/A/") == UNAUTHORIZED
    assert "jobs/A/x" not in r2.on_disk()


def test_wrong_session_token_is_refused(r2: R2) -> None:
    other = r2.mint(prefixes=["jobs/A/"])
    s3 = r2.client(r2.mint(prefixes=["jobs/A/"]), session_token=other.session_token)
    assert refused(s3.put_object, Bucket=BUCKET, Key="jobs/A/x", Body=b"x") == UNAUTHORIZED
    s3 = r2.client(r2.mint(prefixes=["jobs/A/"]), session_token="not-a-token")
    assert refused(s3.get_object, Bucket=BUCKET, Key="jobs/A/x") == UNAUTHORIZED


def test_wrong_secret_does_not_match_the_signature(r2: R2) -> None:
    s3 = r2.client(r2.mint(prefixes=["jobs/A/"]), secret="0" * 64)
    code = refused(s3.put_object, Bucket=BUCKET, Key="jobs/A/x", Body=b"x" * 100_000)
    assert code == (403, "SignatureDoesNotMatch")
    assert "jobs/A/x" not in r2.on_disk()


def test_unknown_key_and_anonymous_requests_are_refused(r2: R2) -> None:
    minted = r2.mint()
    forged = type(minted)("0" * 32, minted.secret_access_key, minted.session_token)
    assert refused(r2.client(forged).list_objects_v2, Bucket=BUCKET) == UNAUTHORIZED
    anonymous = httpx.put(f"{r2.url}/{BUCKET}/anon.txt", content=b"x")
    assert anonymous.status_code == 401
    assert "<Code>Unauthorized</Code>" in anonymous.text
    assert "anon.txt" not in r2.on_disk()


def test_expired_key_is_refused_at_once_though_it_just_worked(r2: R2) -> None:
    """rclone's auth proxy cached a key's secret for ~5 minutes: a key in use kept working."""
    s3 = r2.client(r2.mint(prefixes=["jobs/A/"], ttl_s=60))
    s3.put_object(Bucket=BUCKET, Key="jobs/A/before.txt", Body=b"x")
    r2.clock.advance(61)
    assert refused(s3.put_object, Bucket=BUCKET, Key="jobs/A/after.txt", Body=b"x") == (
        UNAUTHORIZED
    )
    assert refused(s3.get_object, Bucket=BUCKET, Key="jobs/A/before.txt") == UNAUTHORIZED
    assert "jobs/A/after.txt" not in r2.on_disk()


def test_revoked_parent_refuses_every_child_at_once(r2: R2) -> None:
    parent = f"parent-{uuid.uuid4().hex[:8]}"
    r2.sim.add_parent(parent)
    children = [r2.client(r2.mint(prefixes=[p], parent=parent)) for p in ("jobs/A/", "jobs/B/")]
    sibling = r2.client(r2.mint(prefixes=["jobs/A/"], parent=PARENT))
    for s3, prefix in zip(children, ("jobs/A/", "jobs/B/"), strict=True):
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}child.txt", Body=b"x")
    r2.sim.revoke_parent(parent)
    for s3, prefix in zip(children, ("jobs/A/", "jobs/B/"), strict=True):
        assert refused(s3.get_object, Bucket=BUCKET, Key=f"{prefix}child.txt") == UNAUTHORIZED
    assert sibling.get_object(Bucket=BUCKET, Key="jobs/A/child.txt")["Body"].read() == b"x"


def test_presigned_get_works_within_scope_and_expires(r2: R2) -> None:
    r2.client(r2.mint(prefixes=["jobs/L/"])).put_object(
        Bucket=BUCKET, Key="jobs/L/logs/g0001-000000.log", Body=b"line\n"
    )
    r2.client(r2.mint(prefixes=["jobs/M/"])).put_object(
        Bucket=BUCKET, Key="jobs/M/logs/g0001-000000.log", Body=b"other\n"
    )
    reader = r2.client(r2.mint(prefixes=["jobs/L/logs/"], permission="object-read-only"))

    def url(key: str, expires_s: int = 300) -> str:
        params = {"Bucket": BUCKET, "Key": key}
        return str(reader.generate_presigned_url("get_object", Params=params, ExpiresIn=expires_s))

    good = url("jobs/L/logs/g0001-000000.log", expires_s=60)
    assert httpx.get(good).text == "line\n"
    outside = httpx.get(url("jobs/M/logs/g0001-000000.log"))
    assert (outside.status_code, "<Code>AccessDenied</Code>" in outside.text) == (403, True)
    tampered = httpx.get(good.replace("g0001-000000", "g0001-000001"))
    assert tampered.status_code == 403 and "SignatureDoesNotMatch" in tampered.text

    r2.clock.advance(61)  # past the URL's 60 s, well within the key's 900 s
    expired = httpx.get(good)
    assert expired.status_code == 400 and "<Code>ExpiredRequest</Code>" in expired.text


def test_presigned_url_stops_with_its_key(r2: R2) -> None:
    creds = r2.mint(prefixes=["jobs/P/"], ttl_s=120)
    s3 = r2.client(creds)
    s3.put_object(Bucket=BUCKET, Key="jobs/P/x", Body=b"x")
    url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": "jobs/P/x"}, ExpiresIn=3600
    )
    assert httpx.get(url).status_code == 200
    r2.clock.advance(121)
    assert httpx.get(url).status_code == 401
