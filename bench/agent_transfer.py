"""Agent transfer benchmark: upload and restore a checkpoint of several files through the local
stack's S3 endpoint (the R2 front before `rclone serve s3`, with a key minted by the Cloudflare
simulator), then the same with `s5cmd` on the same endpoint, same run.

    python bench/agent_transfer.py [--quick] [--direct]   # 1 GiB, or 128 MiB with --quick

`--direct` talks to rclone itself (static key, no front): the difference is the front's cost.

Prints each side's MB/s, `upload_ratio` and `restore_ratio` (agent / s5cmd throughput), the
agent's CPU seconds per GiB, and the idle agent's CPU use (% of one core) while it watches and
heartbeats at the default 15 s interval. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tether_agent.restore import restore_latest  # noqa: E402
from tether_agent.storage import Storage  # noqa: E402
from tether_agent.storage_credentials import Credentials, CredentialStore  # noqa: E402
from tether_agent.uploader import CheckpointUploader  # noqa: E402

from tether_local.cloudflare_sim import CloudflareSim  # noqa: E402
from tether_local.r2_front import R2Front  # noqa: E402
from tether_local.s3server import start_s3_server  # noqa: E402

KEY, SECRET = "BENCHKEY0001", "bench-secret-0001"
PARENT = "bench-parent"
MIB = 1024 * 1024
MARKER = ".tether-complete"


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def make_checkpoint(path: Path, total_mb: int) -> int:
    """Several files like a real checkpoint: one big shard, two mid-size, a few small."""
    path.mkdir(parents=True)
    sizes = {"model-00001.bin": total_mb // 2, "model-00002.bin": total_mb // 4,
             "optimizer.pt": total_mb // 4 - 1, "rng_state.pth": 1}  # fmt: skip
    block = os.urandom(MIB)
    for name, mb in sizes.items():
        with (path / name).open("wb") as f:
            for i in range(mb):
                f.write(block[i % 7 :] + block[: i % 7])  # distinct blocks, cheap to make
    (path / "trainer_state.json").write_text('{"global_step": 100}')
    (path / MARKER).write_text("done")
    return sum(p.stat().st_size for p in path.iterdir())


@dataclass(frozen=True)
class Endpoint:
    url: str
    bucket: str
    key: str
    secret: str
    token: str

    def credentials(self) -> Credentials:
        return Credentials(self.key, self.secret, self.token, None, self.url, self.bucket)


@contextlib.contextmanager
def endpoint(root: Path, bucket: str, *, direct: bool) -> Iterator[Endpoint]:
    """rclone over `root` with `bucket`; unless `direct`, behind the R2 front with a minted key
    scoped to the prefixes the benchmark writes (what the local stack does)."""
    (root / bucket).mkdir(parents=True, exist_ok=True)
    if direct:
        with start_s3_server(root, {KEY: SECRET}) as server:
            yield Endpoint(server.endpoint_url, bucket, KEY, SECRET, "")
        return
    sim = CloudflareSim(parents={PARENT: "admin-read-write"}, buckets=(bucket,))
    body = {"bucket": bucket, "parentAccessKeyId": PARENT, "ttlSeconds": 3600,
            "permission": "object-read-write", "prefixes": ["jobs/", "s5/"]}  # fmt: skip
    url = f"https://sim.invalid/client/v4/accounts/{sim.account_id}/r2/temp-access-credentials"
    auth = {"Authorization": "Bearer local-api-token"}
    minted = sim.handle(httpx.Request("POST", url, headers=auth, json=body)).json()["result"]
    with (
        start_s3_server(root, None) as server,
        R2Front(server.endpoint_url, sim.live_key) as front,
    ):
        yield Endpoint(front.url, bucket, minted["accessKeyId"], minted["secretAccessKey"],
                       minted["sessionToken"])  # fmt: skip


def s5cmd(ep: Endpoint, *args: str) -> None:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ep.key, "AWS_SECRET_ACCESS_KEY": ep.secret,
           "AWS_REGION": "us-east-1"}  # fmt: skip
    env.pop("AWS_SESSION_TOKEN", None)
    if ep.token:
        env["AWS_SESSION_TOKEN"] = ep.token
    exe = shutil.which("s5cmd", path=str(Path(sys.executable).parent)) or "s5cmd"
    subprocess.run([exe, "--endpoint-url", ep.url, *args], env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def transfer_bench(work: Path, total_mb: int, *, direct: bool = False) -> dict[str, float]:
    src = work / "src" / "checkpoint-100"
    nbytes = make_checkpoint(src, total_mb)
    gib = nbytes / 1024**3
    results: dict[str, float] = {"bytes": nbytes}
    with endpoint(work / "s3", "bench", direct=direct) as ep:
        store = CredentialStore(ep.credentials())
        storage = Storage(store, "jobs/bench/", concurrency=8, part_size=16 * MIB)
        uploader = CheckpointUploader(storage, src.parent, MARKER, 1, 3, file_concurrency=4)

        c0, t0 = cpu_s(), time.perf_counter()
        uploaded = uploader.upload_pending()
        assert uploaded, "agent uploaded nothing"
        t1, c1 = time.perf_counter(), cpu_s()
        # generation 2 restores what generation 1 uploaded (and the control plane recorded)
        result = restore_latest(storage, uploaded, 2, work / "agent-restore", file_concurrency=4)
        t2, c2 = time.perf_counter(), cpu_s()
        assert result.restored is not None and result.restored.ref.step == 100
        storage.close()

        s0 = time.perf_counter()
        s5cmd(ep, "cp", f"{src}/*", "s3://bench/s5/")
        s1 = time.perf_counter()
        s5cmd(ep, "cp", "s3://bench/s5/*", f"{work / 's5-restore'}/")
        s2 = time.perf_counter()

    mb = nbytes / 1e6
    results.update(
        agent_upload_mb_s=mb / (t1 - t0), agent_restore_mb_s=mb / (t2 - t1),
        s5cmd_upload_mb_s=mb / (s1 - s0), s5cmd_restore_mb_s=mb / (s2 - s1),
        agent_upload_cpu_s_per_gib=(c1 - c0) / gib, agent_restore_cpu_s_per_gib=(c2 - c1) / gib,
    )  # fmt: skip
    results["upload_ratio"] = results["agent_upload_mb_s"] / results["s5cmd_upload_mb_s"]
    results["restore_ratio"] = results["agent_restore_mb_s"] / results["s5cmd_restore_mb_s"]
    return results


class _Api(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # answers heartbeats with a renewed lease
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        now = time.time()
        body = json.dumps({"command": "continue", "lease_expires_at": now + 3600,
                           "server_time": now}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_bench(work: Path, seconds: float, *, direct: bool = False) -> float:
    """% of one core the agent process itself uses while training sleeps."""
    api = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    with endpoint(work / "s3-idle", "idle", direct=direct) as ep:
        env = {**os.environ, "TETHER_JOB_ID": "idle", "TETHER_GENERATION": "1",
               "TETHER_API_URL": f"http://127.0.0.1:{api.server_address[1]}",
               "TETHER_AGENT_TOKEN": "t", "TETHER_CHECKPOINT_DIR": str(work / "idle-ckpt"),
               "TETHER_S3_ENDPOINT": ep.url, "TETHER_S3_BUCKET": "idle",
               "TETHER_S3_PREFIX": "jobs/idle/", "TETHER_S3_ACCESS_KEY_ID": ep.key,
               "TETHER_S3_SECRET_ACCESS_KEY": ep.secret, "TETHER_S3_SESSION_TOKEN": ep.token,
               "TETHER_WORK_DIR": str(work / "idle-work"),
               "CONTAINER_ID": "1", "CONTAINER_API_KEY": "k"}  # fmt: skip
        agent = subprocess.Popen(
            [sys.executable, "-m", "tether_agent", "run", "--", "sleep", str(seconds + 30)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            time.sleep(5)  # start-up (imports, restore of nothing) is not idle time
            c0, t0 = proc_cpu_s(agent.pid), time.perf_counter()
            time.sleep(seconds)
            c1, t1 = proc_cpu_s(agent.pid), time.perf_counter()
        finally:
            agent.terminate()
            agent.wait(timeout=30)
    api.shutdown()
    return 100 * (c1 - c0) / (t1 - t0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 MiB instead of 1 GiB")
    parser.add_argument("--idle-seconds", type=float, default=None)
    parser.add_argument(
        "--direct", action="store_true", help="rclone itself, without the R2 front (a baseline)"
    )
    args = parser.parse_args()
    total_mb = 128 if args.quick else 1024
    idle_s = args.idle_seconds or (20.0 if args.quick else 60.0)
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        r = transfer_bench(Path(tmp), total_mb, direct=args.direct)
        idle_pct = idle_bench(Path(tmp), idle_s, direct=args.direct)
    print(f"endpoint: {'rclone directly' if args.direct else 'R2 front before rclone'}")
    print(f"checkpoint: {r['bytes'] / MIB:.0f} MiB in 5 files")
    for side in ("agent", "s5cmd"):
        up, down = r[f"{side}_upload_mb_s"], r[f"{side}_restore_mb_s"]
        print(f"{side:6} upload {up:.1f} MB/s  restore {down:.1f} MB/s")
    print(f"upload_ratio: {r['upload_ratio']:.2f}")
    print(f"restore_ratio: {r['restore_ratio']:.2f}")
    print(f"agent_cpu_s_per_gib: upload {r['agent_upload_cpu_s_per_gib']:.2f} "
          f"restore {r['agent_restore_cpu_s_per_gib']:.2f}")  # fmt: skip
    print(f"agent_idle_cpu_pct: {idle_pct:.2f} (of one core, over {idle_s:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
