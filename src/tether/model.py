"""The nouns every layer shares: job states, attempt outcomes, and the records
the store hands up. Plain dataclasses (one named tuple), no behaviour, no
imports from above."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from .jobid import DuplicateJobId, JobId, job_id
from .schedule_model import FiredTick, ScheduleInfo, ScheduleSpec

__all__ = [
    "ACTIVE_STATES",
    "FINISHED_STATES",
    "LIVE_WITHIN",
    "MAX_ATTEMPTS_SHOWN",
    "MAX_HANDBACKS",
    "OUTCOME_FACTS",
    "STATE_FACTS",
    "STATS_WORKERS",
    "TERMINAL_STATES",
    "Attempt",
    "Beat",
    "Buried",
    "ClaimedJob",
    "DuplicateJobId",
    "FiredTick",
    "Job",
    "JobId",
    "JobState",
    "NewJob",
    "Outcome",
    "OutcomeFacts",
    "Reaped",
    "ScheduleInfo",
    "ScheduleSpec",
    "StateFacts",
    "Stats",
    "Throughput",
    "UnknownTaskJobs",
    "WorkerInfo",
    "job_id",
]

#: a worker last seen this many seconds ago or less counts as live when the
#: store judges which tasks a live worker knows (`Stats.unknown`): six missed
#: beats at the default heartbeat interval (10 s)
LIVE_WITHIN = 60.0
#: the most attempts ``get_job`` returns with a job: the newest (the rest are
#: counted in ``Job.older_attempts``), so that a job snoozed or failed a
#: thousand times is not a megabytes-long read on every look at it
MAX_ATTEMPTS_SHOWN = 50
#: the hand-backs (snoozes, graceful releases) that leave a job's budget
#: alone: past them a snooze (``tether.Retry``) spends the budget as a failure
#: does (issue 41: one job was snoozed 300 times in 2 s)
MAX_HANDBACKS = 1000
#: the most workers ``Stats.workers`` lists (the most recently seen; the rest are counted)
STATS_WORKERS = 100


class JobState(enum.StrEnum):
    #: a workflow step or batch callback whose dependencies have not all ended:
    #: no claim takes it; the ending of its last dependency releases it (I9)
    WAITING = "waiting"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Finished: the job never runs again unless an operator retries it (and a pruner may delete it)."""
        return STATE_FACTS[self].terminal

    @property
    def style(self) -> str:
        """How a terminal shows it (a rich style); the dashboard's class is ``s-<state>``."""
        return STATE_FACTS[self].style

    @property
    def retention(self) -> str | None:
        """A finished state's default retention (``7d``: a pruner deletes such jobs a week after they
        finished; None: kept); None for a state that is not finished."""
        return STATE_FACTS[self].retention

    @property
    def event(self) -> str | None:
        """The event an attempt's end sends when it leaves the job in this state (None: none)."""
        return STATE_FACTS[self].event


@dataclass(frozen=True, slots=True)
class StateFacts:
    terminal: bool
    style: str
    retention: str | None = None
    event: str | None = None


#: what each state means, for every face and the SQL that fills from it. The
#: finished states come in the order operators read them (retention settings,
#: prune summaries: FINISHED_STATES); JobState's own order is the display's.
STATE_FACTS: dict[JobState, StateFacts] = {
    JobState.WAITING: StateFacts(terminal=False, style="blue"),
    JobState.QUEUED: StateFacts(terminal=False, style="cyan", event="job.retried"),
    JobState.RUNNING: StateFacts(terminal=False, style="yellow"),
    JobState.SUCCEEDED: StateFacts(terminal=True, style="green", retention="7d", event="job.succeeded"),
    JobState.CANCELLED: StateFacts(terminal=True, style="magenta", retention="30d", event="job.cancelled"),
    JobState.DEAD: StateFacts(terminal=True, style="bold red", retention="30d", event="job.dead"),
}
#: the finished states, in the order operators read them (retention, prune summaries)
FINISHED_STATES = tuple(s for s in STATE_FACTS if STATE_FACTS[s].terminal)
ACTIVE_STATES = frozenset(s for s in JobState if not s.terminal)
TERMINAL_STATES = frozenset(FINISHED_STATES)


