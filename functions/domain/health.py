"""Health policy: classify one job generation from what the monitor knows (DESIGN §4).

Pure and table-driven: `RULES` is an ordered table of (verdict, check); the first check that
fires decides, so the order *is* the precedence. Every threshold comes from the job's `Policy`.

Precedence, first match wins, and why:

1. finished    — exit 0 and the final upload done: the work is complete whatever the host does next.
2. failed      — non-zero exit with the restarts used up: terminal, and the truest reason to report.
3. over_budget — the next monitor run would pass the cap: never rent a replacement with no money,
                 so this beats dead, crashed and hung.
4. dead        — host-level facts: instance gone, `exited`/`offline`/`stopped`, `unknown` too long,
                 heartbeat older than the timeout, stuck starting past the startup timeout.
5. crashed     — non-zero exit with restarts left: replace (the host is not blamed).
6. hung        — GPU unresponsive ≥ gpu_unresponsive_s, or no progress ≥ no_progress_s while the
                 GPU sits at ≤ gpu_idle_util_pct.
7. starting    — no training heartbeat yet, within the startup timeout.
8. healthy     — none of the above.

Decisions the design leaves open:

- One failed Vast call never kills a job: when the instance list failed this run
  (`instance.listed` false) every instance rule is skipped; heartbeat and clock rules still apply.
- `unknown` kills only after `heartbeat_timeout_s` *and* only if the agent is not heartbeating:
  the agent's own word beats a status daemon that lost contact with the host.
- `stopped` is dead (it bills storage and trains nothing; an outbid interruptible host is replaced
  rather than waited for). `frozen`, `rebooting` and `loading` are left to the timeouts.
- Hung rules apply only in the `training` phase: restoring and the final upload legitimately idle
  the GPU.
- A host with no GPU (`gpu.available` false) or no utilisation reading is never hung by the
  no-progress rule: "GPU idle" is what tells a stuck job from a slow one, and a CPU job that never
  reports a step would otherwise be killed after `no_progress_s`. Such jobs stay guarded by the
  heartbeat, startup timeout, budget and lease.
- A job that never reported a step counts "no progress" from when the generation started.
- A non-zero exit is called `crashed` (replace, host not avoided) while
  `restarts_so_far < max_restarts`, and `failed` (stop) after. `restarts_so_far` counts restarts
  after a non-zero exit, not host replacements (those are bounded by the budget).
- Over budget is strict: spend + $/h × interval landing exactly on the cap is still within it.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.heartbeat import GpuProbe, Phase
from functions.domain.jobspec import Policy

VastStatus = Literal[
    "created",
    "loading",
    "running",
    "stopped",
    "frozen",
    "exited",
    "rebooting",
    "unknown",
    "offline",
]

# Vast's docs: these never come back to `running` by themselves; `stopped` trains nothing.
_DEAD_STATUSES = frozenset({"exited", "offline", "stopped"})
_STARTING_PHASES = frozenset({"starting", "restoring"})


class Health(StrEnum):
    STARTING = "starting"
    HEALTHY = "healthy"
    DEAD = "dead"
    HUNG = "hung"
    CRASHED = "crashed"
    OVER_BUDGET = "over_budget"
    FINISHED = "finished"
    FAILED = "failed"


Action = Literal["none", "replace", "stop"]

ACTIONS: dict[Health, Action] = {
    Health.STARTING: "none",
    Health.HEALTHY: "none",
    Health.DEAD: "replace",
    Health.HUNG: "replace",
    Health.CRASHED: "replace",
    Health.OVER_BUDGET: "stop",
    Health.FINISHED: "stop",
    Health.FAILED: "stop",
}

# Replacements on these verdicts remember the host and avoid it next time (DESIGN §4).
BLAMES_HOST = frozenset({Health.DEAD, Health.HUNG})


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InstanceView(_Frozen):
    """What this monitor run learned from Vast about the generation's instance."""

    listed: bool = Field(
        default=True, description="False when the list call failed this run: status unknown."
    )
    present: bool = Field(default=True, description="Found in a successful list.")
    actual_status: VastStatus | None = Field(
        default=None, description="Vast's actual_status; None is Vast's null (just created)."
    )
    unknown_for_s: float = Field(
        default=0, ge=0, description="How long actual_status has been `unknown`."
    )


class HeartbeatView(_Frozen):
    """The generation's last accepted heartbeat."""

    at: float
    phase: Phase
    step: int | None = None
    gpu: GpuProbe | None = None
    exit_code: int | None = None
    last_checkpoint_step: int | None = None


class HealthInput(_Frozen):
    now: float
    policy: Policy
    started_at: float = Field(description="When the generation's instance was rented.")
    instance: InstanceView = Field(default_factory=InstanceView)
    heartbeat: HeartbeatView | None = None
    progress_at: float | None = Field(
        default=None, description="When the step last advanced; None if it never has."
    )
    spend_usd: float = Field(ge=0, description="Job spend so far, all generations.")
    budget_usd: float = Field(gt=0)
    usd_per_hour: float = Field(ge=0, description="Current price of the live instance.")
    monitor_interval_s: float = Field(gt=0)
    restarts_so_far: int = Field(default=0, ge=0)


class Verdict(_Frozen):
    health: Health
    reason: str

    @property
    def action(self) -> Action:
        return ACTIONS[self.health]

    @property
    def blames_host(self) -> bool:
        return self.health in BLAMES_HOST


