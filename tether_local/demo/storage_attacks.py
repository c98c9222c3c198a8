"""What the demo does with an old generation's storage keys and agent token, as a hostile or
broken host could: write outside its own prefix (refused by the R2 front), plant checkpoints in
its own prefix (allowed, but nothing unrecorded is ever restored), and write crafted manifests
and report them in heartbeats while it is still the current generation (recorded, then skipped
by the restore with a reason). Scenarios `zombie` and `forged-manifest` use it."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import boto3
import httpx
from botocore.config import Config
from botocore.exceptions import ClientError

from functions.domain import agent_env
from functions.domain.storage_layout import generation_prefix, job_prefix, manifest_key
from tether_local.demo.evidence import host_received
from tether_local.demo.run import DemoRun
from tether_local.hosts.local_hosts import LocalHost

_BOTO = Config(
    signature_version="s3v4",
    s3={"addressing_style": "path", "payload_signing_enabled": False},
    retries={"max_attempts": 1, "mode": "standard"},
    request_checksum_calculation="when_required",
    response_checksum_validation="when_required",
)


@dataclass(frozen=True)
class HostKeys:
    """What a host of generation `generation` holds: its write key and its agent token."""

    job_id: str
    generation: int
    token: str
    s3: Any  # a boto3 S3 client with the host's read-write key
    bucket: str

    @classmethod
    def of(cls, run: DemoRun, host: LocalHost) -> HostKeys:
        env = host_received(run.stack, host)
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=run.stack.s3_url,
            aws_access_key_id=env[agent_env.S3_WRITE_ACCESS_KEY_ID],
            aws_secret_access_key=env[agent_env.S3_WRITE_SECRET_ACCESS_KEY],
            aws_session_token=env.get(agent_env.S3_WRITE_SESSION_TOKEN) or None,
            region_name="auto",
            config=_BOTO,
        )
        return cls(
            job_id=env[agent_env.JOB_ID],
            generation=int(env[agent_env.GENERATION]),
            token=env[agent_env.AGENT_TOKEN],
            s3=client,
            bucket=env[agent_env.S3_BUCKET],
        )

    def put(self, key: str, body: bytes) -> str:
        """'ok', or the S3 error code the R2 front answered."""
        try:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=body)
        except ClientError as exc:
            status = exc.response["ResponseMetadata"]["HTTPStatusCode"]
            return f"{status} {exc.response.get('Error', {}).get('Code', '')}"
        return "ok"

    def get(self, key: str) -> bytes:
        body: bytes = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return body

    def writes_outside_own_prefix(self, other_generation: int) -> dict[str, str]:
        """Try to write where another generation looks and into the job root: key → answer."""
        root = job_prefix(self.job_id)
        keys = [
            manifest_key(self.job_id, 999_900, other_generation),
            f"{generation_prefix(self.job_id, other_generation)}logs/999999.log",
            f"{root}manifest.json",
            f"{root}g{self.generation}0/checkpoints/000000999900/manifest.json",
        ]
        return {key: self.put(key, b"zombie") for key in keys}

    def heartbeat(self, run: DemoRun, body: dict[str, Any]) -> int:
        """A heartbeat as this generation's agent; the HTTP status."""
        payload = {
            "job_id": self.job_id,
            "generation": self.generation,
            "phase": "training",
            "gpu": {"available": False},
            "agent_time": time.time(),
            **body,
        }
        reply = httpx.post(
            run.stack.api_url + "/agent/heartbeat",
            json=payload,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        return reply.status_code


def copy_checkpoint(
    keys: HostKeys, step: int, to_step: int, edit: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Copy this generation's checkpoint `step` to `to_step`, files first, then a manifest of
    its own (written now, naming `to_step`; `edit` changes it before it is written, so no valid
    version of a tampered one ever exists); the new manifest's reference."""
    source = manifest_key(keys.job_id, step, keys.generation)
    manifest = json.loads(keys.get(source))
    base = source.rsplit("/", 1)[0] + "/"
    target = manifest_key(keys.job_id, to_step, keys.generation)
    for entry in manifest["files"]:
        keys.put(target.rsplit("/", 1)[0] + "/" + entry["path"], keys.get(base + entry["path"]))
    manifest.update(step=to_step, created_at=datetime.now(UTC).isoformat())
    if isinstance(manifest.get("name"), str):  # the saved name carries the step, as an agent's
        manifest["name"] = re.sub(r"\d+(?=\D*$)", str(to_step), manifest["name"], count=1)
    if edit is not None:
        edit(manifest)
    return write_manifest(keys, to_step, manifest)


def write_manifest(keys: HostKeys, step: int, manifest: dict[str, Any] | bytes) -> dict[str, Any]:
    """Write a manifest at `step` (JSON, or raw bytes); the checkpoint reference a host reports
    for it: key and the sha256 of the bytes written."""
    data = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    key = manifest_key(keys.job_id, step, keys.generation)
    answer = keys.put(key, data)
    if answer != "ok":
        raise RuntimeError(f"writing {key} with generation {keys.generation}'s key: {answer}")
    return {
        "step": step,
        "generation": keys.generation,
        "manifest_key": key,
        "manifest_sha256": hashlib.sha256(data).hexdigest(),
    }


def crafted_manifests(keys: HostKeys, real_step: int, first_step: int) -> dict[str, dict[str, Any]]:
    """Four crafted checkpoints at steps from `first_step` up, each made from the real
    checkpoint `real_step` (its files copied, its manifest altered): kind → the reference a host
    would report. Each would be restored, as the newest recorded, if the restore trusted it."""

    def dotdot_path(manifest: dict[str, Any]) -> None:
        manifest["files"].append({"path": "../../../../escape", "size": 1, "sha256": "0" * 64})

    def huge_size(manifest: dict[str, Any]) -> None:
        manifest["files"][0]["size"] = 10**15

    def wrong_sha256(manifest: dict[str, Any]) -> None:
        manifest["files"][0]["sha256"] = "0" * 64

    step = first_step
    made = {"bad-json": write_manifest(keys, step, b'{"step": %d, "files": [' % step)}
    for kind, edit in (
        ("dotdot-path", dotdot_path),
        ("huge-size", huge_size),
        ("wrong-sha256", wrong_sha256),
    ):
        step += 1
        made[kind] = copy_checkpoint(keys, real_step, step, edit)
    return made


__all__ = ["HostKeys", "copy_checkpoint", "crafted_manifests", "write_manifest"]
