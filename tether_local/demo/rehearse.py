"""`tether rehearse`: a user's own job on the local stack, with its host killed at chosen steps,
judged against an uninterrupted run of the same command (docs/rehearse.md).

1. The reference: the job's `run` command, run once directly (no stack) in the stand-in of the
   job's `image`, with the job's `env` (and the rehearsal's overrides), the hooks on PYTHONPATH
   and the job's paths laid out as a local host lays out its disk and seen at the same absolute
   paths (`tether_local.hosts.disk_view`), so what a script writes about its paths matches. A job
   with `code.dir` runs in that directory as `tether submit` packs it (the caller's
   `CodeShipper`), extracted by the agent's own code: what .gitignore or .tetherignore leave out
   is missing here as it is on a host, so a script that needs it fails now, not after the kills.
   Its highest marked checkpoint is the uninterrupted result; its step is where the run ends.
2. The rehearsal: the same spec submitted through the local stack's real API, its code the same
   archive uploaded as `tether submit` uploads it (the `CodeShipper`), with the demo's
   second-scale timers (`DEMO_POLICY`: a 1 s heartbeat) and room for every kill
   (`max_replacements_dead`). Each kill waits until the live generation reports a step at or
   past the one asked for, then destroys its host (disk wiped); the next kill waits for the
   replacement. A kill lands on the first report at or past its step: reports come about once a
   second, so the step the host was really at is known as a lower bound.
3. The verdict: the job's result checkpoint (the highest verified one, as the demo's invariant 8
   picks it) compared with the reference's, file by file (sha256 of every file the manifest
   lists against the same file of the reference; a `torch.save` file by the values it holds,
   `torch_archive`); identical only when both end at the same step
   with the same files and bytes. The steps lost per kill come from the `resumed` facts
   (`functions.domain.recovery`: the last step known before the kill minus the step resumed at).
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import random
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict
from tether_agent.checkpoints import MANIFEST_NAME, Manifest, sibling_marker_name
from tether_agent.code_archive import extract_safely
from tether_agent.job_code import CodeUnavailable
from tether_agent.progress import (
    marked_checkpoints,
    misplaced_fix,
    never_uploaded_checkpoints,
    unmarked_fix,
)
from tether_agent.training_env import training_env as agent_training_env

from functions.adapters.store import JobView
from functions.domain.crashes import last_failure
from functions.domain.job import JobState, is_terminal
from functions.domain.jobspec import JobSpec, SpecError, parse_job
from functions.domain.secrets import parameter_name
from tether_local.demo import invariants
from tether_local.demo.evidence import checkpoint_facts, live_instances, s3_root
from tether_local.demo.invariants import Incident
from tether_local.demo.job import DEMO_POLICY, MONITOR_INTERVAL_S, TrainArgs
from tether_local.demo.run import DemoError, DemoRun, MonitorClock, Scenario
from tether_local.demo.submit import CodeShipper, PackedCode
from tether_local.demo.timeline import Timeline, quiet
from tether_local.demo.torch_archive import content_digest
from tether_local.hosts import disk_view
from tether_local.hosts.images import stand_in
from tether_local.hosts.local_hosts import DEFAULT_WORK_DIR, SYSTEM_PATH
from tether_local.stack import LocalStack

MAX_KILLS = 20
# A kill lands on the first report at or past its step (one a second, the demo's heartbeat),
# and the host is destroyed at once: a kill asked for fewer than this many seconds of steps
# before the end may land after the training ended, and test nothing.
LANDING_S = 1.5
# A wait for a kill's step, or for the end, allows this plus a few times the reference's length.
WAIT_BASE_S = 60.0
REFERENCE_TIMEOUT_S = 600.0


class RehearseInputError(ValueError):
    """The rehearsal cannot start as asked; the message names the field (exit 2)."""


class KillReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    asked_step: int
    generation: int
    killed_at_step: int  # the highest step known when the host died: a lower bound
    resumed_step: int | None  # the step the next generation restored (None: it never trained)
    incident: Incident


class RehearseReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job: str
    job_id: str
    final_state: str
    reference_step: int
    compared_step: int | None
    identical: bool
    differences: list[str]
    not_compared: list[str]  # "path: why" for each reference file left out (`NOT_COMPARED`)
    kills: list[KillReport]
    reference_s: float
    wall_s: float


# Files that record where the run ran, not what it learned: they differ between any two runs
# in different directories, so they are named in the report instead of compared.
NOT_COMPARED = {
    "training_args.bin": "Hugging Face's pickled TrainingArguments, with the run's own output_dir",
}


def not_compared(path: str) -> str | None:
    """Why the checkpoint file `path` is not compared, or None when it is."""
    return NOT_COMPARED.get(PurePosixPath(path).name)


def last_landable_step(last_step: int, seconds_per_step: float | None) -> int:
    """The last step a kill can be asked for and still land while the job trains: `LANDING_S`
    of steps (at the uninterrupted run's pace) before its last step; one before it when the
    pace is unknown."""
    if not seconds_per_step or seconds_per_step <= 0:
        return last_step - 1
    return last_step - max(1, math.ceil(LANDING_S / seconds_per_step))


def kill_steps(
    *,
    at: Sequence[int] | None,
    count: int | None,
    seed: int,
    last_step: int,
    seconds_per_step: float | None = None,
) -> list[int]:
    """The steps to kill at: those asked for (each ≥ 1, increasing, landable) or `count`
    distinct random landable ones, chosen with `seed`. Landable: at or before
    `last_landable_step`, so that the kill lands while the job still trains."""
    landable = last_landable_step(last_step, seconds_per_step)
    pace = (
        f"; at the uninterrupted run's {seconds_per_step * 1000:.3g} ms a step a kill needs "
        f"about {LANDING_S:g} s of steps after it to land before the end, so the last step a "
        f"kill can be asked for is {landable}"
        if seconds_per_step and landable < last_step - 1
        else ""
    )
    slower = (
        " (make the run longer or slower for the rehearsal, e.g. a per-step sleep read from an "
        "`env` variable you set with --env)"
    )
    if at is not None:
        for step in at:
            if step < 1:
                raise RehearseInputError(f"--kill-at-step: {step} is not a step (steps start at 1)")
            if step >= last_step:
                raise RehearseInputError(
                    f"--kill-at-step: step {step} is past the end of the run "
                    f"(the uninterrupted run ends at step {last_step})"
                )
        if list(at) != sorted(set(at)):
            raise RehearseInputError("--kill-at-step: the steps must increase, each once")
        if len(at) > MAX_KILLS:
            raise RehearseInputError(f"--kill-at-step: at most {MAX_KILLS} kills")
        for step in at:
            if step > landable:
                raise RehearseInputError(
                    f"--kill-at-step: a kill at step {step} would land after the training "
                    f"ended and test nothing (the uninterrupted run ends at step {last_step}"
                    f"{pace}){slower}"
                )
        return list(at)
    wanted = 1 if count is None else count
    if wanted < 1 or wanted > MAX_KILLS:
        raise RehearseInputError(f"--kills: {wanted} is not between 1 and {MAX_KILLS}")
    if wanted > landable:
        raise RehearseInputError(
            f"--kills: {wanted} kills do not fit before the end of the run "
            f"(the uninterrupted run ends at step {last_step}{pace})"
            + (slower if landable < last_step - 1 else "")
        )
    return sorted(random.Random(seed).sample(range(1, landable + 1), wanted))


# the reference


def training_env(spec: JobSpec, overrides: Mapping[str, str]) -> dict[str, str]:
    """The job's own `env` with the rehearsal's overrides on top."""
    return {**spec.env, **overrides}


def rehearsal_secrets(spec: JobSpec) -> dict[str, str]:
    """A value for each secret the spec names: this machine's environment variable of that name
    when set, else a placeholder (a script that needs the real token only for downloads runs
    its small variant without it). They stay on this machine: the reference run's environment
    and the local stack's own parameter store."""
    return {name: os.environ.get(name) or f"rehearsal-placeholder-{name}" for name in spec.secrets}


def _secrets_said(spec: JobSpec) -> str:
    said = [
        f"{n} ({'from this environment' if n in os.environ else 'a placeholder'})"
        for n in spec.secrets
    ]
    return "secrets " + ", ".join(said)


def reference_run(
    spec: JobSpec,
    env: Mapping[str, str],
    into: Path,
    timeout_s: float,
    code: PackedCode | None = None,
) -> tuple[int, dict[str, str], float | None]:
    """Run the job's command uninterrupted in its image's stand-in (in `code`, extracted, when
    the job ships one); its final marked checkpoint (step, relative path → sha256) and its pace
    in seconds a step, between the first and the last marker written (None with one marked
    checkpoint). DemoError if it fails or marks no checkpoint."""
    image = stand_in(spec.image)
    marker = spec.checkpoint.marker
    # Laid out as a local host lays out its disk, and seen at the same absolute paths as every
    # host sees its own (`disk_view`): what the script writes about its paths is then the same.
    disk = into / "disk"
    seen = disk_view.seen_root(disk)
    checkpoints_seen = _rooted(seen, spec.checkpoint.dir)
    checkpoints = disk_view.on_disk(checkpoints_seen, disk)
    checkpoints.mkdir(parents=True)
    work_seen = _rooted(seen, DEFAULT_WORK_DIR)
    disk_view.on_disk(work_seen, disk).mkdir(parents=True)
    cwd_seen = seen
    if code is not None:
        cwd_seen = work_seen / "code"  # where the agent puts it: $TETHER_WORK_DIR/code
        try:
            extract_safely(code.path, disk_view.on_disk(cwd_seen, disk))
        except CodeUnavailable as exc:
            raise DemoError(str(exc)) from None
    outputs_seen = _rooted(seen, spec.outputs.dir) if spec.outputs is not None else None
    if outputs_seen is not None:
        disk_view.on_disk(outputs_seen, disk).mkdir(parents=True, exist_ok=True)
    progress_seen = (
        _rooted(seen, spec.checkpoint.progress_file)
        if spec.checkpoint.progress_file
        else work_seen / "progress.json"
    )
    base = {"PATH": f"{image.bin}:{SYSTEM_PATH}", "HOME": str(seen), "LANG": "C.UTF-8"}
    full_env = agent_training_env(  # the agent's own function: the same variables as on a host
        {**base, "PYTHONUNBUFFERED": "1", **env},
        checkpoint_dir=checkpoints_seen,
        marker=marker,
        progress_file=progress_seen,
        code_dir=cwd_seen if code is not None else None,
        outputs_dir=outputs_seen,
    )
    try:
        done = subprocess.run(
            # as the agent runs it (`bash -c "$TETHER_RUN"`)
            disk_view.command_seeing(["bash", "-c", spec.run], disk, cwd=cwd_seen),
            env=full_env,
            cwd=disk_view.on_disk(cwd_seen, disk),
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout_s,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        raise DemoError(f"the uninterrupted run took longer than {timeout_s:g} s") from None
    except OSError as exc:
        raise DemoError(f"the uninterrupted run could not start: {exc}") from None
    if done.returncode != 0:
        raise DemoError(
            f"the uninterrupted run exited {done.returncode}: "
            f"{done.stdout[-500:]}{done.stderr[-500:]}".rstrip()
        )
    marked = marked_checkpoints(checkpoints, marker)  # folders and single files, as the agent
    if not marked:
        never = never_uploaded_checkpoints(checkpoints, marker, limit=4, settled_s=0)  # it exited
        found = ""
        if never.unmarked:
            found += (
                f"; it saved {', '.join(never.unmarked)} without marking them: "
                f"{unmarked_fix(Path(spec.checkpoint.dir), marker)}"
            )
        if never.misplaced:
            found += (
                f"; it saved {', '.join(never.misplaced)} below $TETHER_CHECKPOINT_DIR, where "
                f"nothing is uploaded: {misplaced_fix(Path(spec.checkpoint.dir), marker)}"
            )
        raise DemoError(
            f"the uninterrupted run marked no checkpoint under $TETHER_CHECKPOINT_DIR "
            f"(spec field checkpoint.dir: {spec.checkpoint.dir}; marker {marker!r}), so there "
            f"is nothing to compare{found}"
        )
    step, saved = marked[-1]
    if saved.is_file():  # the manifest lists a single-file checkpoint under its name
        files = {saved.name: file_digest(saved)}
    else:
        files = {
            str(p.relative_to(saved)): file_digest(p)
            for p in sorted(saved.rglob("*"))
            if p.is_file() and p.name != marker
        }
    markers = [
        (s, p / marker if p.is_dir() else p.with_name(sibling_marker_name(p.name, marker)))
        for s, p in marked
    ]
    return step, files, _seconds_per_step(markers)


def _rooted(root: Path, path: str) -> Path:
    """A job's absolute path below `root`, as the agent roots it on a local host."""
    return root / path.lstrip("/")


def _seconds_per_step(markers: Sequence[tuple[int, Path]]) -> float | None:
    """The training pace from when each marker was written: the time from the first marked
    step to the last over the steps between (the start-up before the first is left out)."""
    timed = sorted((step, path.stat().st_mtime) for step, path in markers)
    (first_step, first_at), (last_step, last_at) = timed[0], timed[-1]
    if last_step <= first_step:
        return None
    return max(last_at - first_at, 0.0) / (last_step - first_step)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


TORCH_DIGEST = "torch-values:"


def file_digest(path: Path) -> str:
    """What a checkpoint file is compared by: the sha256 of its bytes, or, for a `torch.save`
    file, the digest of the values it holds (`torch_archive.content_digest`: pickle writes equal
    values as different bytes after a resume, by which strings it had already written)."""
    values = content_digest(path)
    return TORCH_DIGEST + values if values is not None else _sha256(path.read_bytes())


# the rehearsal


def rehearsal_spec(spec: JobSpec, env: Mapping[str, str], kills: int) -> dict[str, Any]:
    """The spec the stack runs: the job's own, with the overrides in `env`, the demo's timers,
    and a replacement for every kill."""
    body: dict[str, Any] = spec.model_dump(mode="json", exclude_none=True)
    body["env"] = dict(env)
    policy = {**body.get("policy", {}), **DEMO_POLICY}
    policy["max_replacements_dead"] = max(int(policy.get("max_replacements_dead", 0)), kills + 1)
    body["policy"] = policy
    return body


class Plan(BaseModel):
    """What the reference run found and the kills it allows, before any stack starts."""

    model_config = ConfigDict(extra="forbid")

    env: dict[str, str]
    last_step: int
    reference: dict[str, str]  # relative path → sha256 of the final checkpoint's files
    reference_s: float
    seconds_per_step: float | None = None  # the uninterrupted run's pace, between its markers
    steps: list[int]


def prepare(
    spec: JobSpec,
    *,
    env_overrides: Mapping[str, str] | None = None,
    kill_at: Sequence[int] | None = None,
    kills: int | None = None,
    seed: int = 0,
    code: PackedCode | None = None,
    timeline: Timeline = quiet,
) -> Plan:
    """The uninterrupted reference run (in `code`, the job's packed `code.dir`, when it has one:
    `CodeShipper.pack`) and the kills. RehearseInputError for a kill that does not fit the run,
    DemoError when the reference run fails."""
    env = training_env(spec, env_overrides or {})
    started = time.time()
    timeline(0.0, "rehearse", f"uninterrupted reference run: {spec.run}")
    with tempfile.TemporaryDirectory(prefix="tether-rehearse-") as tmp:
        with_secrets = {**env, **rehearsal_secrets(spec)}  # as the agent adds them
        last_step, reference, pace = reference_run(
            spec, with_secrets, Path(tmp), REFERENCE_TIMEOUT_S, code
        )
    took = time.time() - started
    timeline(took, "rehearse", f"the uninterrupted run ended at step {last_step} in {took:.1f} s")
    steps = kill_steps(
        at=kill_at, count=kills, seed=seed, last_step=last_step, seconds_per_step=pace
    )
    return Plan(
        env=env,
        last_step=last_step,
        reference=reference,
        reference_s=round(took, 1),
        seconds_per_step=pace,
        steps=steps,
    )


def rehearse(
    spec: JobSpec,
    plan: Plan,
    *,
    stack: LocalStack,
    shipper: CodeShipper,
    code: PackedCode | None = None,
    timeline: Timeline = quiet,
) -> RehearseReport:
    """Rehearse `spec` on `stack` (made with `demo_stack_config()`) with `plan`'s kills, its code
    `code` (the archive the reference ran in, submitted by `shipper`). DemoError when the
    rehearsal cannot be driven to its end."""
    steps = plan.steps
    wait_s = WAIT_BASE_S + 4 * plan.reference_s
    scenario = Scenario(
        name="rehearse",
        description=f"{spec.name}: host killed at steps {', '.join(map(str, steps))}",
        train=TrainArgs(steps=plan.last_step),  # not run: the job's own command is
        drive=lambda _run: None,
        timeout_s=wait_s,
    )
    run = DemoRun(stack=stack, scenario=scenario, timeline=timeline)
    run.clock = MonitorClock(stack, MONITOR_INTERVAL_S)
    asked: list[tuple[int, int]] = []  # (step asked, generation killed)
    try:
        rehearsed = parse_job(rehearsal_spec(spec, plan.env, len(steps)))
    except SpecError as exc:
        raise DemoError(f"the rehearsal's spec is invalid: {exc}") from None
    ssm = stack.aws.client("ssm")
    for name, value in rehearsal_secrets(spec).items():  # the local stack's store, not yours
        ssm.put_parameter(
            Name=parameter_name(name), Value=value, Type="SecureString", Overwrite=True
        )
    if spec.secrets:
        run.say(_secrets_said(spec))
    try:
        run.job_id, shipped = shipper.submit(stack.api_url, rehearsed, code)
        run.say(f"submitted job {run.job_id}: {spec.run}; {shipped}; kills at steps {steps}")
        run.start_monitor()
        after = 0
        for step in steps:
            g = _wait_for_step(run, step, after_generation=after, timeout_s=wait_s)
            assert stack.hosts is not None
            run.fault("dead", g, functools.partial(stack.hosts.destroy, run.instance(g)))
            asked.append((step, g.generation))
            after = g.generation
        run.wait("the job to end", lambda v: is_terminal(v.job.state), timeout_s=wait_s)
        run.wait("every instance destroyed", lambda _v: not live_instances(stack, run.job_id), 30)
    finally:
        run.clock.close()
    return _report(spec, run, run.poll(), asked, plan)


def _wait_for_step(run: DemoRun, step: int, *, after_generation: int, timeout_s: float) -> Any:
    def reached(view: JobView) -> Any:
        if is_terminal(view.job.state):
            state = view.job.state.value
            ended = f"the job ended {state} before the kill at step {step} could land"
            if view.job.state == JobState.FINISHED:
                raise DemoError(
                    f"{ended}: its steps come faster than the 1 s heartbeat (see docs/"
                    "rehearse.md, 'Kills land on a report')"
                )
            raise DemoError(f"{ended}: {job_failure(view)}")
        g = run.generation(view)
        hb = g.heartbeat if g is not None else None
        if g is None or g.generation <= after_generation or hb is None:
            return None
        return g if hb.phase == "training" and (hb.step or 0) >= step else None

    return run.wait(f"a report at step {step}", reached, timeout_s=timeout_s)


def job_failure(view: JobView) -> str:
    """Why the job ended as it did: its state's reason, then the last failed generation's own
    words (`exit_output`: the end of its training output), line breaks kept."""
    said = view.job.state_reason or view.job.stop_reason or "no reason recorded"
    failure = last_failure(view.generations)
    if failure is None:
        return said
    code = failure["exit_code"]
    head = f"exited with code {code}" if code is not None else "could not start training"
    output = str(failure["output"]).rstrip("\n")
    return f"{said}\ngeneration {failure['generation']} {head}; its last output:\n{output}"


def _report(
    spec: JobSpec,
    run: DemoRun,
    view: JobView,
    asked: list[tuple[int, int]],
    plan: Plan,
) -> RehearseReport:
    last_step, marker = plan.last_step, spec.checkpoint.marker
    run.checkpoints.update({c.prefix: c for c in checkpoint_facts(run.stack, run.job_id)})
    best = invariants.result_checkpoint(list(run.checkpoints.values()), view.generations)
    differences: list[str] = []
    if view.job.state != JobState.FINISHED:
        differences.append(
            f"the job ended {view.job.state.value}, not FINISHED: {job_failure(view)}"
        )
    if best is None:
        differences.append("the rehearsal left no verified checkpoint")
    else:
        if best.step != last_step:
            differences.append(
                f"the rehearsal's last checkpoint is at step {best.step}, "
                f"the uninterrupted run's at step {last_step}"
            )
        differences += _compare_files(s3_root(run.stack) / best.prefix, plan.reference, marker)
    for (step, _), fault in zip(asked, run.faults, strict=False):
        if fault.step_at_fault >= last_step:
            differences.append(
                f"the kill asked for at step {step} landed at step {fault.step_at_fault}, the "
                f"run's last: it interrupted nothing (ask for an earlier step, or slow the run)"
            )
    verdicts = [(e.at, e.kind) for e in view.events if e.kind in {"dead", "hung", "crashed"}]
    found = invariants.incidents(run.faults, verdicts, run.progress)
    kills = [
        KillReport(
            asked_step=step,
            generation=fault.generation,
            killed_at_step=fault.step_at_fault,
            resumed_step=(
                after.restored_step or 0
                if (after := run.progress.get(fault.generation + 1)) is not None
                and after.first_step_at is not None
                else None
            ),
            incident=incident,
        )
        for (step, _), fault, incident in zip(asked, run.faults, found, strict=True)
    ]
    identical = not differences
    run.say(
        f"job {view.job.state.value}; final checkpoint "
        + ("identical to the uninterrupted run" if identical else "DIFFERS from it")
    )
    return RehearseReport(
        job=spec.name,
        job_id=run.job_id,
        final_state=view.job.state.value,
        reference_step=last_step,
        compared_step=best.step if best is not None else None,
        identical=identical,
        differences=differences,
        not_compared=[f"{p}: {why}" for p in sorted(plan.reference) if (why := not_compared(p))],
        kills=kills,
        reference_s=plan.reference_s,
        wall_s=round(time.time() - run.started_at, 1),
    )


def _compare_files(directory: Path, reference: Mapping[str, str], marker: str) -> list[str]:
    """Every file the uploaded checkpoint's manifest lists, by sha256, against the reference
    (but those in `NOT_COMPARED`)."""
    manifest = Manifest.model_validate_json((directory / MANIFEST_NAME).read_bytes())
    ours = {
        e.path: file_digest(directory / e.path)
        for e in manifest.files
        if PurePosixPath(e.path).name != marker and not_compared(e.path) is None
    }
    reference = {p: h for p, h in reference.items() if not_compared(p) is None}
    found = [f"{p}: only in the uninterrupted run" for p in sorted(set(reference) - set(ours))]
    found += [f"{p}: only in the rehearsal" for p in sorted(set(ours) - set(reference))]
    found += [
        f"{p}: {_digest_said(ours[p])} differs from the uninterrupted run's "
        f"{_digest_said(reference[p])}"
        for p in sorted(set(ours) & set(reference))
        if ours[p] != reference[p]
    ]
    return found


def _digest_said(digest: str) -> str:
    if digest.startswith(TORCH_DIGEST):
        return f"torch.save values {digest.removeprefix(TORCH_DIGEST)[:12]}…"
    return f"sha256 {digest[:12]}…"


__all__ = [
    "MAX_KILLS",
    "KillReport",
    "Plan",
    "RehearseInputError",
    "RehearseReport",
    "kill_steps",
    "last_landable_step",
    "not_compared",
    "prepare",
    "rehearse",
]
