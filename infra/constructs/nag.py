"""Acknowledging a cdk-nag (v3) finding: always with a written reason, as narrow as possible.

A rule that reports several findings on one resource (IAM5) is acknowledged per finding:
`acknowledge(role, "AwsSolutions-IAM5", reason, "Resource::*")`.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct


def acknowledge(construct: IConstruct, rule: str, reason: str, *findings: str) -> None:
    ids = [f"{rule}[{finding}]" for finding in findings] or [rule]
    Validations.of(construct).acknowledge(*(Acknowledgment(id=i, reason=reason) for i in ids))
