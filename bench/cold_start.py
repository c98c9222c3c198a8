"""Cold-start benchmark: how long each Lambda handler's module takes to import in a new process,
from the built bundle, with the bundle's bytecode and without it.

    python bench/cold_start.py [--quick] [--runs N]

Lambda's code folder is read-only: a bundle without `.pyc` files is compiled module by module in
every new environment, and nothing it compiles is kept. `infra/synth.py` compiles the bytecode into
the bundle; this measures what that saves. The deployed bundle is arm64 / Python 3.12; this machine
cannot import its native modules, so the benchmark builds the same bundle (same requirements, same
recipe, bytecode included) for this machine's interpreter and platform, and a copy of it without
any `__pycache__`. Each import runs in a fresh interpreter (`-S -I -B`, bytecode writing off, as on
the read-only folder) with the environment the stack gives its function (the untraced heartbeat and
monitor with the tracer off, so that it patches nothing: `names.UNTRACED_HANDLERS`) and a path that
holds the bundle and the runtime's own packages (boto3, botocore, s3transfer, jmespath, dateutil:
the Lambda runtime provides them with their bytecode; here they are this interpreter's installed
copies). Default 7 runs per cell, `--quick` 3, taken round by round (every handler, with and
without bytecode, in each); the table gives medians of the wall time and, in brackets, of the CPU
time (on a loaded machine the wall time is mostly waiting for a core), the ratio is without / with
bytecode. The goal: the heartbeat (the function a flood of new environments hits) imports in at
most 0.5 s with bytecode. Writes `bench/results/cold_start.json`. Not a test: numbers depend on the
machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lib.report import Quartiles, quartiles, write_results  # noqa: E402
from infra import names  # noqa: E402
from infra.synth import BUILD, build_lambda_asset, host_target  # noqa: E402

# Each function's handler setting (its module, then the function).
HANDLER_SETTINGS = {
    "heartbeat": names.HEARTBEAT_HANDLER,
    "jobs": names.JOBS_HANDLER,
    "logs": names.LOGS_HANDLER,
    "monitor": names.MONITOR_HANDLER,
    "lifecycle": names.LIFECYCLE_HANDLER,
}
HANDLERS = {name: handler.rsplit(".", 1)[0] for name, handler in HANDLER_SETTINGS.items()}
HEARTBEAT_GOAL_S = 0.5
RUNTIME_PACKAGES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil")
# What the Lambda runtime sets that the handlers' modules read at import (and LAMBDA_TASK_ROOT,
# set per bundle: without it the X-Ray SDK believes it is outside Lambda and builds a botocore
# client for centralized sampling at import, 0.2-0.4 s that Lambda never spends).
LAMBDA_ENV = {
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_LAMBDA_FUNCTION_NAME": "tether-cold-start-bench",
    "POWERTOOLS_SERVICE_NAME": "tether",
    "POWERTOOLS_METRICS_NAMESPACE": "Tether",
}
# What the stack adds to an untraced function's environment: its tracer patches nothing at import.
UNTRACED_ENV = names.UNTRACED_ENV


def function_env(name: str) -> dict[str, str]:
    """The environment the stack gives handler `name`, as far as imports read it."""
    return {
        **LAMBDA_ENV,
        **(UNTRACED_ENV if HANDLER_SETTINGS[name] in names.UNTRACED_HANDLERS else {}),
    }


# Runs in the fresh interpreter: the handler module's import time (wall and CPU) and how many
# modules it loaded.
_PROBE = """
import importlib, sys, time
sys.path[:0] = sys.argv[2:]
before = len(sys.modules)
started, cpu_started = time.perf_counter(), time.process_time()
importlib.import_module(sys.argv[1])
print(time.perf_counter() - started, time.process_time() - cpu_started, len(sys.modules) - before)
"""


def runtime_packages(dest: Path) -> Path:
    """A folder with links to this interpreter's copies of what the Lambda runtime provides."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in RUNTIME_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(f"cold_start: {name} is not installed here")
        link = dest / name
        if not link.exists():
            link.symlink_to(next(iter(spec.submodule_search_locations)))
    return dest


