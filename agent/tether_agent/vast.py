"""Stop (or destroy) this very instance through the Vast API with the per-instance key that
Vast puts in the container (`CONTAINER_API_KEY`): the dead-man switch's last act."""

from __future__ import annotations

import logging
import random
import time
from typing import Literal

import httpx

log = logging.getLogger(__name__)
RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})


def stop_own_instance(
    vast_url: str,
    container_id: str,
    api_key: str,
    action: Literal["stop", "destroy"],
    *,
    attempts: int = 8,
    backoff_s: float = 1.0,
    client: httpx.Client | None = None,
) -> bool:
    """PUT `{"state": "stopped"}` (stop) or DELETE (destroy) `/api/v0/instances/<id>/`,
    retrying network errors, 429 and 5xx with backoff. True once Vast accepted it."""
    url = f"{vast_url.rstrip('/')}/api/v0/instances/{container_id}/"
    http = client or httpx.Client(timeout=15.0)
    headers = {"Authorization": f"Bearer {api_key}"}  # never ?api_key=: it leaks into logs
    try:
        for attempt in range(1, attempts + 1):
            try:
                if action == "destroy":
                    response = http.delete(url, headers=headers)
                else:
                    response = http.put(url, headers=headers, json={"state": "stopped"})
            except httpx.HTTPError as exc:
                status, detail = None, str(exc)
            else:
                if response.status_code < 300:
                    log.info("asked Vast to %s instance %s", action, container_id)
                    return True
                status, detail = response.status_code, response.text[:200]
                if status not in RETRYABLE:
                    log.error("Vast refused to %s instance: HTTP %s %s", action, status, detail)
                    return False
            delay = min(30.0, backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            log.warning("%s instance: %s %s; retry in %.1fs", action, status, detail, delay)
            time.sleep(delay)
        return False
    finally:
        if client is None:
            http.close()
