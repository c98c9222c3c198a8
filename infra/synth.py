"""Synthesize the stack without Docker and without the CDK CLI (`make synth`, tests, local stack).

Lambda asset: `functions/` plus its runtime dependencies, installed for arm64 / Python 3.12 with
`pip install --platform manylinux2014_aarch64 --only-binary=:all:` (needs PyPI once; cached under
`build/lambda-deps/<hash of functions/requirements.txt>`). `bundle=False` gives a plain
`functions/` directory asset: enough for template tests, not for a deploy.

The bundle is reproducible, so a deploy from another checkout or machine updates no function whose
code did not change (the CDK names an asset by a hash of its files' paths and contents): the
dependencies' console scripts (`bin/`, whose first line names the Python that ran pip) and their
`RECORD` files (which hash those scripts) are left out; nothing at run time reads either. The
agent wheel is built with `SOURCE_DATE_EPOCH`, so its zip entries carry a fixed date rather than
the checkout's file times.

The bundle carries bytecode: Lambda's code folder (`/var/task`) is read-only, so without it every
new environment compiles each module it imports (about a second for a handler) and can keep
none. The `.pyc` files are compiled by a Python 3.12 (the runtime's minor version: another
minor version's bytecode has another magic number and file name, `cpython-3NN.pyc`, and the
runtime would ignore it), found as `TETHER_LAMBDA_PYTHON`, this interpreter, `python3.12` on the
PATH or a pyenv 3.12; without one the bundle ships without bytecode (its own asset, so the two
never mix) and the build says so on stderr: a deploy from any machine works, and is only slower
to start each new environment. They are reproducible: `UNCHECKED_HASH` pyc files hold
a hash of their source instead of its time (and the runtime does not re-read the source to check
it; the folder cannot change), the files are compiled in sorted order by one process, and the
path each records for tracebacks is `/var/task/…`, not the build folder's.

Templates are cached under `build/synth/` by a hash of the `infra/` and `functions/` sources, so a
test session synthesizes (5–15 s of Node) only when the code changed.

    python -m infra.synth [--no-bundle] [--out cdk.out]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
FUNCTIONS = ROOT / "functions"
AGENT = ROOT / "agent"
REQUIREMENTS = FUNCTIONS / "requirements.txt"
PLATFORM = "manylinux2014_aarch64"
PYTHON_VERSION = "3.12"
# Where Lambda unpacks the code: the path compiled into each .pyc for tracebacks.
LAMBDA_TASK_ROOT = "/var/task"
LAMBDA_PYTHON_ENV = "TETHER_LAMBDA_PYTHON"
# Shipped by the Lambda Python runtime; pruned when a dependency (aws-xray-sdk) pulls them in.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "python_dateutil")
_SOURCE_SUFFIXES = {".py", ".json", ".txt", ".yaml", ".toml", ".sh", ".cfg"}
# Part of every bundle's cache key: a build by an older recipe (r2: no bytecode) is not reused.
BUNDLE_RECIPE = "r3"
# The agent wheel's zip timestamps: 1980-01-01, the earliest a zip file can hold.
WHEEL_EPOCH = "315532800"

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")


class BundleError(RuntimeError):
    """The arm64 dependencies could not be installed (usually: no access to PyPI), or no Python
    of the runtime's minor version was found to compile the bytecode."""


@dataclass(frozen=True)
class BundleTarget:
    """What a bundle is built for: the wheels' platform (None: this machine's) and Python
    version, and the interpreter that compiles its bytecode (None: find one of that version)."""

    platform: str | None
    python_version: str
    compiler: str | None = None

    @property
    def key(self) -> str:
        platform = self.platform or "host"
        return f"{platform}-py{self.python_version.replace('.', '')}"


LAMBDA_TARGET = BundleTarget(platform=PLATFORM, python_version=PYTHON_VERSION)


