"""The evidence the demo is judged on, read from what the stack stored: the checkpoints in the S3
stand-in (each verified with the agent's own manifest rules), the Vast simulator's ledger and
instances, and a sample of bad requests answered by the API."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path

import httpx
from pydantic import TypeAdapter
from tether_agent.checkpoints import (
    MANIFEST_NAME,
    Manifest,
    RemoteCheckpointId,
    file_problem,
    manifest_problem,
    parse_remote_dir,
)

from functions.domain import agent_env
from functions.domain.heartbeat_contract import JobBootstrap
from functions.domain.job_bootstrap import environ_with_job
from functions.domain.labels import parse_label
from functions.domain.spend import instance_charge
from functions.domain.storage_layout import job_prefix
from tether_local.demo.invariants import CheckpointFacts, KeyFacts, LedgerFacts, Recorded
from tether_local.demo.job import SIGNED
from tether_local.hosts.local_hosts import LocalHost
from tether_local.stack import R2_BUCKET, LocalStack


def s3_root(stack: LocalStack) -> Path:
    """The bucket's directory under the S3 stand-in."""
    return stack.root / "s3" / R2_BUCKET


_RECORDED = TypeAdapter(list[Recorded])
_GENERATION_DIR = re.compile(r"^g([1-9]\d*)$")


def checkpoint_dirs(stack: LocalStack, job_id: str) -> dict[Path, RemoteCheckpointId]:
    """The job's checkpoint directories in the S3 stand-in, every generation's, by the agent's
    naming rule (`jobs/<id>/g<generation>/checkpoints/<step>/`)."""
    found: dict[Path, RemoteCheckpointId] = {}
    for generation_dir in sorted((s3_root(stack) / job_prefix(job_id)).glob("g*")):
        match = _GENERATION_DIR.match(generation_dir.name)
        if match is None:
            continue
        for directory in sorted((generation_dir / "checkpoints").glob("*")):
            step = parse_remote_dir(directory.name)
            if step is not None:
                found[directory] = RemoteCheckpointId(step, int(match[1]))
    return found


def checkpoint_facts(
    stack: LocalStack, job_id: str, known: Mapping[str, CheckpointFacts] | None = None
) -> list[CheckpointFacts]:
    """The job's checkpoint directories, each manifest verified against the bytes (those in
    `known` already verified are not read again)."""
    base = s3_root(stack)
    found = []
    for directory, cid in checkpoint_dirs(stack, job_id).items():
        prefix = str(directory.relative_to(base)) + "/"
        seen = (known or {}).get(prefix)
        if seen is not None and seen.verified:
            continue
        verified, written_at, sha256 = _verify(directory, cid)
        has_manifest = (directory / MANIFEST_NAME).is_file()
        found.append(
            CheckpointFacts(
                prefix=prefix,
                step=cid.step,
                generation=cid.generation,
                has_manifest=has_manifest,
                verified=verified and has_manifest,
                written_at=written_at,
                manifest_sha256=sha256,
            )
        )
    return found


def _verify(directory: Path, cid: RemoteCheckpointId) -> tuple[bool, float | None, str | None]:
    """Whether the checkpoint in `directory` passes the agent's restore checks (its manifest
    parses and names this directory, every file has the listed size and sha256); when the
    manifest was really written (the stand-in's file time, not the time it claims); and the
    sha256 of its bytes. Times and hash are None when it cannot be read."""
    path = directory / MANIFEST_NAME
    try:
        written_at = path.stat().st_mtime
        data = path.read_bytes()
    except OSError:  # no manifest, or deleted by retention while we looked
        return False, None, None
    sha256 = hashlib.sha256(data).hexdigest()
    try:
        manifest = Manifest.model_validate_json(data)
        if manifest_problem(manifest, cid):
            return False, written_at, sha256
        for entry in manifest.files:
            blob = (directory / entry.path).read_bytes()
            if file_problem(entry, len(blob), hashlib.sha256(blob).hexdigest()):
                return False, written_at, sha256
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return False, written_at, sha256
    return True, written_at, sha256