class Outcome(enum.StrEnum):
    """How one attempt ended; one audit record each (``Job.attempts``)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LEASE_EXPIRED = "lease_expired"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    RELEASED = "released"
    #: the handler raised ``tether.Retry(delay)``: queued again later, budget not spent
    SNOOZED = "snoozed"
    #: the handler raised ``tether.Discard(reason)``: dead at once
    DISCARDED = "discarded"
    #: never started: its expiry (``using(expires=...)``) passed while it was queued;
    #: the job ends cancelled (the expiry service, worker/expiry.py)
    EXPIRED = "expired"

    @property
    def failure(self) -> bool:
        """The attempt failed (raised, timed out, was lost with its worker, or discarded)."""
        return _outcome_facts(self).failure

    @property
    def error(self) -> bool:
        """The attempt ended in an error its job's result shows (a failure, or a cancellation)."""
        return _outcome_facts(self).error

    @property
    def counts(self) -> bool:
        """The attempt counts against the job's ``max_attempts`` (a release or a snooze does not)."""
        return _outcome_facts(self).counts

    @property
    def style(self) -> str:
        """How a terminal shows it (a rich style); the dashboard's class is ``o-<outcome>``."""
        return _outcome_facts(self).style

    @property
    def label(self) -> str:
        """The outcome in words: ``timed out``."""
        return self.value.replace("_", " ")

    @classmethod
    def read(cls, value: str) -> Outcome:
        """An outcome as a store or a server wrote it. One this release does not
        know (a newer release's) is kept as it is, a value beside the members
        (not in ``list(Outcome)``) with no facts: shown plainly, neither a
        success nor a failure, so that an older client still reads the record."""
        try:
            return cls(value)
        except ValueError:
            pass
        found = _UNKNOWN_OUTCOMES.get(value)
        if found is None:
            found = str.__new__(cls, value)
            found._value_ = value
            found._name_ = value.upper()
            found = _UNKNOWN_OUTCOMES.setdefault(value, found)
        return found


@dataclass(frozen=True, slots=True)
class OutcomeFacts:
    style: str
    #: the attempt failed (chart: the failed part of a bar)
    failure: bool = False
    #: the job's result shows it as an error (a failure or a cancellation)
    error: bool = False
    #: it counts against the job's max_attempts
    counts: bool = True


#: what each outcome means
OUTCOME_FACTS: dict[Outcome, OutcomeFacts] = {
    Outcome.SUCCEEDED: OutcomeFacts(style="green"),
    Outcome.FAILED: OutcomeFacts(style="red", failure=True, error=True),
    Outcome.LEASE_EXPIRED: OutcomeFacts(style="bold red", failure=True, error=True),
    Outcome.TIMED_OUT: OutcomeFacts(style="red", failure=True, error=True),
    Outcome.CANCELLED: OutcomeFacts(style="magenta", error=True),
    Outcome.RELEASED: OutcomeFacts(style="dim", counts=False),
    Outcome.SNOOZED: OutcomeFacts(style="cyan", counts=False),
    Outcome.DISCARDED: OutcomeFacts(style="bold red", failure=True, error=True),
    Outcome.EXPIRED: OutcomeFacts(style="dim magenta", error=True, counts=False),
}
#: the facts of an outcome this release does not know (Outcome.read)
_NO_FACTS = OutcomeFacts(style="")
_UNKNOWN_OUTCOMES: dict[str, Outcome] = {}


def _outcome_facts(outcome: Outcome) -> OutcomeFacts:
    return OUTCOME_FACTS.get(outcome, _NO_FACTS)