def host_target() -> BundleTarget:
    """This machine and interpreter: a bundle a benchmark can import here."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return BundleTarget(platform=None, python_version=version, compiler=sys.executable)


def _python_version_of(python: str) -> str | None:
    try:
        result = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def find_python(version: str) -> str | None:
    """An interpreter of `version` (\"3.12\"): `$TETHER_LAMBDA_PYTHON`, this one, `pythonX.Y`
    on the PATH, or a pyenv installation; None if there is none."""
    candidates = [os.environ.get(LAMBDA_PYTHON_ENV, ""), sys.executable]
    candidates.append(shutil.which(f"python{version}") or "")
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += [
        str(path) for path in sorted(pyenv_root.glob(f"versions/{version}*/bin/python{version}"))
    ]
    for candidate in candidates:
        if candidate and _python_version_of(candidate) == version:
            return candidate
    return None


def source_hash(*paths: Path) -> str:
    digest = hashlib.sha256()
    for base in paths:
        files = [base] if base.is_file() else sorted(base.rglob("*"))
        for path in files:
            if (
                path.is_file()
                and path.suffix in _SOURCE_SUFFIXES
                and "__pycache__" not in path.parts
                and ".egg-info" not in str(path)
            ):
                digest.update(str(path.relative_to(ROOT)).encode())
                digest.update(b"\0")
                digest.update(path.read_bytes())
                digest.update(b"\0")
    return digest.hexdigest()[:16]


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise BundleError(f"{what} failed (exit {result.returncode}):\n{tail}")


def _staging(target: Path) -> Path:
    """A private build directory next to `target` (parallel test workers)."""
    staging = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    return staging


def _publish(staging: Path, target: Path) -> None:
    """Move a finished build into place; if another process got there first, keep theirs."""
    if target.exists() and not (target / ".complete").exists() and not any(target.glob("*.whl")):
        shutil.rmtree(target, ignore_errors=True)  # left over from an interrupted build
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)


def build_dependencies(
    build: Path = BUILD, python: str = sys.executable, target: BundleTarget = LAMBDA_TARGET
) -> Path:
    """`functions/requirements.txt` installed for `target` (arm64 / cp312) by `python`'s pip
    under `build`, cached by the file's hash; without anything that depends on the building
    machine."""
    installed = build / "lambda-deps" / f"{source_hash(REQUIREMENTS)}-{target.key}-{BUNDLE_RECIPE}"
    if (installed / ".complete").exists():
        return installed
    staging = _staging(installed)
    platform = (
        ["--platform", target.platform, "--implementation", "cp",
         "--python-version", target.python_version]
        if target.platform is not None
        else []
    )  # fmt: skip
    _run(
        [
            python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            *platform, "--only-binary=:all:",
            "--target", str(staging), "-r", str(REQUIREMENTS),
        ],
        f"pip install of the Lambda dependencies for {target.key}",
    )  # fmt: skip
    for entry in staging.iterdir():
        name = entry.name.lower()
        if name.split("-")[0] in RUNTIME_PROVIDED or name in RUNTIME_PROVIDED:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for cache in staging.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    make_reproducible(staging)
    (staging / ".complete").write_text("ok\n")
    _publish(staging, installed)
    return installed


def make_reproducible(installed: Path) -> None:
    """Drop what pip writes per machine: console scripts (`bin/`, their first line is the path of
    the Python that installed them) and each distribution's `RECORD` (it hashes those scripts)."""
    shutil.rmtree(installed / "bin", ignore_errors=True)
    for record in installed.glob("*.dist-info/RECORD"):
        record.unlink()


# Compiles every .py under the tree in sorted order (compileall sorts each directory) in this one
# process; the exit status says whether every file compiled.
_COMPILE_SCRIPT = """
import compileall, py_compile, sys
tree, root = sys.argv[1], sys.argv[2]
ok = compileall.compile_dir(
    tree, quiet=1, force=True, workers=1, stripdir=tree, prependdir=root,
    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
)
sys.exit(0 if ok else 1)
"""


def compile_bytecode(tree: Path, compiler: str) -> None:
    """Write `__pycache__/*.cpython-3NN.pyc` next to every module under `tree`, reproducibly:
    no timestamps (the source's hash instead), sorted order, paths as `/var/task/…`."""
    _run(
        [compiler, "-I", "-c", _COMPILE_SCRIPT, str(tree), LAMBDA_TASK_ROOT],
        f"compiling the bundle's bytecode with {compiler}",
    )


def _compiler_for(target: BundleTarget) -> str | None:
    """The interpreter that compiles the bundle's bytecode, or None (said on stderr): the
    bundle then ships without it."""
    if target.compiler is not None:
        return target.compiler
    found = find_python(target.python_version)
    if found is None:
        print(
            f"note: no Python {target.python_version} found (the Lambda runtime's version; "
            f"another version's bytecode would be ignored): the bundle ships without bytecode, "
            f"so each new Lambda environment compiles what it imports (about 0.3 s more per cold "
            f"start). Install one, or set {LAMBDA_PYTHON_ENV} to its path, and synthesize again",
            file=sys.stderr,
        )
    return found


def _copy_functions(dest: Path) -> None:
    shutil.copytree(
        FUNCTIONS,
        dest / "functions",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "requirements.txt"),
    )


def build_lambda_asset(
    *,
    bundle: bool,
    build: Path = BUILD,
    python: str = sys.executable,
    target: BundleTarget = LAMBDA_TARGET,
) -> Path:
    """A directory with `functions/` (and, bundled, its dependencies for `target` and the
    bytecode of both) and nothing else."""
    compiler = _compiler_for(target) if bundle else None
    kind = f"bundled-{target.key}-{BUNDLE_RECIPE}" if bundle else "source"
    if bundle and compiler is None:
        kind += "-no-bytecode"
    asset = build / "lambda-asset" / f"{kind}-{source_hash(FUNCTIONS)}"
    if (asset / ".complete").exists():
        return asset
    staging = _staging(asset)
    staging.mkdir(parents=True)
    if bundle:
        deps = build_dependencies(build, python, target)
        shutil.copytree(
            deps, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".complete")
        )
    _copy_functions(staging)
    if compiler is not None:
        compile_bytecode(staging, compiler)
    (staging / ".complete").write_text("ok\n")
    _publish(staging, asset)
    return asset


