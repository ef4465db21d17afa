"""The transport sweep: the database stays the source of truth.

With a transport that carries job ids (NATS), a job reaches a worker only if
its message does. A publish can fail after the database committed the job, a
message can be lost with a stream, and nothing publishes a delayed job or a
retry when its time comes. So every worker, every ``sweep_interval``, asks the
database for due queued jobs on its queues that no delivery seems to carry
(``Store.due_unclaimed``) and republishes them. Every worker finding the same
job is harmless: the sweep's message id is the same for all of them within
one ``sweep_grace`` period, and JetStream keeps one copy within its duplicate
window. The next period's id differs, so a job that stays queued is published
again once a period (a job whose claim held it back for its queue's limit or
its exclusive key: its message was acked).

A queue whose consumer still holds undelivered messages (``Transport.undelivered``)
is not swept: under a backlog its jobs wait longer than ``sweep_grace`` only
because the messages ahead of theirs are still being delivered, and
republishing them (up to ``limit`` a tick per worker) made the claims refuse
or repeat as many again (issue 22: twice PostgreSQL's CPU per job). The sweep
is for jobs no delivery carries; it finds them once the backlog is through:
a job whose message was lost is still republished once deliveries stop.
(The same wait holds for a delivered job a claim refused for its queue's
limits or its exclusive key: its next delivery is the sweep's, once its
queue's messages are through.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from ..errors import ConfigError
from ..store import Store
from ..transport import Transport
from .service import PeriodicService

__all__ = ["SWEEP_LIMIT", "Sweeper"]

#: jobs republished per sweep, oldest (in claim order) first
SWEEP_LIMIT = 500


class Sweeper(PeriodicService):
    name: ClassVar[str] = "sweeper"

    def __init__(self, store: Store, transport: Transport, queues: Sequence[str], *, limit: int = SWEEP_LIMIT) -> None:
        if not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"sweep limit must be an int >= 1, got {limit!r}")
        # Its first tick waits a whole interval: at start the transport has only
        # just been connected, and the worker claims from the database first anyway.
        super().__init__(transport.sweep_interval, spread_start=False)
        self.store = store
        self.transport = transport
        self.queues = list(queues)
        self.limit = limit
        self.total = 0
        #: ticks that left a queue out because its messages were still being delivered
        self.skipped = 0

    def first_wait(self) -> float:
        return self.next_wait(0.0)

    def run_once(self) -> int:
        """Republish what is due and undelivered; returns how many the transport took."""
        if not self.transport.healthy:
            return 0
        backlog = self.transport.undelivered(self.queues)
        queues = [q for q in self.queues if not backlog.get(q)]
        if len(queues) < len(self.queues):
            self.skipped += 1
            if not queues:
                return 0
        due = self.store.due_unclaimed(queues, grace=self.transport.sweep_grace, limit=self.limit)
        if not due:
            return 0
        sent = self.transport.publish_due(due)
        self.total += sent
        if sent:  # the rest were already in the stream (another sweep's copy)
            self.log.info("sweep: published %d due job(s) that no delivery carried (of %d found: ids %s%s)", sent,
                     len(due), ", ".join(str(d.id) for d in due[:10]), ", ..." if len(due) > 10 else "")
        return sent
