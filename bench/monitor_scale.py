"""Monitor at scale: one monitor run over 10,000 and over 1,000 active jobs.

    python bench/monitor_scale.py [--quick] [--profile FILE]
    python bench/monitor_scale.py --jobs N [--shards K] [--cold-only] [--profile FILE]

Without `--jobs` (`make bench`): a book of 10,000 jobs, one cold unsharded run and a cold run of
each of `BENCH_SHARDS` shards a minute later, then a book of 1,000 jobs (cold, warm, traced);
`--quick`: 200 and 60 jobs. The JSON's `summary` holds one headline per configuration (jobs,
shards, the slowest shard's estimate, the ActiveJobs read units of one shard, the goal, met),
which `bench.lib.summary` prints. With `--jobs N`: that one book only.

The real monitor Lambda handler (`functions.monitor.handler.handler`, settings from the
environment, clients from `functions.adapters.factory`) runs in process against moto
(`mock_aws`: DynamoDB table from `store.create_table`, the two provider secrets, a state
machine) and the Vast and Cloudflare simulators (through the factory's transport hook). The
book: N jobs RUNNING on N rented simulator instances with fresh heartbeats; 1 % of the hosts are
dead (→ replace transitions, host blame), 2 % of the credentials are due for renewal.

Measured per run (a cold one, which also reads the secrets, then a warm one a minute later):
wall time, time spent inside the simulators (subtracted: a real Vast answers in its own time),
Vast API calls (`request_log`) and pages, every AWS call by operation, estimated DynamoDB units
(`bench.lib.meter`: moto reports a constant capacity, so units come from item sizes), and the
peak Python memory of a third run (tracemalloc) and the process's peak RSS. Own time is also
taken as CPU (the process's, less moto's and the simulators'), which the estimate uses: the
wall of a shared machine swings with what else runs on it.
`--shards K` splits the fleet as a deployment with `monitorShards=K` does
(`functions/domain/shards.py`): each run is K handler invocations, one per shard (`{"shard": k}`),
each measured on its own; the run's estimate is the slowest shard's.
Goals: 1,000 jobs ≤ 10 s and 10,000 jobs ≤ 45 s estimated per run (or per shard);
DynamoDB calls per run ≤ 1 per job changed + pages; Vast calls grow with pages (25 instances
each), not jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import math
import os
import pstats
import resource
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.lib.meter import AwsMeter  # noqa: E402
from bench.lib.report import write_results  # noqa: E402
from functions import settings as env_names  # noqa: E402

NAME = "monitor_scale"
REGION = "us-east-1"
TABLE = "tether-bench"
VAST_BASE = "https://vast.sim"
CLOUDFLARE_BASE = "https://cloudflare.sim/client/v4"
CF_ACCOUNT, CF_TOKEN, CF_PARENT = "bench-account", "bench-token", "local-parent-key"
BUCKET = "tether"
INTERVAL_S = 60.0


def goal_s(jobs: int) -> float:
    """10 s up to 1,000 jobs, 45 s at 10,000."""
    return 10.0 if jobs <= 1000 else 45.0


VAST_PAGE = 25  # instances per page of GET /api/v1/instances/
# Assumed round trips inside AWS for the estimate (not measured here): DynamoDB / Step Functions /
# Secrets Manager from Lambda about 10 ms; one Vast API page about 500 ms.
AWS_CALL_S = 0.010
VAST_CALL_S = 0.5


def estimated_lambda_s(
    own_s: float,
    calls: dict[str, int],
    pooled: dict[str, int],
    vast_chains: list[int],
    pools: tuple[int, int],
) -> float:
    """The run's own time plus the assumed latency of each remote call: calls on the run's
    thread one after another; calls from the monitor's pools `workers` at a time (BatchGetItem:
    `BATCH_GET_WORKERS`, the jobs' writes: `APPLY_WORKERS`, given in `pools`; assumes the
    pool stays full); the Vast page chains (instances, charges) side by side, each chain's
    pages one after another."""
    batch_workers, apply_workers = pools
    sequential = sum(calls.values()) - sum(pooled.values())
    batch_gets = pooled.get("dynamodb.BatchGetItem", 0)
    applied = sum(pooled.values()) - batch_gets
    aws_s = AWS_CALL_S * (
        sequential + math.ceil(batch_gets / batch_workers) + math.ceil(applied / apply_workers)
    )
    *side_by_side, after = vast_chains or [0]
    return own_s + aws_s + (max(side_by_side, default=0) + after) * VAST_CALL_S


def vast_chains(request_log: list[tuple[str, str]]) -> list[int]:
    """Vast calls per chain that runs side by side: each label range of the instance listing
    (its `select_filters`), the charges; then the calls made after them (destroys), added to
    the longest chain by `estimated_lambda_s`: `[*chains, after]`."""
    chains: dict[str, int] = {}
    after = 0
    for method, url in request_log:
        query = parse_qs(urlsplit(url).query)
        if method == "GET" and "/instances" in url:
            key = "instances " + query.get("select_filters", [""])[0]
        elif "/charges" in url:
            key = "charges"
        else:
            after += 1
            continue
        chains[key] = chains.get(key, 0) + 1
    return [*chains.values(), after]


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class TimedTransport(httpx.BaseTransport):
    """Routes to a simulator and adds up the time spent inside it."""

    def __init__(self, handle: Callable[[httpx.Request], httpx.Response]) -> None:
        self.handle = handle
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.calls = 0

    lock = threading.Lock()  # one simulator call at a time: chains side by side never overlap

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            start, start_cpu = time.perf_counter(), time.thread_time()
            self.calls += 1
            try:
                response = self.handle(request)
                response.read()
                return response
            finally:
                self.seconds += time.perf_counter() - start
                self.cpu_seconds += time.thread_time() - start_cpu


class FakeContext:
    function_name = "tether-monitor"
    function_version = "$LATEST"
    invoked_function_arn = f"arn:aws:lambda:{REGION}:123456789012:function:tether-monitor"
    memory_limit_in_mb = 512
    aws_request_id = "bench"
    log_group_name = "/aws/lambda/tether-monitor"
    log_stream_name = "bench"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 900_000


def expected_vast_calls(instances: int, charge_rows: int, charges_page: int = 500) -> int:
    """One list call per page of instances plus one charges call per page of charge rows."""
    return max(1, math.ceil(instances / VAST_PAGE)) + max(1, math.ceil(charge_rows / charges_page))


def _environment(secrets: dict[str, str], state_machine_arn: str, shards: int) -> None:
    os.environ.update(
        {
            env_names.MONITOR_SHARDS_ENV: str(shards),
            env_names.SERVICE_NAME_ENV: "tether",
            env_names.METRICS_NAMESPACE_ENV: "Tether",
            env_names.TABLE_NAME_ENV: TABLE,
            env_names.STATE_MACHINE_ARN_ENV: state_machine_arn,
            env_names.VAST_SECRET_ARN_ENV: secrets["vast"],
            env_names.CLOUDFLARE_SECRET_ARN_ENV: secrets["cloudflare"],
            env_names.VAST_BASE_URL_ENV: VAST_BASE,
            env_names.CLOUDFLARE_BASE_URL_ENV: CLOUDFLARE_BASE,
            env_names.MONITOR_INTERVAL_ENV: str(INTERVAL_S),
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
    )


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The handler logs and prints its EMF metrics to stdout; keep ours readable."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


@contextlib.contextmanager
def store_batch(store: Any) -> Iterator[Callable[[dict[str, Any]], None]]:
    """BatchWriteItem in 25s (plain puts) into the store's table."""
    from functions.adapters.table import serialize

    pending: list[dict[str, Any]] = []

    def flush() -> None:
        request = {store.table_name: [{"PutRequest": {"Item": serialize(i)}} for i in pending]}
        while request:
            request = store.client.batch_write_item(RequestItems=request).get("UnprocessedItems")
        pending.clear()

    def put(item: dict[str, Any]) -> None:
        pending.append(item)
        if len(pending) == 25:
            flush()

    yield put
    if pending:
        flush()