def host_received(stack: LocalStack, host: LocalHost) -> dict[str, str]:
    """What a host was given: its instance environment (Vast's `env`) and the job its agent
    received over the heartbeat, under the names the agent reads them by
    (`functions.domain.job_bootstrap.environ_with_job`)."""
    sent = None
    if stack.front is not None and host.job_id is not None and host.generation is not None:
        sent = stack.front.job_sent(host.job_id, host.generation)
    if sent is None:
        return dict(host.received_env)
    job = JobBootstrap.model_validate_json(json.dumps(sent))
    return environ_with_job(host.received_env, job)


def restore_candidates(stack: LocalStack, job_id: str) -> dict[int, tuple[Recorded, ...]]:
    """Generation → the recorded checkpoints it was given to restore (over the heartbeat)."""
    assert stack.hosts is not None
    found: dict[int, tuple[Recorded, ...]] = {}
    for host in stack.hosts.for_job(job_id):
        raw = host_received(stack, host).get(agent_env.RESTORE_CHECKPOINTS)
        if host.generation is None:
            continue
        found[host.generation] = tuple(_RECORDED.validate_json(raw)) if raw else ()
    return found


def key_scopes(stack: LocalStack, job_id: str) -> dict[str, KeyFacts]:
    """The scopes of the storage keys the job's hosts hold, for those still live."""
    assert stack.hosts is not None
    found: dict[str, KeyFacts] = {}
    for host in stack.hosts.for_job(job_id):
        received = host_received(stack, host)
        for name in (agent_env.S3_ACCESS_KEY_ID, agent_env.S3_WRITE_ACCESS_KEY_ID):
            key = received.get(name, "")
            scope = stack.cloudflare.scope_for(key)
            if scope is not None:
                found[key] = KeyFacts(
                    permission=scope.permission,
                    prefixes=scope.prefixes,
                    expires_at=scope.expires_at,
                )
    return found


def live_instances(stack: LocalStack, job_id: str) -> list[int]:
    """The simulator's instances whose label names the job, in any state but destroyed."""
    return [
        int(i["id"])
        for i in stack.vast.instances()
        if (parsed := parse_label(i.get("label"))) is not None and parsed[0] == job_id
    ]


def ledger_facts(stack: LocalStack, job_id: str) -> list[LedgerFacts]:
    found = []
    for charge in stack.vast.charges():
        metadata = charge.get("metadata") or {}
        parsed = parse_label(metadata.get("label"))
        if parsed is None or parsed[0] != job_id:
            continue
        named = instance_charge(charge)  # the instance is named in `source`, as on Vast
        if named is None:
            continue
        ledger = stack.vast.ledger(named.instance_id)
        found.append(
            LedgerFacts(
                instance_id=ledger.instance_id,
                label=ledger.label,
                opened_at=ledger.opened_at,
                closed_at=ledger.closed_at,
                gpu_usd_per_hour=ledger.gpu_usd_per_hour,
                storage_usd_per_hour=ledger.storage_usd_per_hour,
                total_usd=ledger.total_usd,
            )
        )
    return found


def bad_input_statuses(stack: LocalStack, job_id: str) -> dict[str, int]:
    """Invariant 5, sampled: a few bad requests of each kind, each must get a 4xx."""
    url = stack.api_url
    with httpx.Client(timeout=30) as client:
        return {
            "spec_negative_budget": client.post(
                url + "/jobs", json={"name": "x", "budget_usd": -1}, headers=SIGNED
            ).status_code,
            "spec_not_json": client.post(
                url + "/jobs", content=b"{not json", headers=SIGNED
            ).status_code,
            "query_bad_state": client.get(url + "/jobs?state=BOGUS", headers=SIGNED).status_code,
            "heartbeat_forged_token": client.post(
                url + "/agent/heartbeat",
                json={"job_id": job_id, "generation": 1, "phase": "training"},
                headers={"Authorization": "Bearer forged"},
            ).status_code,
            "unsigned_request": client.get(url + f"/jobs/{job_id}").status_code,
        }


__all__ = [
    "bad_input_statuses",
    "checkpoint_dirs",
    "checkpoint_facts",
    "key_scopes",
    "ledger_facts",
    "live_instances",
    "restore_candidates",
    "s3_root",
]
