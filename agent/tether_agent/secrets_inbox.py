"""The job's user secrets as they reach the agent: the first heartbeat reply carrying them is
kept, and training waits for it (bounded) before it starts. Only the training command's
environment gets the values; the shipped log is scrubbed of them (`logs.py`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tether_agent.protocol import SecretValues


class SecretsInbox:
    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.received: SecretValues | None = None
        self._came = threading.Event()

    @property
    def wanted(self) -> bool:
        """Whether the next heartbeat asks for them."""
        return bool(self.names) and self.received is None

    def offer(self, secrets: SecretValues) -> None:
        if self.wanted:
            self.received = secrets
            self._came.set()

    def values(self) -> dict[str, str]:
        return dict(self.received.values) if self.received else {}

    def wait(self, wait_s: float, give_up: Callable[[], bool]) -> str | None:
        """Why training cannot start, or None when every secret came (or none is needed, or
        `give_up()` turned true meanwhile: the caller's own checks then decide)."""
        if not self.names:
            return None
        deadline = time.monotonic() + wait_s
        while not self._came.wait(timeout=0.2):
            if give_up():
                return None
            if time.monotonic() >= deadline:
                names = ", ".join(self.names)
                return f"the job's secrets ({names}) did not arrive within {wait_s:g} s"
        got = self.received
        missing = (
            sorted(set(self.names) - set(got.values) | set(got.missing)) if got else self.names
        )
        if missing:
            return (
                f"secrets not stored: {', '.join(missing)} (store each with "
                "`tether secrets set NAME`, then submit again)"
            )
        return None
