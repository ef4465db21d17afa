"""Lifecycle events: hooks an application subscribes to with ``@app.on(name)``.

Hooks run inline, on whichever thread made the change (the producer's thread
for ``job.enqueued``, the worker's database threads for outcomes, the
heartbeat thread for ``job.lost`` and ``worker.heartbeat_error``), so keep them
quick. A hook that raises is logged and never breaks the worker. With nobody
subscribed, an emit site costs one attribute check: ``if events.active``.

After an attempt ends badly (failed, timed out, or its lease was recovered)
exactly one of ``job.retried``, ``job.dead`` or ``job.cancelled`` follows,
naming where the job went.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .errors import ConfigError
from .model import JobState, Outcome

__all__ = ["EVENT_NAMES", "Event", "EventHook", "Events"]

log = logging.getLogger("tether.events")

#: every event name, with what it means
EVENT_NAMES: dict[str, str] = {
    "job.enqueued": "a job was enqueued (or an active job with the same dedup key was found)",
    "job.started": "a worker claimed a job and started its handler",
    "job.succeeded": "a job's success was recorded",
    "job.failed": "an attempt raised or timed out",
    "job.retried": "after a failed, timed-out or recovered attempt, the job is queued for another",
    "job.dead": "the job ran out of attempts (or cannot succeed) and will not run again",
    "job.cancelled": "the job ended cancelled",
    "job.recovered": "the reaper took a job back from a lapsed lease; worker is the lost owner",
    "job.lost": "a worker learned that it no longer owns a job it was running",
    "worker.heartbeat_error": "a heartbeat statement failed",
    "workflow.finished": "every step of a workflow run has ended (once per run, from the process whose ending "
                         "ended its last step; again if a retry reopened it)",
    "batch.finished": "every member of a batch has ended and its callbacks were released (once per batch, from "
                      "the process whose ending ended its last member)",
}


@dataclass(frozen=True, slots=True)
class Event:
    """What happened. Fields that do not apply to an event are None."""

    name: str
    job_id: int | None = None
    attempt: int | None = None
    task: str | None = None
    queue: str | None = None
    #: the worker the event is about (for job.recovered: the worker whose lease lapsed)
    worker: str | None = None
    #: where the job went (job.failed, job.retried, job.dead, job.cancelled, job.recovered)
    state: JobState | None = None
    #: how the attempt ended
    outcome: Outcome | None = None
    error: str | None = None
    #: seconds the attempt ran, for events that end an attempt this worker ran
    duration: float | None = None
    #: seconds between the job being due and its claim (job.started)
    queue_wait: float | None = None
    #: the live exception the handler (or its middleware) raised, for the events
    #: of an attempt that raised in this worker (job.failed, then job.retried or
    #: job.dead); None where the worker has none: a timeout, a cancel, a lapsed
    #: lease (job.recovered), an event from another process
    exception: BaseException | None = field(default=None, repr=False, compare=False)
    #: the run (workflow.finished) or the batch (batch.finished)
    workflow_id: int | None = None
    batch_id: int | None = None
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


EventHook = Callable[[Event], object]


class Events:
    """The subscriptions of one app. Thread-safe to subscribe and emit."""

    def __init__(self) -> None:
        self._hooks: dict[str, tuple[EventHook, ...]] = {}
        self._lock = threading.Lock()
        #: True once anything subscribed; emit sites check it first
        self.active = False

    def on(self, name: str) -> Callable[[EventHook], EventHook]:
        """Decorator: ``@app.on("job.failed")``; ``"*"`` subscribes to every event."""
        _check_name(name)

        def register(hook: EventHook) -> EventHook:
            self.subscribe(name, hook)
            return hook

        return register

    def subscribe(self, name: str, hook: EventHook) -> None:
        _check_name(name)
        if not callable(hook):
            raise ConfigError(f"an event hook must be callable, got {hook!r}")
        with self._lock:
            self._hooks[name] = (*self._hooks.get(name, ()), hook)
            self.active = True

    def unsubscribe(self, name: str, hook: EventHook) -> None:
        with self._lock:
            self._hooks[name] = tuple(h for h in self._hooks.get(name, ()) if h is not hook)
            if not self._hooks[name]:
                del self._hooks[name]
            self.active = bool(self._hooks)

    def wants(self, name: str) -> bool:
        return name in self._hooks or "*" in self._hooks

    def emit(self, event: Event) -> None:
        """Call every hook for the event; a hook that raises is logged and skipped."""
        for hook in (*self._hooks.get(event.name, ()), *self._hooks.get("*", ())):
            try:
                hook(event)
            except Exception:
                log.exception("event hook %s for %s (job %s) raised; ignored", getattr(hook, "__qualname__", hook),
                              event.name, event.job_id,
                              extra={"job_id": event.job_id, "attempt": event.attempt, "task": event.task,
                                     "queue": event.queue, "worker": event.worker})


def _check_name(name: str) -> None:
    if name != "*" and name not in EVENT_NAMES:
        raise ConfigError(f"unknown event {name!r}; known: *, {', '.join(EVENT_NAMES)}")


def where_it_went(state: JobState, after: Outcome | None = None) -> str | None:
    """The one place that names the event saying where a statement sent a job
    (issue 48): job.succeeded, job.dead or job.cancelled when it ended, whoever
    ended it (a worker's report, the reaper, the unknown-task service, a
    cancel); job.retried when an attempt that ended badly (``after``: its
    outcome) sent it back to queued; None for anything else (a release, or no
    move at all). The names are the states' facts (``JobState.event``)."""
    if state is JobState.QUEUED and (after is None or after is Outcome.RELEASED):
        return None
    return state.event


def ending_event(state: JobState) -> str:
    """``where_it_went`` for a job that ended in ``state``, a terminal one."""
    name = where_it_went(state)
    if name is None or not state.terminal:
        raise ValueError(f"a job does not end {state}")
    return name