# --- checks: each returns a reason when it fires, None otherwise --------------------------------


def _heartbeat_age(h: HealthInput) -> float | None:
    return None if h.heartbeat is None else h.now - h.heartbeat.at


def _heartbeat_fresh(h: HealthInput) -> bool:
    age = _heartbeat_age(h)
    return age is not None and age < h.policy.heartbeat_timeout_s


def _exited_nonzero(h: HealthInput) -> str | None:
    hb = h.heartbeat
    if hb is None:
        return None
    if hb.exit_code is not None and hb.exit_code != 0:
        return f"training command exited with code {hb.exit_code}"
    if hb.phase == "failed":
        return "agent reported phase failed"
    return None


def _finished(h: HealthInput) -> str | None:
    hb = h.heartbeat
    if hb is not None and hb.phase == "finished" and hb.exit_code == 0:
        return "training exited 0 and the final checkpoint upload is done"
    return None


def _failed(h: HealthInput) -> str | None:
    crash = _exited_nonzero(h)
    if crash is None or h.restarts_so_far < h.policy.max_restarts:
        return None
    return f"{crash}; restarts used up ({h.restarts_so_far} of {h.policy.max_restarts})"


def _crashed(h: HealthInput) -> str | None:
    crash = _exited_nonzero(h)
    if crash is None or h.restarts_so_far >= h.policy.max_restarts:
        return None
    return f"{crash}; restarting ({h.restarts_so_far + 1} of {h.policy.max_restarts})"


def _over_budget(h: HealthInput) -> str | None:
    by_next_run = h.spend_usd + h.usd_per_hour * h.monitor_interval_s / 3600
    if by_next_run > h.budget_usd:
        return (
            f"spend ${h.spend_usd:.2f} + ${h.usd_per_hour:.3f}/h × {h.monitor_interval_s:g} s "
            f"= ${by_next_run:.2f} would pass the budget ${h.budget_usd:.2f} by the next check"
        )
    return None


def _is_starting(h: HealthInput) -> bool:
    return h.heartbeat is None or h.heartbeat.phase in _STARTING_PHASES


def _dead(h: HealthInput) -> str | None:
    inst, policy = h.instance, h.policy
    if inst.listed:
        if not inst.present:
            return "instance is gone from Vast"
        if inst.actual_status in _DEAD_STATUSES:
            return f"instance is {inst.actual_status}"
        if (
            inst.actual_status == "unknown"
            and inst.unknown_for_s >= policy.heartbeat_timeout_s
            and not _heartbeat_fresh(h)
        ):
            return f"instance status unknown for {inst.unknown_for_s:g} s and no fresh heartbeat"
    age = _heartbeat_age(h)
    if age is not None and age >= policy.heartbeat_timeout_s:
        return f"last heartbeat {age:g} s ago (timeout {policy.heartbeat_timeout_s} s)"
    waited = h.now - h.started_at
    if _is_starting(h) and waited >= policy.startup_timeout_s:
        return f"still starting after {waited:g} s (startup timeout {policy.startup_timeout_s} s)"
    return None


def _idle_utilisation(gpu: GpuProbe | None, idle_pct: float) -> float | None:
    """The GPU's utilisation when there is a GPU reading and it is near zero, else None."""
    if gpu is None or not gpu.available or gpu.utilization_pct is None:
        return None
    return gpu.utilization_pct if gpu.utilization_pct <= idle_pct else None


def _hung(h: HealthInput) -> str | None:
    hb, policy = h.heartbeat, h.policy
    if hb is None or hb.phase != "training":
        return None
    gpu = hb.gpu
    if (
        gpu is not None
        and gpu.available
        and not gpu.responsive
        and gpu.unresponsive_s >= policy.gpu_unresponsive_s
    ):
        return f"GPU unresponsive for {gpu.unresponsive_s:g} s"
    since = h.progress_at if h.progress_at is not None else h.started_at
    stalled = h.now - since
    util = _idle_utilisation(gpu, policy.gpu_idle_util_pct)
    if stalled >= policy.no_progress_s and util is not None:
        return (
            f"no progress for {stalled:g} s with GPU utilisation {util:g}% "
            f"(≤ {policy.gpu_idle_util_pct:g}%)"
        )
    return None


def _starting(h: HealthInput) -> str | None:
    if _is_starting(h):
        phase = "no heartbeat yet" if h.heartbeat is None else f"phase {h.heartbeat.phase}"
        return f"{phase}, {h.now - h.started_at:g} s since rent"
    return None


def _healthy(h: HealthInput) -> str | None:
    return "training" if h.heartbeat is None else f"phase {h.heartbeat.phase}"


Check = Callable[[HealthInput], str | None]

# The order is the precedence (see the module docstring).
RULES: tuple[tuple[Health, Check], ...] = (
    (Health.FINISHED, _finished),
    (Health.FAILED, _failed),
    (Health.OVER_BUDGET, _over_budget),
    (Health.DEAD, _dead),
    (Health.CRASHED, _crashed),
    (Health.HUNG, _hung),
    (Health.STARTING, _starting),
    (Health.HEALTHY, _healthy),
)


def classify(h: HealthInput) -> Verdict:
    """The verdict of the first rule that fires."""
    for health, check in RULES:
        reason = check(h)
        if reason is not None:
            return Verdict(health=health, reason=reason)
    raise AssertionError("the healthy rule always fires")  # pragma: no cover
