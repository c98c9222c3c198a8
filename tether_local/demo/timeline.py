"""The timeline: what a job's stored state says happened, as lines a person reads.

`JobTimeline.feed(view)` says each new timeline event of the job once, with its kind as the
source (rented, dead, replaced, finished…), and "generation N training[ from step S]" once per
generation, when its first training heartbeat is seen. The demo's run feeds it its job
(`tether_local.demo.run.DemoRun.poll`); `StackTimeline` feeds it every job of a stack, which is
what `tether local up` shows.
"""

from __future__ import annotations

import time
from typing import Protocol

from functions.adapters.store import JobStore, JobView
from functions.domain.job import is_terminal


class Timeline(Protocol):
    def __call__(self, elapsed_s: float, source: str, text: str) -> None: ...


def quiet(elapsed_s: float, source: str, text: str) -> None:
    """A timeline that shows nothing (tests, --json)."""


class JobTimeline:
    """One job's lines; `started_at` (epoch seconds) is the timeline's zero."""

    def __init__(self, timeline: Timeline, started_at: float, *, prefix: str = "") -> None:
        self.timeline = timeline
        self.started_at = started_at
        self.prefix = prefix
        self._seen_events: set[str] = set()
        self._training: set[int] = set()
        self._restored: dict[int, int] = {}

    def feed(self, view: JobView, now: float | None = None) -> list[int]:
        """Say what is new in `view`; returns the generations first seen training now."""
        now = time.time() if now is None else now
        for event in view.events:
            if event.event_id not in self._seen_events:
                self._seen_events.add(event.event_id)
                self.timeline(event.at - self.started_at, event.kind, self.prefix + event.message)
        started = []
        for g in view.generations:
            hb = g.heartbeat
            if hb is None:
                continue
            if hb.restored_checkpoint is not None:
                self._restored.setdefault(g.generation, hb.restored_checkpoint.step)
            if hb.phase == "training" and g.is_current and g.generation not in self._training:
                self._training.add(g.generation)
                step = self._restored.get(g.generation)
                restored = f" from step {step}" if step else ""
                self.timeline(
                    now - self.started_at,
                    "agent",
                    f"{self.prefix}generation {g.generation} training{restored}",
                )
                started.append(g.generation)
        return started


class StackTimeline:
    """Every job of a stack's table: `poll()` feeds each job that is new or not yet ended (the
    newest `newest` jobs), each line prefixed with its job id."""

    def __init__(
        self, store: JobStore, timeline: Timeline, started_at: float, *, newest: int = 20
    ) -> None:
        self.store = store
        self.timeline = timeline
        self.started_at = started_at
        self.newest = newest
        self._jobs: dict[str, JobTimeline] = {}
        self._terminal: set[str] = set()  # seen ended once: fed one more time, then dropped
        self._ended: set[str] = set()

    def poll(self) -> None:
        for job in self.store.list_jobs(limit=self.newest).jobs:
            if job.job_id in self._ended:
                continue
            lines = self._jobs.get(job.job_id)
            if lines is None:
                lines = JobTimeline(self.timeline, self.started_at, prefix=f"{job.job_id} ")
                self._jobs[job.job_id] = lines
            view = self.store.get_job_view(job.job_id, max_events=1000)
            if view is None:
                continue
            lines.feed(view)
            if is_terminal(view.job.state):
                if job.job_id in self._terminal:
                    self._ended.add(job.job_id)
                self._terminal.add(job.job_id)


__all__ = ["JobTimeline", "StackTimeline", "Timeline", "quiet"]
