"""End-to-end tier: the local stack (`tether_local.stack.LocalStack`), over real loopback HTTP.

One stack per test module (moto is process-wide, so one per xdist worker at a time); every test
works on its own job, so tests do not depend on each other's leftovers. `provision_by_hand` does
what the lifecycle's provision does (mint the generation's keys, store the generation, rent with
the host environment) for the tests that must run before, or without, the real lifecycle.

The example job (`examples/tiny-cpu/job.yaml`) ships its folder as its code: `tiny_spec()` is
the example without `code` (a command that needs no script), and `example_code(stack.api_url)` packs
and uploads the folder as `tether submit` does and gives the `code` to post with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pytest
import yaml

from functions.adapters.cloudflare import CloudflareAccount, CloudflareClient, mint_job_credentials
from functions.adapters.code_bucket import CodeBucket
from functions.adapters.store import JobStore
from functions.adapters.vast import OfferGone, VastClient
from functions.domain.agent_token import hash_token, new_agent_token
from functions.domain.heartbeat_contract import StorageCredentials
from functions.domain.job import Generation, JobState, TimelineEvent, new_job, new_job_id
from functions.domain.jobspec import JobSpec, parse_job
from functions.domain.labels import instance_label
from functions.domain.onstart import build_host_env, build_onstart
from tests.paths import ROOT
from tether_cli.local_ship import SHIPPER, local_api, shipped_spec
from tether_local.hosts.local_hosts import LocalHost
from tether_local.stack import CLOUDFLARE_PARENT_KEY, R2_BUCKET, LocalStack, LocalStackConfig

SIGNED = {
    "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDLOCALTEST/20260101/us-east-1/"
    "execute-api/aws4_request, SignedHeaders=host;x-amz-date, Signature=0"
}
T = TypeVar("T")
EXAMPLE_DIR = ROOT / "examples" / "tiny-cpu"
EXAMPLE_JOB = EXAMPLE_DIR / "job.yaml"


def tiny_spec(**overrides: Any) -> dict[str, Any]:
    """The example job without its `code` (the API takes an archive, not a directory), with
    `overrides`; pass `code=example_code(stack.api_url)` to run its script."""
    spec: dict[str, Any] = yaml.safe_load(EXAMPLE_JOB.read_text())
    del spec["code"]
    spec.update(overrides)
    return spec


def example_code(api_url: str) -> dict[str, Any]:
    """The example's folder packed and uploaded to the stack at `api_url` as `tether submit`
    does (the upload skipped when the archive is there already): the `code` (`{dir, archive}`)
    to submit with; the command runs in that folder, extracted."""
    spec = parse_job(yaml.safe_load(EXAMPLE_JOB.read_text()))
    with local_api(api_url) as client, SHIPPER.pack(spec, EXAMPLE_JOB) as code:
        shipped: dict[str, Any] = shipped_spec(client, spec, code)[0]["code"]
    return shipped


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 30.0) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    config = LocalStackConfig(
        root=tmp_path_factory.mktemp("stack"),
        monitor_interval_s=0,  # tests fire the monitor themselves with stack.tick()
        startup_s=0.3,
        created_s=0.1,
        stop_grace_s=1.0,
    )
    with LocalStack(config) as local:
        yield local


@dataclass
class HandProvisioned:
    job_id: str
    generation: int
    token: str
    instance_id: int
    credentials: StorageCredentials
    spec: JobSpec

    def host(self, stack: LocalStack) -> LocalHost:
        assert stack.hosts is not None
        return stack.hosts.get(self.instance_id)


def provision_by_hand(
    stack: LocalStack,
    run: str,
    *,
    ttl_s: int = 900,
    heartbeat_interval_s: float = 0.3,
    **spec_overrides: Any,
) -> HandProvisioned:
    """What the lifecycle's provision does, by hand: a job stored directly (no state machine
    execution), job-scoped credentials minted at the Cloudflare simulator, a generation with the
    agent token's hash (and the credentials, which its agent gets over the heartbeat with the rest
    of its job), and a rent whose env is `build_host_env`'s. A `code` archive
    (`example_code`) is copied into the job's prefix with the lifecycle's own `CodeBucket`, as its
    `place_code` does."""
    spec = parse_job(tiny_spec(run=run, **spec_overrides))
    store = JobStore(stack.table_name())
    now = time.time()
    job, event = new_job(spec, job_id=new_job_id(spec.name), now=now, submitted_by="e2e")
    store.create_job(job, event)
    account = CloudflareAccount(
        account_id="local-account",
        api_token="local-api-token",
        parent_access_key_id=CLOUDFLARE_PARENT_KEY,
        bucket=R2_BUCKET,
    )
    cloudflare = CloudflareClient(
        account.account_id, account.api_token, base_url=stack.cloudflare_url, min_ttl_s=1
    )
    credentials = mint_job_credentials(
        cloudflare, account, job.job_id, 1, ttl_s=ttl_s, endpoint=stack.s3_url
    )
    if spec.code is not None and spec.code.archive is not None:
        code = CodeBucket(
            endpoint=stack.s3_url,
            bucket=R2_BUCKET,
            mint=lambda prefix, objects, permission, ttl: cloudflare.mint_temp_credentials(
                R2_BUCKET, CLOUDFLARE_PARENT_KEY, prefix, ttl, permission, objects=objects
            ),
        )
        code.copy_to_job(spec.code.archive.sha256, job.job_id, spec.code.archive.size_bytes)
    token = new_agent_token()
    lease_expires_at = now + spec.policy.lease_window_s
    env = build_host_env(
        spec,
        job_id=job.job_id,
        generation=1,
        api_url=stack.api_url,
        agent_token=token,
        lease_expires_at=lease_expires_at,
        heartbeat_interval_s=heartbeat_interval_s,
        grace_s=2,
        vast_url=stack.vast_url,
    )
    vast = VastClient(stack.vast.api_key, base_url=stack.vast_url)
    # The stack is shared: the monitor may rent an offer for another test's job between this
    # listing and the rent, so try the offers cheapest first, as provision does.
    for offer in sorted(stack.vast.offers(), key=lambda o: float(o.get("dph_total") or 0)):
        try:
            rented = vast.rent(
                int(offer["id"]),
                image=spec.image,
                disk_gb=float(spec.resources.min_disk_gb),
                label=instance_label(job.job_id, 1),
                env=env,
                onstart=build_onstart(
                    agent_wheel_url="https://artifacts.invalid/tether_agent-0.1.0-py3-none-any.whl"
                ),
            )
            break
        except OfferGone:
            continue
    else:
        raise AssertionError("every offer of the simulator was taken")
    recorded = store.record_generation(
        Generation(
            job_id=job.job_id,
            generation=1,
            status="running",
            token_hash=hash_token(token),
            instance_id=rented.instance_id,
            offer_id=int(offer["id"]),
            machine_id=int(offer.get("machine_id") or 0),
            usd_per_hour=float(offer.get("dph_total") or 0),
            created_at=now,
            lease_expires_at=lease_expires_at,
            credentials=credentials,
        ),
        expected=[JobState.PENDING],
        now=now,
        event=TimelineEvent(job_id=job.job_id, at=now, kind="running", message="by hand"),
    )
    assert recorded
    return HandProvisioned(job.job_id, 1, token, rented.instance_id, credentials, spec)


def stored_heartbeat(stack: LocalStack, job_id: str, generation: int = 1) -> Any:
    found = JobStore(stack.table_name()).get_generation(job_id, generation)
    return None if found is None else found.heartbeat


def wait_for_first_checkpoint(stack: LocalStack, job_id: str) -> None:
    """Until generation 1 has reported an uploaded checkpoint (the monitor ticking meanwhile)."""

    def checkpoint_uploaded() -> Any:
        stack.tick()
        hb = stored_heartbeat(stack, job_id)
        return hb is not None and hb.last_checkpoint is not None

    wait_for("generation 1 to upload a checkpoint", checkpoint_uploaded, timeout_s=90)


def lose_first_host_and_finish(stack: LocalStack, job_id: str, fetched: str) -> None:
    """Destroy generation 1's host (its disk, and the code on it, gone) once its log shows
    `fetched`; the replacement must fetch the code again (`fetched` in its log), restore, and
    finish the 60-step job."""
    assert stack.hosts is not None
    hosts = stack.hosts
    (first,) = hosts.for_job(job_id)
    assert fetched in first.log_text(), first.log_text()[-2000:]
    assert first.disk.exists()
    hosts.destroy(first.instance_id)

    def finished() -> dict[str, Any] | None:
        stack.tick()
        job: dict[str, Any] = api(stack, "GET", f"/jobs/{job_id}").json()
        return job if job["state"] in {"FINISHED", "FAILED", "OVER_BUDGET"} else None

    job = wait_for("the job to end", finished, timeout_s=120)
    second = next(h for h in hosts.for_job(job_id) if h.generation == 2)
    assert job["state"] == "FINISHED", second.log_text()[-3000:]
    assert not first.disk.exists()
    assert fetched in second.log_text()
    resumed = stored_heartbeat(stack, job_id, generation=2)
    assert resumed.restore is not None and resumed.restore.outcome == "restored"
    assert resumed.step == 60 and resumed.exit_code == 0


def s3_keys(stack: LocalStack, job_id: str) -> list[str]:
    base = stack.root / "s3" / R2_BUCKET
    job_dir = base / "jobs" / job_id
    if not job_dir.exists():
        return []
    return sorted(str(p.relative_to(base)) for p in job_dir.rglob("*") if p.is_file())


def api(stack: LocalStack, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {**SIGNED, **kwargs.pop("headers", {})}
    return httpx.request(method, stack.api_url + path, headers=headers, timeout=60, **kwargs)
