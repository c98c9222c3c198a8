"""Health policy: classify one job generation from what the monitor knows
(docs/architecture.md#health-policy).

Pure and table-driven: `RULES` is an ordered table of (verdict, check); the first check that
fires decides, so the order *is* the precedence. Every threshold comes from the job's `Policy`.

Precedence, first match wins, and why:

1. finished    — exit 0 and the final upload done: the work is complete whatever the host does next.
                 When the spec names `outputs`, only once the generation's outputs manifest is
                 recorded (an empty outputs dir uploads a manifest of no files: that counts).
                 Without it the generation is not finished: the agent has stopped heartbeating,
                 so the heartbeat timeout calls it dead and a new host runs the job to its end
                 again (from the last checkpoint) and uploads the outputs.
2. failed      — non-zero exit with the restarts used up: terminal, and the truest reason to
                 report; or the script's own crash: this generation and the one before it both
                 exited non-zero without a step past the one they started from (a new host
                 would do the same: `functions/domain/crashes.py`); or the image cannot be
                 pulled (Vast keeps the instance `loading` with the pull error in
                 `status_msg`): the job's fault, not the host's, and no host would do better.
3. over_budget — the next monitor run would pass the cap: never rent a replacement with no money,
                 so this beats dead, crashed and hung.
3b. outbid     — an interruptible instance the marketplace stopped (`stopped` while Vast's
                 `intended_status` stays `running`; a stop by tether or by the agent's dead-man
                 switch sets `intended_status: stopped`): wait for it to win its machine back,
                 up to the bound `functions/domain/outbid.py` derives from the costs, then
                 replace. Its silent heartbeat and the exit code of the training it killed are
                 neither dead nor crashed.
4. dead        — host-level facts: instance gone, `exited`/`offline`/`stopped`, `unknown` too long,
                 heartbeat older than the timeout, stuck starting past the startup timeout.
5. crashed     — non-zero exit with restarts left: replace (the host is not blamed).
6. hung        — GPU unresponsive ≥ gpu_unresponsive_s, or no progress ≥ no_progress_s while the
                 GPU sat at ≤ gpu_idle_util_pct through that whole window.
7. starting    — no training heartbeat yet, within the startup timeout.
8. healthy     — none of the above.

A healthy generation may then be moved: `overpriced` (a replace that blames nobody) is the
monitor's move check (`functions/domain/move.py`), not a rule of this table: it needs a fresh
offer search, which a pure classification of one host's facts does not have.

Then the replacement caps (`apply_caps`): a dead or hung verdict whose cause has used its cap
(`policy.max_replacements_dead`, `policy.max_replacements_hung`) becomes `failed` (stop, the job
ends FAILED with the reason); the host is still blamed (`Verdict.cause`).

Decisions beyond the rules of docs/architecture.md#health-policy:

- One failed Vast call never kills a job: when the instance list failed this run
  (`instance.listed` false) every instance rule is skipped; heartbeat and clock rules still apply.
- `unknown` kills only after `heartbeat_timeout_s` *and* only if the agent is not heartbeating:
  the agent's own word beats a status daemon that lost contact with the host.
- `stopped` is dead (it bills storage and trains nothing), unless it is an outbid interruptible
  instance (rule 3b). `frozen`, `rebooting` and `loading` are left to the timeouts.
- Hung rules apply only in the `training` phase: restoring and the final upload legitimately idle
  the GPU.
- A host with no GPU (`gpu.available` false) or no utilisation reading is never hung by the
  no-progress rule: "GPU idle" is what tells a stuck job from a slow one, and a CPU job that never
  reports a step would otherwise be killed after `no_progress_s`. Such jobs stay guarded by the
  heartbeat, startup timeout, budget and lease.
- The no-progress clock starts at the later of the last step advance and the generation's first
  `training` heartbeat (restore and start-up are not "no progress"); with neither known, at rent.
- "GPU idle" means idle through the whole window: the current reading is at or below
  `gpu_idle_util_pct` and no heartbeat in the last `no_progress_s` reported more (`gpu_busy_at`,
  kept on the generation by the heartbeat API). One idle sample after a busy half hour is not a
  hang.
- A pull error is told from Vast's status message (`pull_failed`); pull errors that may be the
  host's (timeouts, a full disk, a registry's rate limit) are left to the startup timeout.
- A non-zero exit is called `crashed` (replace, host not avoided) while
  `restarts_so_far < max_restarts`, and `failed` (stop) after, or at once when it is the
  second in a row without progress (the script's own error: at most 2 rents for it).
  `restarts_so_far` counts restarts after a non-zero exit; `replacements` counts replacements
  of dead and hung hosts.
- Over budget is strict: spend + $/h × interval landing exactly on the cap is still within it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.crashes import CRASHES_WITHOUT_PROGRESS_MAX, last_output_line
from functions.domain.heartbeat_contract import GpuProbe, Phase
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
    OUTBID = "outbid"
    OVERPRICED = "overpriced"
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
    Health.OUTBID: "none",  # waiting; `Verdict.waited_out` replaces
    # Not a rule of the table: the monitor's move check (`functions/domain/move.py`) turns a
    # healthy verdict into this when finishing elsewhere is cheaper, all counted.
    Health.OVERPRICED: "replace",
    Health.FINISHED: "stop",
    Health.FAILED: "stop",
}

# Replacements on these verdicts remember the host and avoid it next time
# (docs/architecture.md#host-blame).
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
    status_msg: str | None = Field(default=None, description="Vast's status message.")


class OutbidView(_Frozen):
    """An interruptible instance the marketplace stopped (`functions/domain/outbid.py`)."""

    for_s: float = Field(ge=0, description="How long it has been seen stopped.")
    wait_s: float = Field(ge=0, description="How long waiting for it is worth (the bound).")
    why: str = Field(default="", description="How the bound was derived.")


class HeartbeatView(_Frozen):
    """The generation's last accepted heartbeat."""

    at: float
    phase: Phase
    step: int | None = None
    gpu: GpuProbe | None = None
    exit_code: int | None = None
    last_checkpoint_step: int | None = None
    outputs_recorded: bool = Field(
        default=False, description="The generation's outputs manifest is recorded."
    )
    exit_output: str | None = Field(
        default=None, description="Why the generation failed, as its agent said it."
    )
    progressed: bool = Field(
        default=False,
        description="The generation reported a step past the one it started from.",
    )


