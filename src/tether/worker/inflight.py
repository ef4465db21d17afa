"""The jobs a worker holds right now, shared by the event loop and the
heartbeat threads.

Only the event loop adds and removes (a claim, an outcome written), once per
job on a worker's hottest path, so those take no lock: a dict's own set and
delete are single steps. The heartbeat threads read snapshots (``_snapshot``),
and a renewal, which reads and then writes a deadline from the heartbeat's or a
handler's thread, takes the lock."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from ..context import JobContext
from ..model import ClaimedJob
from ..transport import Delivery

__all__ = ["Handle", "InFlight", "Running"]


class Handle(Protocol):
    """What the executor needs of a running handler: an asyncio task, or a
    ``def`` handler's ``pool.ThreadCall``."""

    def done(self) -> bool: ...

    def cancel(self, msg: Any = None) -> bool: ...


@dataclass(eq=False, slots=True)
class Running:
    job: ClaimedJob
    ctx: JobContext
    #: monotonic time when our lease lapses unless renewed; past it we fence ourselves
    local_deadline: float
    #: monotonic time the attempt was taken on here (its claim was sent), and
    #: from its handler's start the time that started (for its duration)
    started: float
    #: monotonic end of the attempt's timeout, if it has one
    hard_deadline: float | None = None
    #: the running handler: an asyncio task, or a def handler's ThreadCall
    handler: Handle | None = None
    #: set when this attempt no longer owns the job; its report is skipped
    lost: bool = False
    #: a def handler's thread ran on after its attempt ended (timed out, lost,
    #: shut down): the slot stays taken until it returns (pool.ThreadCall)
    slot_kept: bool = False
    #: set when the fence found the attempt at its timeout (heartbeat.fence_overdue):
    #: its handler is being told, and its outcome will say timed_out
    timing_out: bool = False
    #: set when the handler has finished: from then on its outcome's report,
    #: not the heartbeat, decides whether the attempt lost the job (a "lost"
    #: beat may be that report's own write, whose answer never arrived)
    reporting: bool = False
    #: the transport message that led to this claim, acked once the outcome is written
    delivery: Delivery | None = None
    #: the attempt's OpenTelemetry span, when the app is instrumented (tether.otel)
    span: Any = None
    #: how the attempt ended here, for its span: (outcome, error, job state); first one wins
    ended: tuple[str, str | None, str | None] | None = None
    #: ctx.transaction() was opened (once per attempt), and while its block runs
    tx_opened: bool = False
    in_block: bool = False
    #: monotonic time the commit of ctx.transaction() was sent, once it has
    #: committed: the success is written, only the result is left to write
    settled: float | None = None
    #: ctx.transaction_on(): monotonic time its block wrote the success into
    #: the caller's transaction, until the caller says how the commit went
    joined_written: float | None = None
    #: its def handler runs in a child process (isolation="process"), killed when the attempt ends
    isolated: bool = False
    #: what the handler raised, when its failure is being reported (the events' ``exception``)
    exception: BaseException | None = None


class InFlight(dict[int, Running]):
    """Job id -> its attempt here. A dict itself, so that the loop's per-job
    lookups and ``len()`` are the dict's own C calls."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def add(self, running: Running) -> None:
        """The event loop only."""
        self[running.job.id] = running

    def remove(self, running: Running) -> None:
        """The event loop only (the one writer: the check and the delete are not raced)."""
        job_id = running.job.id
        if self.get(job_id) is running:
            del self[job_id]

    def all(self) -> list[Running]:
        return self._snapshot()

    def _snapshot(self) -> list[Running]:
        """Every entry, read from any thread while the loop adds and removes.
        Copying a dict's values runs no Python code, so the loop cannot change
        it midway, except when the copy's allocation sets off a garbage
        collection whose finalizers let the loop run: then the copy raises,
        and we copy again."""
        while True:
            try:
                return list(self.values())
            except RuntimeError:  # "dictionary changed size during iteration"
                continue

    def held(self) -> list[tuple[int, int]]:
        """(id, attempt) of every job still ours, for the heartbeat."""
        return [(r.job.id, r.job.attempt) for r in self._snapshot() if not r.lost and r.settled is None]

    def renewed(self, job_id: int, attempt: int, sent_at: float) -> None:
        """A renewal sent at ``sent_at`` (monotonic) succeeded. The database set
        lease_until = its now() + ttl, and its now() came after we sent, so
        sent_at + ttl is a deadline that never outlives the real lease."""
        with self._lock:
            r = self.get(job_id)
            if r is not None and r.job.attempt == attempt:
                deadline = sent_at + r.job.lease_ttl
                if r.hard_deadline is not None:
                    deadline = min(deadline, r.hard_deadline)
                r.local_deadline = max(r.local_deadline, deadline)

    def overdue(self, now: float) -> list[Running]:
        return [r for r in self._snapshot()
                if not r.lost and not r.reporting and not r.timing_out and r.local_deadline <= now]
