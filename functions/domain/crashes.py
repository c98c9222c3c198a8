"""A failed generation's reason, and when a crash is the script's own (pure).

The agent says why a generation failed in its heartbeat (`exit_output`: the last lines of the
training command's output after a non-zero exit, or why training could not start). The first
heartbeat that carries it puts it on the timeline (`failure_event`); the job detail shows the
newest one (`last_failure`), `tether status` as its error lines.

A crash is the script's own, not the host's, when two generations in a row exit non-zero
without reporting a step past the one they started from (a typo in `run`, an import error, a
bug right after the restore): a new host would only do the same, so the health policy ends the
job FAILED with the reason instead of renting again (docs/architecture.md#replacement-caps).
`crashed_without_progress` is the fact about one generation; `crashes_without_progress_before`
counts them in a row before the current one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from functions.domain.heartbeat_contract import HeartbeatRequest
from functions.domain.job import Generation, Heartbeat, TimelineEvent

# Two generations in a row that crash without progress: the script's own error.
CRASHES_WITHOUT_PROGRESS_MAX = 2
MAX_LAST_LINE = 300  # characters of the output's last line in a reason or event message


def last_output_line(output: str | None) -> str | None:
    """The output's last non-blank line (where a traceback names its error), cut to
    `MAX_LAST_LINE` characters; None when there is none."""
    if output is None:
        return None
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:MAX_LAST_LINE] if lines else None


def failure_event(
    previous: Heartbeat | None, request: HeartbeatRequest, now: float
) -> TimelineEvent | None:
    """The timeline event for the first heartbeat of a generation that says why it failed
    (`exit_output`), with the exit code and the whole output tail; None otherwise."""
    if request.exit_output is None:
        return None
    if previous is not None and previous.exit_output is not None:
        return None  # said already
    head = (
        f"training exited with code {request.exit_code}"
        if request.exit_code is not None
        else "training could not start"
    )
    last = last_output_line(request.exit_output)
    data: dict[str, Any] = {
        "generation": request.generation,
        "exit_code": request.exit_code,
        "exit_output": request.exit_output,
    }
    return TimelineEvent(
        job_id=request.job_id,
        at=now,
        kind="training_failed",
        message=f"g{request.generation} {head}" + (f": {last}" if last else ""),
        data=data,
    )


def reported_progress(generation: Generation) -> bool:
    """The generation's agent saw a step past the one it started from (the restored step, 0
    for a fresh start): stored from its `resumed` report, or in its last heartbeat's."""
    hb = generation.heartbeat
    in_heartbeat = hb is not None and hb.resumed is not None and hb.resumed.first_step_at
    return generation.first_step_at is not None or bool(in_heartbeat)


def crashed_without_progress(generation: Generation) -> bool:
    """The generation's training command exited non-zero on its own (not stopped from outside)
    before its agent saw a step past the one it started from."""
    hb = generation.heartbeat
    if hb is None or hb.exit_code in (None, 0) or hb.phase == "stopping":
        return False
    return not reported_progress(generation)


def crashes_without_progress_before(generations: Iterable[Generation], current: Generation) -> int:
    """How many generations right before `current`, in a row, were replaced as crashed after
    crashing without progress."""
    count = 0
    earlier = sorted(
        (g for g in generations if g.generation < current.generation),
        key=lambda g: g.generation,
        reverse=True,
    )
    for g in earlier:
        if g.replaced_for != "crashed" or not crashed_without_progress(g):
            break
        count += 1
    return count


def last_failure(generations: Iterable[Generation]) -> dict[str, Any] | None:
    """The newest generation's stated failure (`exit_output`), for the job detail."""
    said = [g for g in generations if g.heartbeat is not None and g.heartbeat.exit_output]
    if not said:
        return None
    newest = max(said, key=lambda g: g.generation)
    hb = newest.heartbeat
    assert hb is not None
    return {"generation": newest.generation, "exit_code": hb.exit_code, "output": hb.exit_output}