class HealthInput(_Frozen):
    now: float
    policy: Policy
    started_at: float = Field(description="When the generation's instance was rented.")
    instance: InstanceView = Field(default_factory=InstanceView)
    heartbeat: HeartbeatView | None = None
    progress_at: float | None = Field(
        default=None, description="When the step last advanced; None if it never has."
    )
    training_started_at: float | None = Field(
        default=None, description="The generation's first `training` heartbeat."
    )
    gpu_busy_at: float | None = Field(
        default=None,
        description="The last heartbeat whose GPU utilisation was above the idle threshold.",
    )
    spend_usd: float = Field(ge=0, description="Job spend so far, all generations.")
    spend_is_upper_bound: bool = Field(
        default=False,
        description="`spend_usd` bounds traffic from above: Vast's charges were unread.",
    )
    budget_usd: float = Field(gt=0)
    usd_per_hour: float = Field(ge=0, description="Current price of the live instance.")
    monitor_interval_s: float = Field(gt=0)
    restarts_so_far: int = Field(default=0, ge=0)
    outputs_required: bool = Field(
        default=False, description="The spec names an outputs dir: FINISHED waits for it."
    )
    crashes_without_progress_before: int = Field(
        default=0,
        ge=0,
        description="Generations right before this one, in a row, replaced as crashed after "
        "exiting non-zero without a step past the one they started from.",
    )
    replacements: Mapping[Health, int] = Field(
        default_factory=dict, description="Replacements so far for each cause (dead, hung)."
    )
    outbid: OutbidView | None = Field(
        default=None, description="Set while the instance is outbid (and Vast was read)."
    )
    resumed_at: float | None = Field(
        default=None,
        description="When the instance came back from its last outbid: the heartbeat and "
        "start-up clocks restart there, and a heartbeat from before it (the stop's exit) is old.",
    )


class Verdict(_Frozen):
    health: Health
    reason: str
    cause: Health | None = Field(
        default=None, description="What a `failed` verdict failed of, when a cap was reached."
    )
    waited_out: bool = Field(
        default=False, description="outbid: the wait bound has passed, replace the host."
    )

    @property
    def action(self) -> Action:
        return "replace" if self.waited_out else ACTIONS[self.health]

    @property
    def blames_host(self) -> bool:
        return self.health in BLAMES_HOST or self.cause in BLAMES_HOST


# --- checks: each returns a reason when it fires, None otherwise --------------------------------


def _heartbeat_age(h: HealthInput) -> float | None:
    if h.heartbeat is None:
        return None
    return h.now - max(h.heartbeat.at, h.resumed_at or h.heartbeat.at)


