"""The demo's verdict: the summary it prints, and how it is reached from the evidence
(`tether_local.demo.invariants` checks the invariants, docs/architecture.md#invariants, on it).
Invariant 8 compares the weights of the highest verified checkpoint with an uninterrupted
reference run of the same command to the same step, run directly (no stack) in the job image's
stand-in, in the example's folder (the code the job ships), its checkpoints in a temporary
directory."""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
import time
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from tether_agent.training_env import HOOKS_DIR

from functions.adapters.store import JobView
from functions.domain.job import JobState
from tether_local.demo import invariants
from tether_local.demo.evidence import (
    bad_input_statuses,
    checkpoint_facts,
    host_received,
    key_scopes,
    ledger_facts,
    restore_candidates,
    s3_root,
)
from tether_local.demo.invariants import Evidence, Incident
from tether_local.demo.job import (
    EXAMPLE_DIR,
    MONITOR_INTERVAL_S,
    WEIGHTS_FILE,
    TrainArgs,
    demo_image,
)
from tether_local.demo.run import DemoError, DemoRun
from tether_local.hosts.images import stand_in
from tether_local.hosts.local_hosts import SYSTEM_PATH

VERDICT_KINDS = frozenset(
    {"dead", "hung", "crashed", "failed", "over_budget", "outbid", "outbid_wait"}
)


class DemoSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scenario: str
    job_id: str
    final_state: str
    expected_state: str
    incidents: list[Incident]
    spend_usd: float
    budget_usd: float
    invariants: dict[str, bool]
    invariant_details: dict[str, str]
    scenario_checks: dict[str, bool] = Field(default_factory=dict)
    identical_to_uninterrupted: bool
    compared_step: int | None
    wall_s: float
    log_tail: str | None = None

    @property
    def ok(self) -> bool:
        return (
            all(self.invariants.values())
            and all(self.scenario_checks.values())
            and self.final_state == self.expected_state
        )


@cache
def reference_weights_sha256(train: TrainArgs, step: int) -> str:
    """The weights of an uninterrupted run of the same command, stopped at `step`: the script
    run directly in the job image's stand-in from the example's folder, as the host runs it in
    the extracted code (no stack, no sleeps: they do not change the arithmetic), with the hooks
    on PYTHONPATH as the agent puts them."""
    image = stand_in(demo_image())
    with tempfile.TemporaryDirectory(prefix="tether-reference-") as tmp:
        env = {
            "PATH": f"{image.bin}:{SYSTEM_PATH}",
            "HOME": tmp,
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(HOOKS_DIR),
        }
        done = subprocess.run(
            [str(image.python), *train.argv(steps=step), "--checkpoint-dir", tmp],
            env=env,
            cwd=EXAMPLE_DIR,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if done.returncode != 0:
            raise DemoError(f"the reference run failed: {done.stdout[-500:]}{done.stderr[-500:]}")
        return (Path(tmp) / "final_sha256.txt").read_text().strip()


def weights_sha256(weights_file: Path) -> str:
    """What tiny_train writes to final_sha256.txt: the sha256 of its weights file's bytes."""
    return hashlib.sha256(weights_file.read_bytes()).hexdigest()


def summarize(run: DemoRun, view: JobView) -> DemoSummary:
    """Judge the ended run from stored state: the invariants, the incidents, the spend."""
    stack, job = run.stack, view.job
    run.checkpoints.update({c.prefix: c for c in checkpoint_facts(stack, run.job_id)})
    checkpoints = list(run.checkpoints.values())
    best = invariants.result_checkpoint(checkpoints, view.generations)
    weights = reference = None
    if best is not None:
        files = sorted((s3_root(stack) / best.prefix).rglob(WEIGHTS_FILE))
        weights = weights_sha256(files[0]) if files else None
        reference = reference_weights_sha256(run.scenario.train, best.step)
    ledgers = ledger_facts(stack, run.job_id)
    labels: dict[str, int] = {}
    for ledger in ledgers:
        labels[str(ledger.label)] = labels.get(str(ledger.label), 0) + 1
    assert stack.hosts is not None
    evidence = Evidence(
        job=job,
        generations=tuple(view.generations),
        ledgers=tuple(ledgers),
        billing_samples=tuple(run.samples),
        checkpoints=tuple(checkpoints),
        restores=tuple(run.restores.values()),
        restore_candidates=restore_candidates(stack, run.job_id),
        host_envs={h.instance_id: host_received(stack, h) for h in stack.hosts.for_job(run.job_id)},
        key_scopes=key_scopes(stack, run.job_id),
        account_secrets=tuple(stack.account_secrets()),
        bad_input_statuses=bad_input_statuses(stack, run.job_id),
        labels_rented=labels,
        weights_sha256=weights,
        reference_sha256=reference,
        monitor_interval_s=(
            run.clock.effective_interval_s if run.clock is not None else MONITOR_INTERVAL_S
        ),
        supervisor_dead_for_s=run.supervisor_dead_s,
        ended_at=time.time(),
    )
    results = invariants.check_invariants(evidence)
    verdicts = [(e.at, e.kind) for e in view.events if e.kind in VERDICT_KINDS]
    found = invariants.incidents(run.faults, verdicts, run.progress)
    tail = None
    if job.state == JobState.FAILED:
        last = max(stack.hosts.for_job(run.job_id), key=lambda h: h.generation or 0, default=None)
        tail = "\n".join(last.log_text().splitlines()[-10:]) if last is not None else None
    identical = results["8_identical_to_uninterrupted"].ok
    run.say(
        f"job {job.state.value}; weights at step {best.step if best else '-'} "
        + ("identical to the uninterrupted run" if identical else "DIFFER from the reference")
    )
    return DemoSummary(
        scenario=run.scenario.name,
        job_id=run.job_id,
        final_state=job.state.value,
        expected_state=run.scenario.expected_state.value,
        incidents=found,
        spend_usd=round(sum(ledger.total_usd for ledger in ledgers), 6),
        budget_usd=job.budget_usd,
        invariants={name: check.ok for name, check in results.items()},
        invariant_details={name: check.detail for name, check in results.items()},
        scenario_checks=dict(run.checks),
        identical_to_uninterrupted=identical,
        compared_step=best.step if best else None,
        wall_s=round(time.time() - run.started_at, 1),
        log_tail=tail,
    )


__all__ = ["DemoSummary", "reference_weights_sha256", "summarize", "weights_sha256"]