class Beat(enum.StrEnum):
    """What a heartbeat learned about one job."""

    RENEWED = "renewed"
    #: the fence failed (this attempt no longer owns the job), or the attempt is
    #: at or past its timeout deadline, where no lease is left to renew
    LOST = "lost"
    CANCEL_REQUESTED = "cancel_requested"  # renewed, and someone asked to cancel


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job as the enqueue API hands it to the store (args already JSON text)."""

    task: str
    args_json: str
    queue: str = "default"
    priority: int = 0
    run_at: datetime | None = None
    delay: float = 0.0
    max_attempts: int = 3
    lease_ttl: float | None = None
    timeout: float | None = None
    backoff_base: float = 2.0
    dedup_key: str | None = None
    meta_json: str | None = None
    #: at most one job with this key runs at a time (the others wait queued)
    exclusive_key: str | None = None
    #: the producer's tracing context as a JSON object (otel.py), not the user's meta
    trace_json: str | None = None
    #: the job's tags as a JSON array of strings (payload.check_tags); None: none
    tags_json: str | None = None
    #: the job ``app.rerun()`` copied
    rerun_of: int | None = None
    #: seconds the dedup_key stays taken after the job ended (None: freed at its end)
    dedup_for: float | None = None
    #: a job not started by then is never started: it ends cancelled, outcome expired
    expires_at: datetime | None = None
    #: the key its per-key limits are counted under (``app.configure_limit``); None: none
    limit_key: str | None = None


class ClaimedJob(NamedTuple):
    """One row a claim returned: the attempt token and what the handler needs.

    A named tuple, not a frozen dataclass like the records around it: a claim
    builds one per job on every worker round, and a tuple is built from its
    row in one step, where a frozen dataclass sets each of its twelve fields
    through ``object.__setattr__`` (0.8 us a job, about a twentieth of a
    worker's CPU per no-op job on PostgreSQL).
    """

    id: int
    attempt: int
    task: str
    args: dict[str, Any]
    queue: str
    priority: int
    max_attempts: int
    lease_ttl: float
    timeout: float | None
    claimed_at: datetime
    meta: dict[str, Any] | None = None
    #: when the job was due (its queue wait is claimed_at - run_at)
    run_at: datetime | None = None
    #: the schedule tick this job was fired for (UTC); None if not from a schedule
    scheduled_for: datetime | None = None
    #: the producer's tracing context (otel.py); None: none, or an older producer's, in meta
    trace: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    job_id: int
    attempt: int
    worker: str
    claimed_at: datetime
    finished_at: datetime | None  # None for the attempt still running
    outcome: Outcome | None  # None for the attempt still running
    error: str | None = None
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    queue: str
    task: str
    args: dict[str, Any]
    state: JobState
    priority: int
    run_at: datetime
    attempt: int
    released: int
    max_attempts: int
    lease_ttl: float | None
    timeout: float | None
    dedup_key: str | None
    locked_by: str | None
    claimed_at: datetime | None
    lease_until: datetime | None
    cancel_requested: bool
    progress: float | None
    progress_message: str | None
    result: Any
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None
    meta: dict[str, Any] | None = None
    #: the schedule and tick that fired this job; None for a job enqueued any other way
    schedule: str | None = None
    scheduled_for: datetime | None = None
    attempts: list[Attempt] = field(default_factory=list)
    #: at most one job with this key runs at a time (``.using(exclusive_key=...)``)
    exclusive_key: str | None = None
    #: the producer's tracing context (otel.py)
    trace: dict[str, Any] | None = None
    #: the job's tags (``.using(tags=...)`` and the task's); None: none
    tags: list[str] | None = None
    #: the job ``app.rerun()`` copied; None: not a rerun
    rerun_of: int | None = None
    #: seconds its dedup_key stays taken after it ended (None: none, or released)
    dedup_for: float | None = None
    #: not started by then, it is never started (``using(expires=...)``)
    expires_at: datetime | None = None
    #: the key its per-key limits count it under (``using(limit_key=...)``)
    limit_key: str | None = None
    #: attempts older than those in ``attempts``, which ``get_job`` leaves out:
    #: it gives the newest ``MAX_ATTEMPTS_SHOWN`` (issue 41)
    older_attempts: int = 0

    @property
    def attempts_used(self) -> int:
        """Claims that counted against ``max_attempts`` (graceful releases do not)."""
        return self.attempt - self.released


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """A queue's limits (``app.configure_queue``) and what counts against them now."""

    queue: str
    #: at most this many of its jobs running at once; None: no limit
    concurrency: int | None = None
    #: at most ``rate_limit`` jobs started in any ``rate_period`` seconds; None: no limit
    rate_limit: int | None = None
    rate_period: float | None = None
    #: its jobs running now (a dead worker's among them until the reaper ends them)
    running: int = 0
    #: its jobs started within the last ``rate_period`` seconds
    started: int = 0


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """A limit-key pattern's limits (``app.configure_limit``), each matching
    key's own, and what counts against them now, summed over its keys."""

    pattern: str
    #: at most this many jobs of one key running at once; None: no limit
    concurrency: int | None = None
    #: at most ``rate_limit`` jobs of one key started in any ``rate_period`` seconds
    rate_limit: int | None = None
    rate_period: float | None = None
    #: the keys this pattern governs (their best match) with a job running or a start in the window
    keys: int = 0
    #: those keys' jobs running now, and the most of any one key
    running: int = 0
    busiest: int = 0
    #: those keys' starts within the last ``rate_period`` seconds
    started: int = 0


@dataclass(frozen=True, slots=True)
class Limits:
    """``app.limits()``: the queues' limits and the key patterns', with their use now."""

    queues: list[QueueLimits]
    keys: list[KeyLimits]


@dataclass(frozen=True, slots=True)
class DueJob:
    """A queued, due job that a transport sweep should (re)publish."""

    id: int
    queue: str
    attempt: int
    run_at: datetime


@dataclass(frozen=True, slots=True)
class Reaped:
    """One job the reaper took back from a lapsed lease."""

    id: int
    attempt: int
    worker: str
    outcome: Outcome  # LEASE_EXPIRED or TIMED_OUT
    state: JobState  # where it went: queued (retry), dead or cancelled
    queue: str = ""  # the job's queue, so a transport can republish it
    #: the lease that lapsed: the database's last renewal was lease_until - ttl
    lease_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    id: str
    host: str
    pid: int
    proc_start: int | None
    started_at: datetime
    last_seen: datetime
    queues: list[str]
    concurrency: int
    stopped_at: datetime | None = None
    #: the task names the worker has handlers for, sorted; None for a worker
    #: registered by a tether that did not record them (it claims any task)
    tasks: list[str] | None = None


@dataclass(frozen=True, slots=True)
class UnknownTaskJobs:
    """Queued, due jobs of one task on one queue that no live worker knows
    (no worker seen in the last ``LIVE_WITHIN`` seconds serves the queue with
    a handler of that name): they wait, their budget untouched, until one does."""

    queue: str
    task: str
    jobs: int
    oldest: datetime  # run_at of the longest-waiting one


@dataclass(frozen=True, slots=True)
class Buried:
    """A job a service ended without running it: dead, as no worker knew its
    task for the grace period (worker/unknown.py), or cancelled, expired
    (worker/expiry.py)."""

    id: int
    queue: str
    task: str
    error: str


@dataclass(frozen=True, slots=True)
class Stats:
    counts: dict[tuple[str, str], int]  # (queue, state) -> jobs
    oldest_queued: dict[str, datetime]  # queue -> run_at of the oldest due job
    workers: list[WorkerInfo]
    now: datetime
    #: due jobs whose task no live worker knows, by (queue, task)
    unknown: list[UnknownTaskJobs] = field(default_factory=list)
    #: how many workers are not stopped; ``workers`` holds the most recently
    #: seen of them, at most ``STATS_WORKERS`` (None: a server of an older
    #: release, which listed them all)
    workers_total: int | None = None


@dataclass(frozen=True, slots=True)
class Throughput:
    """Attempts that ended in one time bucket ``[start, start + seconds)``, by
    outcome; every outcome is a key, zero or not."""

    start: datetime
    seconds: int
    counts: dict[Outcome, int]
