"""The artifacts bucket (S3, in the user's account): where `make deploy` puts the agent wheel.

The lifecycle hands each rented host a presigned GET of the newest wheel, so the host needs no
AWS credentials to install the agent (invariant 6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3

from functions.settings import AGENT_WHEEL_PREFIX

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any


class AgentWheelMissing(RuntimeError):
    """The artifacts bucket holds no agent wheel: run `make deploy` (it uploads one).

    The class name is the Step Functions error name the lifecycle's task reports."""


class Artifacts:
    """`client=None` builds a default S3 client."""

    def __init__(self, bucket: str, client: S3Client | None = None) -> None:
        self.bucket = bucket
        self.client: S3Client = client or boto3.client("s3")

    def presign_agent_wheel(self, expires_s: int) -> str:
        """A GET URL, valid `expires_s` seconds, of the newest wheel under `agent/`."""
        listed = self.client.list_objects_v2(Bucket=self.bucket, Prefix=AGENT_WHEEL_PREFIX)
        wheels = [o for o in listed.get("Contents", []) if o["Key"].endswith(".whl")]
        if not wheels:
            raise AgentWheelMissing(f"no agent wheel under s3://{self.bucket}/{AGENT_WHEEL_PREFIX}")
        newest = max(wheels, key=lambda o: o["LastModified"])
        return str(
            self.client.generate_presigned_url(
                "get_object",
                Params={"Bucket": self.bucket, "Key": newest["Key"]},
                ExpiresIn=expires_s,
            )
        )
