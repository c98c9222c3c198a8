"""The per-generation agent token (docs/architecture.md#heartbeat): minted at rent, stored only as
its hash."""

from __future__ import annotations

import hashlib
import secrets


def new_agent_token() -> str:
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """What the table keeps of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()