def build_agent_wheel(*, bundle: bool) -> Path:
    """A directory holding the agent wheel (uploaded to the artifacts bucket at deploy).
    Unbundled: a placeholder directory, so template tests need no build tools."""
    if not bundle:
        target = BUILD / "agent-wheel" / "placeholder"
        target.mkdir(parents=True, exist_ok=True)
        (target / "README.txt").write_text("placeholder: `make synth` builds the agent wheel\n")
        return target
    key = source_hash(AGENT / "pyproject.toml", AGENT / "tether_agent")
    target = BUILD / "agent-wheel" / f"{key}-{BUNDLE_RECIPE}"
    if any(target.glob("*.whl")):
        return target
    staging = _staging(target)
    wheel(AGENT, staging)
    _publish(staging, target)
    return target


def wheel(source: Path, out: Path) -> None:
    """Build the distribution at `source` into `out` with fixed zip timestamps."""
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
         "--disable-pip-version-check", "--wheel-dir", str(out), str(source)],
        "building the agent wheel",
        env={**os.environ, "SOURCE_DATE_EPOCH": WHEEL_EPOCH},
    )  # fmt: skip


def build_app(*, bundle: bool, outdir: str | None = None, nag: bool = True) -> tuple[Any, Any]:
    """(App, TetherStack) with cdk-nag's AwsSolutions checks applied."""
    from aws_cdk import App, Validations
    from cdk_nag import AwsSolutionsChecks

    from infra import names
    from infra.stack import TetherStack

    lambda_asset = build_lambda_asset(bundle=bundle)
    wheel_dir = build_agent_wheel(bundle=bundle)
    # `tether deploy`'s way to set a context (TETHER_MONITOR_SHARDS, …)
    given = {key: os.environ.get(env) for env, key in names.SYNTH_CONTEXT_ENV.items()}
    context = {key: value for key, value in given.items() if value} or None
    app = App(outdir=outdir, analytics_reporting=False, context=context)
    stack = TetherStack(app, lambda_asset_dir=lambda_asset, agent_wheel_dir=wheel_dir)
    if nag:
        Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app, stack


def _template_cache(bundle: bool) -> Path:
    paths = [ROOT / "infra", FUNCTIONS] + ([AGENT / "tether_agent"] if bundle else [])
    kind = "bundled" if bundle else "source"
    from infra.names import SYNTH_CONTEXT_ENV

    # the contexts the template depends on
    settings = hashlib.sha256(
        json.dumps({env: os.environ.get(env) or "" for env in sorted(SYNTH_CONTEXT_ENV)}).encode()
    ).hexdigest()[:8]
    return BUILD / "synth" / f"template-{kind}-{settings}-{source_hash(*paths)}.json"


def synth_template(*, bundle: bool) -> dict[str, Any]:
    """The CloudFormation template (JSON), synthesized once per source state and cached."""
    cache = _template_cache(bundle)
    if cache.exists():
        loaded: dict[str, Any] = json.loads(cache.read_text())
        return loaded
    from aws_cdk.assertions import Template

    _, stack = build_app(bundle=bundle, nag=False)
    template: dict[str, Any] = dict(Template.from_stack(stack).to_json())
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(template, indent=1, sort_keys=True))
    tmp.rename(cache)
    return template


def nag_violations(outdir: str | Path) -> list[str]:
    """Unacknowledged cdk-nag findings from the assembly's validation report (cdk-nag v3 runs as
    a CDK validation plugin: a finding fails `app.synth()` and lands in this report)."""
    report = Path(outdir) / "validation-report.json"
    if not report.exists():
        return []
    data = json.loads(report.read_text())
    return [
        f"{violation['severity']} {violation['ruleName']} at {construct['constructPath']}"
        for plugin in data.get("pluginReports", [])
        for violation in plugin.get("violations", [])
        for construct in violation.get("violatingConstructs", [])
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.synth", description=__doc__)
    parser.add_argument("--out", default="cdk.out", help="cloud assembly directory")
    parser.add_argument(
        "--no-bundle",
        action="store_true",
        help="plain functions/ asset without dependencies (template checks only, not deployable)",
    )
    args = parser.parse_args(argv)
    try:
        app, stack = build_app(bundle=not args.no_bundle, outdir=args.out)
    except BundleError as exc:
        print(
            f"synth: {exc}\n(the dependencies need PyPI once; the bundle is cached under build/)",
            file=sys.stderr,
        )
        return 2
    report = Path(args.out) / "validation-report.json"
    report.unlink(missing_ok=True)
    try:
        app.synth()
    except RuntimeError:
        findings = nag_violations(args.out)
        if not findings:
            raise
        print(f"cdk-nag: {len(findings)} unacknowledged finding(s):", file=sys.stderr)
        for finding in findings:
            print(f"  {finding}", file=sys.stderr)
        return 1
    print(f"synthesized {stack.stack_name} → {Path(args.out) / stack.template_file}")
    print("cdk-nag AwsSolutions: no unacknowledged findings")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
