"""`tether status` for people: the job detail of `GET /jobs/{id}` as one fact per line.

The API computes the facts (`functions/domain/job_status.py`: the last transition, the host's
state, step N of M, pace, ETA, expected total, the last error); this module only words them,
each line with its control characters shown, not obeyed (`tether_cli.terminal_text.visible`).
A field an older API does not send is left out, never guessed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tether_cli import output
from tether_cli.terminal_text import visible

TIMELINE_SHOWN = 12
INDENT = " " * 10


def status_lines(view: dict[str, Any], now: float, flags: str = "") -> list[str]:
    """`tether status`: one fact per line, then the timeline; each line with its control
    characters shown (a line break in a host's message too: a line is one fact). `flags`
    (" --local", " --region R") go on the commands it suggests, as the user ran it."""
    lines = [f"job       {view['job_id']} ({view.get('name')})"]
    lines.append(state_line(view, now))
    lines += progress_lines(view.get("progress"), now)
    spend = view.get("spend") or {}
    spent, budget = float(spend.get("spent_usd") or 0), float(spend.get("budget_usd") or 0)
    used = f" ({spent / budget:.0%})" if budget else ""
    lines.append(
        f"spend     {output.usd(spent)} of {output.usd(budget)}{used}, "
        f"{output.usd(float(spend.get('remaining_usd') or 0))} left"
    )
    lines += expected_total_lines(view.get("progress"))
    upper = spend.get("upper_bound_usd")
    if isinstance(upper, int | float) and upper > spent:
        read_at = spend.get("charges_read_at")
        since = f"last read {ago(read_at, now)}" if read_at else "never read"
        lines.append(
            f"{INDENT}at most {output.usd(float(upper))}: traffic is an upper bound, "
            f"Vast's charges unread ({since})"
        )
    host = view.get("host")
    lines.append(host_line(host, now) if host else "host      none yet")
    checkpoint = view.get("last_checkpoint")
    lines.append(
        f"checkpoint step {checkpoint['step']} (generation {checkpoint['generation']})"
        if checkpoint
        else "checkpoint none uploaded yet"
    )
    lines.append(outputs_line(view, flags))
    lines.append(f"health    {health_line(host, now)}")
    lines.append(f"restarts  {view.get('restarts', 0)}")
    lines += error_lines(view)
    events = view.get("timeline") or []
    if events:
        lines.append("timeline")
        shown = events[-TIMELINE_SHOWN:]
        if len(events) > len(shown):
            lines.append(f"  … {len(events) - len(shown)} earlier events (--json shows all)")
        for event in shown:
            message = event.get("message") or ""
            lines.append(f"  {clock(event['at'])}  {event['kind']:<20} {message}")
    return [visible(line, keep_newlines=False) for line in lines]


def state_line(view: dict[str, Any], now: float) -> str:
    """`RUNNING, recovered from a dead host 4 min ago`; with its reason while the reason is the
    state of affairs: `REPLACING: dead: no heartbeat for 400 s (4 min ago)`."""
    state = str(view["state"])
    reason = view.get("state_reason") or view.get("stop_reason")
    transition = view.get("last_transition")
    at = transition.get("at") if isinstance(transition, dict) else None
    if reason:
        when = f" ({ago(at, now)})" if isinstance(at, int | float) and at > 0 else ""
        return f"state     {state}: {reason}{when}"
    if isinstance(transition, dict) and transition.get("text"):
        when = f" {ago(at, now)}" if isinstance(at, int | float) and at > 0 else ""
        return f"state     {state}, {transition['text']}{when}"
    return f"state     {state}"


def progress_lines(progress: Any, now: float) -> list[str]:
    """Step N of M, the pace and the ETA (nothing from an API that does not send them)."""
    if not isinstance(progress, dict):
        return []
    step, total = progress.get("step"), progress.get("total_steps")
    if step is None and total is None:
        return ["progress  no step reported yet"]
    if total is None:
        return [
            f"progress  step {step}; total unknown (give total_steps in the spec, or write "
            '{"step": n, "total_steps": m} to the progress file)'
        ]
    done = step or 0
    parts = [f"step {done} of {total} ({min(done / total, 1.0):.0%})"]
    pace = progress.get("pace")
    if isinstance(pace, dict):
        parts.append(pace_words(pace))
        eta, low = progress.get("eta_s"), progress.get("eta_low_s")
        high = progress.get("eta_high_s")
        if isinstance(eta, int | float):
            spread = _range(duration(low), duration(high)) if low is not None else ""
            parts.append(f"ETA {duration(eta)}{spread}, at {clock(now + eta)}")
    elif progress.get("eta_s") is None and done < total:
        parts.append("pace unknown until the host reports steps")
    return ["progress  " + ", ".join(parts)]


PACE_SOURCE_WORDS = {
    "this host": "measured on this host",
    "an earlier host": "measured on an earlier host of this GPU",
    "prior": "the speed prior's guess",
}


def pace_words(pace: dict[str, Any]) -> str:
    """`12.0 steps/min measured on this host`."""
    source = str(pace.get("source"))
    per_min = _steps(float(pace["steps_per_min"]))
    return f"{per_min} steps/min {PACE_SOURCE_WORDS.get(source, source)}"


def expected_total_lines(progress: Any) -> list[str]:
    """The expected total with its range, and what finishing costs at the host's $/h."""
    if not isinstance(progress, dict) or progress.get("expected_total_usd") is None:
        return []
    total = output.usd(float(progress["expected_total_usd"]))
    low, high = progress.get("expected_total_low_usd"), progress.get("expected_total_high_usd")
    spread = (
        _range(output.usd(float(low)), output.usd(float(high)))
        if low is not None and high is not None
        else ""
    )
    to_finish = output.usd(float(progress.get("to_finish_usd") or 0))
    rate = output.usd(float(progress.get("usd_per_hour") or 0))
    return [f"{INDENT}expected total {total}{spread}: {to_finish} more to finish at {rate}/h"]


def _range(low: str, high: str) -> str:
    """` (low–high)`, or nothing when both ends read the same."""
    return "" if low == high else f" ({low}–{high})"


def _steps(per_min: float) -> str:
    return f"{per_min:.1f}" if per_min < 100 else f"{per_min:.0f}"


def host_line(host: dict[str, Any], now: float) -> str:
    parts = [f"generation {host.get('generation')}"]
    if host.get("instance_id") is not None:
        parts.append(f"Vast instance {host['instance_id']}")
    if host.get("machine_id") is not None:
        parts.append(f"machine {host['machine_id']}")
    if host.get("usd_per_hour"):
        parts.append(f"{output.usd(float(host['usd_per_hour']))}/h")
    if host.get("lease_expires_at"):
        parts.append(f"lease {until(host['lease_expires_at'], now)}")
    return f"host      {', '.join(parts)} ({host_state_words(host, now)})"


def host_state_words(host: dict[str, Any], now: float) -> str:
    """The host's real state (`job_status.host_state`); the record's status from an older API."""
    state = host.get("state")
    if state is None:
        return str(host.get("status"))
    since = host.get("state_since")
    if state == "lost":
        return f"lost: no heartbeat since {ago(since, now)}"
    if state == "provisioning":
        rented = f"rented {ago(since, now)}, " if since else ""
        return f"provisioning: {rented}its agent has not reported yet"
    if state == "replaced":
        return "replaced: being destroyed"
    if state == "ended":
        return f"ended: destroyed {ago(since, now)}" if since else "ended"
    return str(state)


def outputs_line(view: dict[str, Any], flags: str = "") -> str:
    """Where the job's result stands: recorded (and how to fetch it), awaited, or not asked for."""
    recorded = view.get("outputs")
    if recorded:
        return (
            f"outputs   {recorded['files']} files, {output.size(int(recorded['bytes']))} "
            f"(generation {recorded['generation']}): "
            f"tether download {view['job_id']} --outputs{flags}"
        )
    wanted = ((view.get("spec") or {}).get("outputs") or {}).get("dir")
    if wanted:
        return f"outputs   none recorded yet ({wanted} is uploaded when training ends)"
    return "outputs   not kept (the spec names no outputs dir)"


def error_lines(view: dict[str, Any]) -> list[str]:
    """The last error in one line (`last_error`), then, when it is a training failure, the
    last lines of its output (each its own line, its control characters shown)."""
    said, failure = view.get("last_error"), view.get("error")
    lines: list[str] = []
    if isinstance(said, dict) and said.get("text"):
        lines.append(f"error     generation {said.get('generation')}: {said['text']}")
    if not isinstance(failure, dict) or not failure.get("output"):
        return lines
    if lines and said.get("generation") != failure.get("generation"):  # type: ignore[union-attr]
        return lines  # a newer failure than the output's (a host replaced since)
    if not lines:  # an API without `last_error`
        code = failure.get("exit_code")
        head = f"exited with code {code}" if code is not None else "could not start training"
        lines.append(f"error     generation {failure.get('generation')} {head}:")
    lines += [f"{INDENT}{line}" for line in str(failure["output"]).rstrip("\n").split("\n")]
    return lines


def health_line(host: dict[str, Any] | None, now: float) -> str:
    beat = (host or {}).get("last_heartbeat")
    if not beat:
        return "no heartbeat yet"
    parts = [str(beat.get("phase"))]
    if beat.get("step") is not None:
        parts.append(f"step {beat['step']}")
    parts.append(f"heartbeat {ago(beat.get('at'), now)}")
    gpu = beat.get("gpu") or {}
    if not gpu.get("available", True):
        parts.append("no GPU probe")
    elif not gpu.get("responsive", True):
        parts.append(f"GPU unresponsive for {gpu.get('unresponsive_s', 0):.0f} s")
    elif gpu.get("utilization_pct") is not None:
        parts.append(f"GPU {gpu['utilization_pct']:.0f} %")
    if beat.get("exit_code") is not None:
        parts.append(f"exit code {beat['exit_code']}")
    return ", ".join(parts)


def duration(seconds: Any) -> str:
    """`45 s`, `48 min`, `3.5 h`, `4 d`."""
    if not isinstance(seconds, int | float):
        return "-"
    seconds = max(0.0, float(seconds))
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} d"


def ago(at: Any, now: float) -> str:
    if not isinstance(at, int | float) or at <= 0:
        return "-"
    seconds = max(0.0, now - float(at))
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} d ago"


def until(at: float, now: float) -> str:
    left = at - now
    if left <= 0:
        return f"expired {ago(at, now)}"
    return f"until {clock(at)} ({left / 60:.0f} min)"


def clock(at: float) -> str:
    return datetime.fromtimestamp(float(at), UTC).strftime("%Y-%m-%d %H:%M:%SZ")