def without_bytecode(bundle: Path, dest: Path) -> Path:
    """A copy of `bundle` with no `__pycache__` (what a bundle without bytecode ships)."""
    if not (dest / ".complete").exists():
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(bundle, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def import_s(module: str, path: list[Path], lambda_env: dict[str, str]) -> tuple[float, float, int]:
    """Seconds to import `module` in a fresh interpreter (wall, CPU) with `lambda_env` (its
    function's: `function_env`), and the modules it loaded."""
    env = {"PATH": os.environ.get("PATH", ""), "LAMBDA_TASK_ROOT": str(path[0]), **lambda_env}
    result = subprocess.run(
        [sys.executable, "-S", "-I", "-B", "-c", _PROBE, module, *map(str, path)],
        capture_output=True, text=True, env=env, check=False, cwd="/",
    )  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"cold_start: importing {module} failed:\n{result.stderr[-2000:]}")
    seconds, cpu_seconds, modules = result.stdout.split()
    return float(seconds), float(cpu_seconds), int(modules)


def _cell(wall: Quartiles, cpu: Quartiles) -> str:
    return f"{wall.median:.3f} ±{(wall.q3 - wall.q1) / 2:.3f} ({cpu.median:.3f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 runs per cell")
    parser.add_argument("--runs", type=int, default=None, help="runs per cell (default 7)")
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 7)
    compiled = build_lambda_asset(bundle=True, target=host_target())
    source_only = without_bytecode(compiled, BUILD / "cold-start" / f"{compiled.name}-source")
    runtime = runtime_packages(BUILD / "cold-start" / "runtime")
    variants = {"no_bytecode": source_only, "bytecode": compiled}
    load_before = os.getloadavg()
    cells: dict[str, dict[str, Any]] = {}
    # Round by round, each handler then each variant in turn: a machine whose speed drifts
    # over the minute the bench takes (this VM's does, by ±25 %) slows every cell alike, not
    # whichever handler came first.
    for _ in range(runs):
        for name, module in HANDLERS.items():
            for variant, bundle in variants.items():
                seconds, cpu_seconds, modules = import_s(
                    module, [bundle, runtime], function_env(name)
                )
                cell = cells.setdefault(name, {}).setdefault(
                    variant, {"import_s": [], "cpu_s": [], "modules": modules}
                )
                cell["import_s"].append(seconds)
                cell["cpu_s"].append(cpu_seconds)
    load_after = os.getloadavg()
    print(f"python {sys.version.split()[0]} on {os.cpu_count()} cores, {runs} runs per cell, "
          f"load_1min {load_before[0]:.2f} before, {load_after[0]:.2f} after")  # fmt: skip
    print("median seconds ± half the IQR, wall (CPU in brackets); ratio: without / with bytecode")
    print(f"{'handler':<10} {'modules':>7} {'no bytecode s':>22} {'bytecode s':>22} {'ratio':>6}")
    summary: dict[str, Any] = {}
    for name, by_variant in cells.items():
        cold = quartiles(by_variant["no_bytecode"]["import_s"])
        warm = quartiles(by_variant["bytecode"]["import_s"])
        cold_cpu = quartiles(by_variant["no_bytecode"]["cpu_s"])
        warm_cpu = quartiles(by_variant["bytecode"]["cpu_s"])
        ratio = cold.median / warm.median
        summary[name] = {
            "module": HANDLERS[name],
            "modules": by_variant["bytecode"]["modules"],
            "no_bytecode_s": cold,
            "bytecode_s": warm,
            "no_bytecode_cpu_s": cold_cpu,
            "bytecode_cpu_s": warm_cpu,
            "ratio": ratio,
        }
        print(f"{name:<10} {by_variant['bytecode']['modules']:>7} {_cell(cold, cold_cpu):>22} "
              f"{_cell(warm, warm_cpu):>22} {ratio:>6.2f}")  # fmt: skip
    heartbeat_s = summary["heartbeat"]["bytecode_s"].median
    heartbeat_cpu_s = summary["heartbeat"]["bytecode_cpu_s"].median
    verdict = "meets" if heartbeat_s <= HEARTBEAT_GOAL_S else "misses"
    print(f"heartbeat_import_s: {heartbeat_s:.3f} (CPU {heartbeat_cpu_s:.3f}) {verdict} the goal "
          f"of {HEARTBEAT_GOAL_S} s")  # fmt: skip
    path = write_results(
        "cold_start" + ("_quick" if args.quick else ""),
        {
            "python": sys.version.split()[0],
            "runs": runs,
            "load_1min": {"before": load_before[0], "after": load_after[0]},
            "goal_heartbeat_s": HEARTBEAT_GOAL_S,
            "handlers": summary,
        },
    )
    print(f"results: {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
