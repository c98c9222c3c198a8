"""The user secrets in SSM Parameter Store (`functions/domain/secrets.py`): SecureStrings under
`/tether/secrets/`, read in batches of ten (GetParameters' limit).

`missing` reads without decryption (the jobs API checks names at submit and holds no KMS grant);
`values` decrypts (the heartbeat function only, for the current generation's reply).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import boto3

from functions.domain.secrets import parameter_name

_BATCH = 10  # GetParameters takes at most ten names


class SecretStore:
    def __init__(self, client: Any = None) -> None:
        self._given = client

    @property
    def _client(self) -> Any:
        if self._given is None:  # built on first use: most jobs list no secrets
            self._given = boto3.client("ssm")
        return self._given

    def _get(self, names: Sequence[str], *, decrypt: bool) -> tuple[dict[str, str], list[str]]:
        found: dict[str, str] = {}
        missing: list[str] = []
        for start in range(0, len(names), _BATCH):
            batch = list(names[start : start + _BATCH])
            reply = self._client.get_parameters(
                Names=[parameter_name(n) for n in batch], WithDecryption=decrypt
            )
            by_parameter = {p["Name"]: p["Value"] for p in reply.get("Parameters", [])}
            for name in batch:
                value = by_parameter.get(parameter_name(name))
                if value is None:
                    missing.append(name)
                else:
                    found[name] = value
        return found, missing

    def missing(self, names: Sequence[str]) -> list[str]:
        """The names the store does not hold (nothing decrypted)."""
        return self._get(names, decrypt=False)[1] if names else []

    def values(self, names: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        """The decrypted values of the names it holds, and the names it does not."""
        return self._get(names, decrypt=True) if names else ({}, [])