def _heartbeat_fresh(h: HealthInput) -> bool:
    age = _heartbeat_age(h)
    return age is not None and age < h.policy.heartbeat_timeout_s


def _exited_nonzero(h: HealthInput) -> str | None:
    hb = h.heartbeat
    if hb is None or h.outbid is not None:  # the marketplace's stop killed it: no crash
        return None
    if h.resumed_at is not None and hb.at <= h.resumed_at:
        return None  # the exit the outbid's stop caused, reported before it came back
    said = last_output_line(hb.exit_output)
    said = f" ({said})" if said else ""
    if hb.exit_code is not None and hb.exit_code != 0:
        return f"training command exited with code {hb.exit_code}{said}"
    if hb.phase == "failed":
        return f"agent reported phase failed{said}"
    return None


def _finished(h: HealthInput) -> str | None:
    hb = h.heartbeat
    if hb is None or hb.phase != "finished" or hb.exit_code != 0:
        return None
    if not h.outputs_required:
        return "training exited 0 and the final checkpoint upload is done"
    if hb.outputs_recorded:
        return "training exited 0, the final checkpoint and the outputs are uploaded"
    return None
    return None


def _failed(h: HealthInput) -> str | None:
    return _restarts_used_up(h) or _script_error(h) or _image_unpullable(h)


def _script_error(h: HealthInput) -> str | None:
    """The training command crashed without progress, as the generation before did: the
    script's own error (`functions/domain/crashes.py`)."""
    crash, hb = _exited_nonzero(h), h.heartbeat
    if crash is None or hb is None or hb.exit_code in (None, 0) or hb.phase == "stopping":
        return None
    in_a_row = h.crashes_without_progress_before + 1
    if hb.progressed or in_a_row < CRASHES_WITHOUT_PROGRESS_MAX:
        return None
    return (
        f"{crash}; the script's own error: {in_a_row} generations in a row exited non-zero "
        "before a step past the one they started from, a new host would do the same"
    )


def _restarts_used_up(h: HealthInput) -> str | None:
    crash = _exited_nonzero(h)
    if crash is None or h.restarts_so_far < h.policy.max_restarts:
        return None
    return f"{crash}; restarts used up ({h.restarts_so_far} of {h.policy.max_restarts})"


def _crashed(h: HealthInput) -> str | None:
    crash = _exited_nonzero(h)
    if crash is None or h.restarts_so_far >= h.policy.max_restarts:
        return None
    return f"{crash}; restarting ({h.restarts_so_far + 1} of {h.policy.max_restarts})"


# Docker's and registries' words for an image that no host could pull: a name that does not
# exist, a tag or digest that does not, a private image without credentials, a malformed name.
# Left out on purpose: timeouts, TLS and network errors, "no space left on device" and Docker
# Hub's "toomanyrequests" rate limit, which are the host's (or its IP's) and a new host may not
# have; the startup timeout handles those, as dead.
_PULL_ERRORS = re.compile(
    r"pull access denied|manifest unknown|manifest for \S+ not found|"
    r"repository does not exist|requested access to the resource is denied|"
    r"unauthorized: authentication required|invalid reference format|"
    r"no such image|not found: manifest|cannot be pulled",
    re.IGNORECASE,
)
_PULL_PHASES = frozenset({None, "created", "loading"})


def pull_failed(status_msg: str | None) -> bool:
    """Vast's status message says the image cannot be pulled, by any host."""
    return bool(status_msg) and _PULL_ERRORS.search(status_msg or "") is not None


def _image_unpullable(h: HealthInput) -> str | None:
    inst = h.instance
    if not inst.listed or not inst.present or inst.actual_status not in _PULL_PHASES:
        return None
    if not pull_failed(inst.status_msg):
        return None
    return f"the image cannot be pulled: {(inst.status_msg or '').strip()[:300]}"


def over_budget(
    spend_usd: float, budget_usd: float, usd_per_hour: float, interval_s: float
) -> str | None:
    """Why the next monitor run would find the job past its budget; None if it would not.
    Judged in every active state (`functions/domain/reconcile.py`), not only while running."""
    by_next_run = spend_usd + usd_per_hour * interval_s / 3600
    if by_next_run > budget_usd:
        return (
            f"spend ${spend_usd:.2f} + ${usd_per_hour:.3f}/h × {interval_s:g} s "
            f"= ${by_next_run:.2f} would pass the budget ${budget_usd:.2f} by the next check"
        )
    return None


