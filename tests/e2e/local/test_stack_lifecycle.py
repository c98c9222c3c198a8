"""Starting and stopping the local stack: nothing left behind."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import api, provision_by_hand, wait_for
from tests.e2e.processes import alive
from tether_local.hosts.local_hosts import describe_marked
from tether_local.stack import LocalStack, LocalStackConfig

pytestmark = pytest.mark.slow


def test_stack_starts_serves_and_stops_cleanly(tmp_path: Path) -> None:
    config = LocalStackConfig(root=tmp_path / "stack", monitor_interval_s=0, startup_s=0.2)
    with LocalStack(config) as stack:
        urls = [stack.api_url, stack.s3_url, stack.vast_url, stack.cloudflare_url]
        assert all(url.startswith("http://127.0.0.1:") for url in urls)
        assert httpx.get(stack.s3_url + "/").status_code == 401  # the R2 front, unsigned
        job = provision_by_hand(stack, "sleep 600")
        wait_for("the host's processes", lambda: len(stack.hosts.processes()) >= 2)  # type: ignore[union-attr]
        rclone = stack.s3.process  # type: ignore[union-attr]
        assert rclone is not None and rclone.poll() is None
        stack_id = stack.stack_id
        assert stack.hosts is not None
        host = stack.hosts.get(job.instance_id)
        assert api(stack, "GET", "/jobs").status_code == 200
        lambdas = stack.aws.lambda_pids()
        assert lambdas, "each Lambda execution environment is a process"

    assert describe_marked(f"{stack_id}:", prefix=True) == []
    assert [pid for pid in lambdas if alive(pid)] == []
    assert describe_marked(host.marker) == []
    assert rclone.poll() is not None  # the S3 stand-in is gone
    for url in urls:
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "/", timeout=2)
    # A second stack can start in the same process afterwards (moto and env were restored).
    with LocalStack(LocalStackConfig(monitor_interval_s=0)) as again:
        assert httpx.get(again.api_url + "/jobs").status_code == 403
