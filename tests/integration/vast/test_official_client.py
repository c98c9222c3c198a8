"""The official `vastai` client (PyPI `vastai`, a dev dependency) against the Vast simulator over
loopback HTTP: search, create, show, label, stop, destroy and the charges report all succeed, so
the simulator answers what the real API answers in the shapes a client nobody here wrote expects.

Nothing leaves the machine: the client's base URL (`VAST_URL`, which also steers its GPU-name
lookups) is the loopback server, its update check is off, and every proxy variable points at a
closed loopback port, so a request to anywhere else fails at once instead of going out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether_local.http import LoopbackServer
from tether_local.vast_sim import VastSimulator

MAIN = "from vastai.cli.main import main; main()"
CLOSED_PORT = "http://127.0.0.1:9"  # discard: nothing listens, a stray request fails fast


@pytest.fixture
def sim() -> Iterator[tuple[VastSimulator, str]]:
    vast = VastSimulator(startup_s=0, created_s=0, restart_s=0, seed=3)
    with LoopbackServer(vast.handle, name="vast") as server:
        yield vast, server.url


class Cli:
    def __init__(self, url: str, api_key: str, home: Path) -> None:
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_CACHE_HOME": str(home / "cache"),
            "XDG_DATA_HOME": str(home / "data"),
            "XDG_STATE_HOME": str(home / "state"),
            "VAST_URL": url,
            "VAST_API_KEY": api_key,
            "VASTAI_NO_UPDATE_CHECK": "1",
            "COLUMNS": "200",
            "LANG": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8",
            **{name: CLOSED_PORT for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                              "http_proxy", "https_proxy", "all_proxy")},
            "NO_PROXY": "127.0.0.1",
            "no_proxy": "127.0.0.1",
        }  # fmt: skip
        self.url = url

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", MAIN, "--url", self.url, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        # The client exits 0 after printing an HTTP error, so its stderr is the verdict.
        assert (done.returncode, done.stderr.strip()) == (0, ""), (args, done.stdout, done.stderr)
        return done.stdout

    def raw(self, *args: str) -> Any:
        return json.loads(self("--raw", *args))


def test_the_official_client_runs_its_commands_against_the_simulator(
    sim: tuple[VastSimulator, str], tmp_path: Path
) -> None:
    vast, url = sim
    cli = Cli(url, vast.api_key, tmp_path)

    # search: its query parser sends numbers as text ({"num_gpus": {"eq": "1"}})
    query = "num_gpus=1 reliability>0.9 disk_space>=20"
    offers = cli.raw("search", "offers", query, "--limit", "5")
    assert 0 < len(offers) <= 5
    assert all(o["num_gpus"] == 1 and o["reliability2"] > 0.9 for o in offers)
    assert all(o["disk_space"] >= 20 for o in offers)

    created = cli.raw("create", "instance", str(offers[0]["id"]), "--image", "python:3.12-slim",
                      "--disk", "20", "--label", "cli-test")  # fmt: skip
    assert created["success"] is True
    instance_id = created["new_contract"]

    shown = cli.raw("show", "instance", str(instance_id))
    assert (shown["id"], shown["label"]) == (instance_id, "cli-test")
    assert shown["actual_status"] == "running"
    listed = cli.raw("show", "instances")
    assert [i["id"] for i in listed] == [instance_id]

    labelled = cli("label", "instance", str(instance_id), "relabelled")
    assert f"label for {instance_id} set to relabelled" in labelled
    assert f"stopping instance {instance_id}" in cli("stop", "instance", str(instance_id))
    stopped = vast.instance(instance_id)
    assert stopped is not None
    assert (stopped["label"], stopped["actual_status"]) == ("relabelled", "stopped")

    # charges: the raw page, the table, and the tree with every line (start/end/description)
    charges = cli.raw("show", "invoices-v1", "--charges")
    assert [c["source"] for c in charges["results"]] == [f"instance-{instance_id}"]
    table = cli("show", "invoices-v1", "--charges", "--no-color")
    tree = cli("show", "invoices-v1", "--charges", "--format", "tree", "--verbose", "--no-color")
    assert str(instance_id) in table and "Showing 1 of 1 results" in table
    assert f"Instance {instance_id}" in tree and "gpu" in tree

    cli("destroy", "instance", str(instance_id), "-y")
    assert vast.instance(instance_id) is None
    assert cli.raw("show", "instance", str(instance_id)) == {"instances": None}
    assert all(url_.startswith(url) for _, url_ in vast.request_log)