def _over_budget(h: HealthInput) -> str | None:
    why = over_budget(h.spend_usd, h.budget_usd, h.usd_per_hour, h.monitor_interval_s)
    if why is not None and h.spend_is_upper_bound:
        return f"{why} (an upper bound: Vast's charges unread)"
    return why


def _is_starting(h: HealthInput) -> bool:
    return h.heartbeat is None or h.heartbeat.phase in _STARTING_PHASES


def _outbid(h: HealthInput) -> str | None:
    out = h.outbid
    if out is None or not h.instance.listed:
        return None
    waited, bound = round(out.for_s, 1), round(out.wait_s, 1)
    if out.for_s >= out.wait_s:
        return f"outbid for {waited:g} s, past the {bound:g} s worth waiting ({out.why})"
    return f"outbid for {waited:g} s; waiting up to {bound:g} s ({out.why})"


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
    waited = h.now - max(h.started_at, h.resumed_at or h.started_at)
    if _is_starting(h) and waited >= policy.startup_timeout_s:
        return f"still starting after {waited:g} s (startup timeout {policy.startup_timeout_s} s)"
    return None


def gpu_busy(gpu: GpuProbe | None, policy: Policy) -> bool:
    """A GPU reading above the job's idle threshold (the heartbeat API keeps when it last saw
    one: `gpu_busy_at`)."""
    return (
        gpu is not None
        and gpu.available
        and gpu.utilization_pct is not None
        and gpu.utilization_pct > policy.gpu_idle_util_pct
    )


def _idle_utilisation(gpu: GpuProbe | None, idle_pct: float) -> float | None:
    """The GPU's utilisation when there is a GPU reading and it is near zero, else None."""
    if gpu is None or not gpu.available or gpu.utilization_pct is None:
        return None
    return gpu.utilization_pct if gpu.utilization_pct <= idle_pct else None


def no_progress_since(h: HealthInput) -> float:
    """Where the no-progress clock starts: the later of the last step advance and the first
    `training` heartbeat; at rent when neither is known."""
    known = [t for t in (h.progress_at, h.training_started_at) if t is not None]
    return max(known) if known else h.started_at


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
    stalled = h.now - no_progress_since(h)
    util = _idle_utilisation(gpu, policy.gpu_idle_util_pct)
    if stalled < policy.no_progress_s or util is None:
        return None
    window_start = h.now - policy.no_progress_s
    if h.gpu_busy_at is not None and h.gpu_busy_at > window_start:
        return None  # busy within the window: slow, not hung
    return (
        f"no progress for {stalled:g} s with GPU utilisation {util:g}% "
        f"(≤ {policy.gpu_idle_util_pct:g}% for the last {policy.no_progress_s} s)"
    )


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
    (Health.OUTBID, _outbid),
    (Health.DEAD, _dead),
    (Health.CRASHED, _crashed),
    (Health.HUNG, _hung),
    (Health.STARTING, _starting),
    (Health.HEALTHY, _healthy),
)


def replacement_cap(policy: Policy, cause: Health) -> int | None:
    """How many replacements `cause` may start (None: not a capped cause here; crashes are
    capped by the crash rules, with `max_restarts`)."""
    caps = {Health.DEAD: policy.max_replacements_dead, Health.HUNG: policy.max_replacements_hung}
    return caps.get(cause)


def apply_caps(verdict: Verdict, h: HealthInput) -> Verdict:
    """A dead or hung verdict whose cause has used its cap ends the job: `failed`, with the
    reason, and the cause kept (the host is still blamed)."""
    cap = replacement_cap(h.policy, verdict.health)
    if cap is None:
        return verdict
    used = h.replacements.get(verdict.health, 0)
    if used < cap:
        return verdict
    field = f"policy.max_replacements_{verdict.health.value}"
    return Verdict(
        health=Health.FAILED,
        reason=f"{verdict.health.value}: {verdict.reason}; {used} replacement(s) for "
        f"{verdict.health.value} hosts already, {field} is {cap}",
        cause=verdict.health,
    )


def classify(h: HealthInput) -> Verdict:
    """The verdict of the first rule that fires, within the replacement caps."""
    for health, check in RULES:
        reason = check(h)
        if reason is not None:
            waited_out = h.outbid is not None and h.outbid.for_s >= h.outbid.wait_s
            verdict = Verdict(
                health=health, reason=reason, waited_out=health is Health.OUTBID and waited_out
            )
            return apply_caps(verdict, h)
    raise AssertionError("the healthy rule always fires")  # pragma: no cover