def populate(jobs: int, clock: Clock, vast_sim: Any, store: Any) -> dict[str, int]:
    """`jobs` RUNNING jobs, each on its own rented simulator instance, as the lifecycle leaves
    them; then heartbeats a few minutes later. Returns what was set up."""
    from functions.adapters.table import event_key, generation_key, job_item
    from functions.adapters.vast import VastClient
    from functions.domain.credentials import credentials_ttl_s
    from functions.domain.heartbeat_contract import GpuProbe, StorageCredentials, StorageKey
    from functions.domain.job import Generation, Heartbeat, JobState, new_job
    from functions.domain.jobspec import load_job_file, parse_job
    from functions.domain.labels import instance_label

    # A budget no job nears in the benchmark's minutes: the incidents are the ones planted here.
    # Its code.dir left out: the API stores only specs whose code is an uploaded archive.
    example = load_job_file(ROOT / "examples" / "tiny-cpu" / "job.yaml").model_dump()
    spec = parse_job({**example, "budget_usd": 1000.0, "code": None})
    vast = VastClient(
        vast_sim.api_key,
        base_url=VAST_BASE,
        client=httpx.Client(transport=httpx.MockTransport(vast_sim.handle)),
    )
    offers = sorted(vast_sim.offers(), key=lambda o: o["id"])
    ttl = credentials_ttl_s(spec.policy)
    renew_every = 50  # 2 % of the generations hold credentials that are due for renewal
    rented: list[tuple[str, int]] = []
    with store_batch(store) as put:
        for i in range(jobs):
            offer = offers[i]
            job_id = f"bench-{i:05d}"
            job, event = new_job(spec, job_id=job_id, now=clock(), submitted_by="bench")
            result = vast.rent(
                int(offer["id"]), image=spec.image, disk_gb=10, label=instance_label(job_id, 1),
                env={}, onstart="true",
            )  # fmt: skip
            due = i % renew_every == renew_every - 1
            expires_at = clock() + (spec.policy.lease_window_s if due else ttl)
            credentials = StorageCredentials(
                endpoint="https://r2.sim", bucket=BUCKET,
                read=StorageKey(
                    access_key_id=f"r{i}", secret_access_key="s", session_token="t",  # noqa: S106
                    expires_at=expires_at, prefix=f"jobs/{job_id}/",
                ),
                write=StorageKey(
                    access_key_id=f"w{i}", secret_access_key="s", session_token="t",  # noqa: S106
                    expires_at=expires_at, prefix=f"jobs/{job_id}/g1/",
                ),
            )  # fmt: skip
            usd_per_hour = float(offer["dph_base"]) + float(offer["storage_cost"]) * 10 / 720
            generation = Generation(
                job_id=job_id, generation=1, status="running", token_hash="0" * 64,
                instance_id=result.instance_id, offer_id=int(offer["id"]),
                machine_id=int(offer["machine_id"]), usd_per_hour=usd_per_hour,
                created_at=clock(), lease_expires_at=clock() + spec.policy.lease_window_s,
                credentials=credentials,
            )  # fmt: skip
            # The items the lifecycle's create_job + record_generation leave, written without
            # transactions: moto copies the whole table for each one, which would make setup
            # quadratic in the number of jobs.
            running = job.model_copy(update={"state": JobState.RUNNING, "current_generation": 1})
            put(job_item(running))
            gen_item = generation.model_dump(mode="json", exclude_none=True)
            put({**generation_key(job_id, 1), **gen_item})
            put({**event_key(event), **event.model_dump(mode="json")})
            rented.append((job_id, result.instance_id))
    first_lease = clock() + spec.policy.lease_window_s  # what each generation was rented with
    clock.now += 5 * 60  # the hosts booted; the agents train and heartbeat
    dead = 0
    for i, (job_id, instance_id) in enumerate(rented):
        if i % 100 == 99:  # 1 % of the hosts died
            vast_sim.kill(instance_id, "offline")
            dead += 1
        beat = Heartbeat(
            at=clock() - 10, agent_time=clock() - 10, phase="training", step=100 + i,
            gpu=GpuProbe(available=True, utilization_pct=90.0),
        )  # fmt: skip
        store.store_heartbeat(
            job_id, 1, token_hash="0" * 64, heartbeat=beat, lease_expires_at=first_lease
        )
    return {"jobs": jobs, "dead_hosts": dead, "credentials_due": jobs // renew_every}


def run(
    jobs: int,
    *,
    trace_memory: bool = True,
    cold_only: bool = False,
    shards: int | Sequence[int] = 1,
    profile: Path | None = None,
) -> dict[str, Any]:
    """One book of `jobs`, then for each shard count of `shards`, in order, its runs (each
    count's first run cold: the factory's cached clients and secrets are dropped before it;
    each count a minute after the last). A single count: that run's results, as always;
    several: `{"configurations": [one such result per count]}`. `profile`: cProfile every cold
    run into that file (`pstats` text, by cumulative time, then the handler's own functions by
    their own time; it slows the runs)."""
    counts = [shards] if isinstance(shards, int) else list(shards)
    found = _run(jobs, trace_memory=trace_memory, cold_only=cold_only, counts=counts,
                 profile=profile)  # fmt: skip
    return found[0] if isinstance(shards, int) else {"configurations": found}


def _run(
    jobs: int,
    *,
    trace_memory: bool,
    cold_only: bool,
    counts: list[int],
    profile: Path | None,
) -> list[dict[str, Any]]:
    import boto3
    from moto import mock_aws

    # Fake credentials first: nothing here may reach a real AWS account.
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        os.environ[key] = "testing"
    os.environ["AWS_DEFAULT_REGION"] = os.environ["AWS_REGION"] = REGION
    os.environ.pop("AWS_PROFILE", None)
    with mock_aws():
        # moto swaps boto3's default session for the mock's span: hook the one inside it.
        boto3.setup_default_session(region_name=REGION)
        meter = AwsMeter(index_keys=("active_pk", "list_pk")).install()
        from functions.adapters import factory
        from functions.adapters.store import JobStore
        from functions.adapters.table import create_table
        from tether_local.r2.cloudflare_sim import CloudflareSim
        from tether_local.vast_sim import VastSimulator
        from tether_local.vast_sim.offers import generate_offers

        dynamodb = boto3.client("dynamodb")
        create_table(dynamodb, TABLE)
        sm = boto3.client("secretsmanager")
        secrets = {
            "vast": sm.create_secret(Name="tether/vast", SecretString="x")["ARN"],
            "cloudflare": sm.create_secret(Name="tether/cloudflare", SecretString="x")["ARN"],
        }
        machine = boto3.client("stepfunctions").create_state_machine(
            name="tether-lifecycle",
            definition='{"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": true}}}',
            roleArn="arn:aws:iam::123456789012:role/bench",
        )
        _environment(secrets, machine["stateMachineArn"], counts[0])

        clock = Clock(1_790_000_000.0)
        vast_sim = VastSimulator(
            generate_offers(jobs + 20, seed=11), clock=clock, startup_s=30, seed=11
        )
        cloudflare_sim = CloudflareSim(account_id=CF_ACCOUNT, api_tokens=[CF_TOKEN], clock=clock)
        sm.put_secret_value(SecretId=secrets["vast"], SecretString=vast_sim.api_key)
        sm.put_secret_value(
            SecretId=secrets["cloudflare"],
            SecretString=(
                f'{{"account_id": "{CF_ACCOUNT}", "api_token": "{CF_TOKEN}", '
                f'"parent_access_key_id": "{CF_PARENT}", "bucket": "{BUCKET}"}}'
            ),
        )
        transports = {
            "vast": TimedTransport(vast_sim.handle),
            "cloudflare": TimedTransport(cloudflare_sim.handle),
        }
        hooks = factory.Hooks(transport=lambda p: transports[p], sleep=lambda s: None, clock=clock)
        factory.install_hooks(hooks)
        setup_start = time.perf_counter()
        setup = populate(jobs, clock, vast_sim, JobStore(TABLE, client=dynamodb))
        setup_s = time.perf_counter() - setup_start

        from functions.adapters import bulk_reads
        from functions.monitor import service
        from functions.monitor.handler import handler

        # The pools run one worker each here: moto's time is subtracted from the wall, and
        # calls in flight together would count their overlap twice. The estimate divides the
        # pooled calls by the production pool sizes instead (`estimated_lambda_s`).
        pools = (bulk_reads.BATCH_GET_WORKERS, service.APPLY_WORKERS)
        bulk_reads.BATCH_GET_WORKERS = service.APPLY_WORKERS = 1

        profiler = cProfile.Profile() if profile is not None else None

        def measure(name: str, shard: int, shards: int) -> dict[str, Any]:
            meter.reset()
            vast_sim.request_log.clear()
            for t in transports.values():
                t.seconds, t.cpu_seconds, t.calls = 0.0, 0.0, 0
            charge_rows = len(vast_sim.charges())
            listed = len(vast_sim.instances())
            if name == "traced":
                tracemalloc.start()
            profiling = profiler if name == "cold" else None
            start, start_cpu = time.perf_counter(), time.process_time()
            with quiet():
                if profiling is not None:
                    profiling.enable()
                reply = handler({"shard": shard} if shards > 1 else {}, FakeContext())
                if profiling is not None:
                    profiling.disable()
            wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
            peak = None
            if name == "traced":
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
            sim_s = sum(t.seconds for t in transports.values()) + meter.backend_seconds
            # The handler's own CPU (all its threads), apart from moto's and the simulators':
            # unlike the wall, it does not grow when other work shares the machine's cores.
            own_cpu = (
                cpu - meter.backend_cpu_seconds - sum(t.cpu_seconds for t in transports.values())
            )
            return {
                "run": name,
                "shard": shard,
                "shards": shards,
                "wall_s": wall,
                "simulators_s": sim_s,
                "wall_without_simulators_s": wall - sim_s,
                "own_cpu_s": own_cpu,
                "vast_sim_s": transports["vast"].seconds,
                "estimated_lambda_s": estimated_lambda_s(
                    own_cpu,
                    dict(meter.calls),
                    dict(meter.pooled),
                    vast_chains(vast_sim.request_log),
                    pools,
                ),
                "vast_chains": vast_chains(vast_sim.request_log),
                "vast_calls": len(vast_sim.request_log),
                "vast_calls_expected": expected_vast_calls(listed, charge_rows),
                "vast_instances_listed": listed,
                "cloudflare_calls": transports["cloudflare"].calls,
                "reply": reply,
                "peak_python_mib": None if peak is None else peak / 2**20,
                **meter.snapshot(),
            }

        found: list[dict[str, Any]] = []
        names = ("cold", "warm", "traced") if trace_memory else ("cold", "warm")
        for shards in counts:
            os.environ[env_names.MONITOR_SHARDS_ENV] = str(shards)
            factory.install_hooks(hooks)  # drops the cached clients: this count's first is cold
            runs: list[dict[str, Any]] = []
            for name in names[:1] if cold_only else names:
                runs.extend(measure(name, shard, shards) for shard in range(shards))
                clock.now += INTERVAL_S
            found.append(
                {
                    "setup": {**setup, "setup_s": setup_s},
                    "runs": runs,
                    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                    "goal_s": goal_s(jobs),
                    "shards": shards,
                    "headline": headline(jobs, shards, runs),
                }
            )
        factory.reset()
        meter.uninstall()
        bulk_reads.BATCH_GET_WORKERS, service.APPLY_WORKERS = pools
    if profiler is not None and profile is not None:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(60)
        # The handler's own time: functions by time spent in themselves, moto's, the
        # simulators' and the thread pools' waits left out.
        stats.sort_stats("tottime").print_stats(r"^(?!.*(moto/|tether_local/|acquire))", 60)
        profile.write_text(text.getvalue())
    return found


def headline(jobs: int, shards: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A configuration's headline for `make bench`'s summary (`bench.lib.summary.render_monitor`):
    its cold run, the slowest shard's estimate and the most index read units one shard used."""
    cold = [r for r in runs if r["run"] == "cold"]
    estimated = max(r["estimated_lambda_s"] for r in cold)
    return {
        "jobs": jobs,
        "shards": shards,
        "estimated_s": estimated,
        "index_read_units": max(r["dynamodb_index_read_units"] for r in cold),
        "goal_s": goal_s(jobs),
        "met": estimated <= goal_s(jobs),
    }


def print_results(results: dict[str, Any]) -> None:
    setup = results["setup"]
    shards = results.get("shards", 1)
    print(
        f"book: {setup['jobs']} running jobs, {setup['dead_hosts']} dead hosts, "
        f"{setup['credentials_due']} credentials due (setup {setup['setup_s']:.1f} s)"
        + (f"; {shards} monitor shards" if shards > 1 else "")
    )
    shown = [r for r in results["runs"] if r["run"] in ("cold", "warm")]
    for r in shown if shards == 1 else shown[:1]:
        _print_run(r, f"{r['run']}.")
    if shards > 1:
        for r in shown:
            reply, ddb = r["reply"], _dynamodb_calls(r)
            print(
                f"{r['run']}.shard{r['shard']}: jobs {reply.get('jobs')} estimated_lambda_s "
                f"{r['estimated_lambda_s']:.2f} own_cpu_s {r['own_cpu_s']:.2f} vast_calls "
                f"{r['vast_calls']} chains {r['vast_chains']} dynamodb_calls "
                f"{sum(ddb.values())} {ddb} index_read_units "
                f"{r['dynamodb_index_read_units']:.0f}"
            )
    traced = [r for r in results["runs"] if r["run"] == "traced"]
    if traced:
        peak = max(r["peak_python_mib"] for r in traced)
        print(f"peak_python_mib_per_run: {peak:.1f} (tracemalloc)")
    print(f"peak_rss_mib_process: {results['peak_rss_mib']:.0f} (includes moto and simulators)")
    cold = max((r for r in shown if r["run"] == "cold"), key=lambda r: r["estimated_lambda_s"])
    jobs = setup["jobs"]
    per = "" if shards == 1 else f" per shard, the slowest of {shards}: shard {cold['shard']}"
    print(
        f"monitor_run_estimated_s_{jobs}_jobs: {cold['estimated_lambda_s']:.2f} "
        f"(cold{per}; goal ≤ {results['goal_s']:.0f})"
    )


def _dynamodb_calls(r: dict[str, Any]) -> dict[str, int]:
    return {k.split(".", 1)[1]: v for k, v in r["calls"].items() if k.startswith("dynamodb.")}


def _print_run(r: dict[str, Any], p: str) -> None:
    reply = r["reply"]
    print(
        f"{p}wall_s: {r['wall_s']:.2f} (in moto {r['moto_s']:.2f}, in the Vast simulator "
        f"{r['vast_sim_s']:.2f})"
    )
    print(
        f"{p}own_s: {r['wall_without_simulators_s']:.2f} (wall minus moto and simulators); "
        f"own_cpu_s: {r['own_cpu_s']:.2f} (CPU of the process minus moto's and the "
        "simulators': the estimate's own time)"
    )
    print(
        f"{p}estimated_lambda_s: {r['estimated_lambda_s']:.2f} (own + {AWS_CALL_S * 1000:.0f}"
        f" ms per AWS call, pooled calls / pool size + {VAST_CALL_S * 1000:.0f} ms per Vast"
        f" call, chains side by side, then the rest {r['vast_chains']}, assumed)"
    )
    print(
        f"{p}vast_calls: {r['vast_calls']} (pages expected for the whole account "
        f"{r['vast_calls_expected']}, {r['vast_instances_listed']} instances)"
    )
    print(
        f"{p}verdicts: {reply.get('verdicts')} transitions {reply.get('transitions_started')} "
        f"renewed {reply.get('credentials_renewed')} errors {reply.get('errors')}; "
        f"cloudflare calls {r['cloudflare_calls']}"
    )
    ddb = _dynamodb_calls(r)
    print(f"{p}dynamodb_calls: {sum(ddb.values())} {ddb} (from pools: {r['pooled_calls']})")
    print(
        f"{p}dynamodb_units: read {r['dynamodb_read_units']:.0f} write "
        f"{r['dynamodb_write_units']:.0f} (estimated from item sizes; items read "
        f"{r['dynamodb_items_read']}, written {r['dynamodb_items_written']}); of the reads, "
        f"the ActiveJobs index {r['dynamodb_index_read_units']:.0f}"
    )
    other = {k: v for k, v in r["calls"].items() if not k.startswith("dynamodb.")}
    print(f"{p}other_aws_calls: {other}")


BENCH_SHARDS = 4  # the shard count `make bench` measures the large book with


def suite(*, quick: bool, profile: Path | None = None) -> dict[str, Any]:
    """`make bench`'s configurations: the large book (10,000 jobs; `--quick`: 200) in one
    unsharded run and in `BENCH_SHARDS` shards a minute later, cold runs only (moto is slow at
    that size); then the small book (1,000 jobs, cold, warm and traced; `--quick`: 60, no
    tracing). `summary`: one headline per configuration, in that order."""
    large, small = (200, 60) if quick else (10_000, 1000)
    configurations = run(
        large, trace_memory=False, cold_only=True, shards=(1, BENCH_SHARDS), profile=profile
    )["configurations"]
    configurations.append(run(small, trace_memory=not quick))
    return {
        "configurations": configurations,
        "summary": [c["headline"] for c in configurations],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="books of 200 and 60 jobs instead of 10,000 and 1,000, no memory tracing",
    )
    parser.add_argument(
        "--jobs", type=int, default=None, help="one book of N jobs only (with --shards)"
    )
    parser.add_argument(
        "--cold-only", action="store_true", help="one run (moto is slow at 10,000 jobs)"
    )
    parser.add_argument(
        "--shards", type=int, default=1, help="split the fleet as monitorShards=K does (1–16)"
    )
    parser.add_argument(
        "--profile", type=Path, default=None, help="cProfile the cold runs into this file"
    )
    args = parser.parse_args()
    if not 1 <= args.shards <= 16:
        parser.error("--shards: give 1 to 16")
    if args.jobs is None:
        results = suite(quick=args.quick, profile=args.profile)
        for configuration in results["configurations"]:
            print_results(configuration)
            print()
        for entry in results["summary"]:
            print(
                f"monitor_run_estimated_s: {entry['jobs']} jobs, {entry['shards']} shard(s): "
                f"{entry['estimated_s']:.2f} (slowest shard; goal ≤ {entry['goal_s']:.0f}: "
                f"{'met' if entry['met'] else 'NOT met'}); ActiveJobs read units per shard "
                f"{entry['index_read_units']:.0f}"
            )
        write_results(NAME + ("_quick" if args.quick else ""), results)
        return 0
    results = run(
        args.jobs, trace_memory=not args.quick, cold_only=args.cold_only, shards=args.shards,
        profile=args.profile,
    )  # fmt: skip
    results["summary"] = [results["headline"]]
    print_results(results)
    suffix = "" if args.shards == 1 else f"_{args.shards}shards"
    write_results(f"{NAME}_{args.jobs}{suffix}", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
