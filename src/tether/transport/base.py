"""The transport seam: how job ids reach workers.

**Internal**: this interface may change between releases without notice.

A transport only *delivers*; the database *owns*. Whatever a transport hands
a worker (an id, twice, late, after the job ran) leads at most to a fenced
claim of that one job (``Store.claim_ids``), which the database refuses when
the job is held, finished or not due. So a transport may lose or repeat
messages without breaking the contract: the worker's database claim path and
the sweep cover what it loses, the claim refuses what it repeats.

Two kinds exist: the database itself (polling, with PostgreSQL's
LISTEN/NOTIFY as a wake-up; ``DatabaseTransport``) and NATS JetStream
(``tether.transport.nats.NatsTransport``), which carries job ids itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..config import Timers
from ..model import DueJob, NewJob
from ..store import Listener, Store

__all__ = ["DatabaseTransport", "Delivery", "Transport", "announce", "due_now"]

log = logging.getLogger("tether.transport")


@dataclass(eq=False)
class Delivery:
    """One message a transport handed a worker: a job id, maybe a repeat."""

    job_id: int
    queue: str
    #: republished by recovery (reaper, start-up reconciliation, sweep, release)
    retry: bool = False
    #: the transport's own handle, to acknowledge the message with
    handle: object = field(default=None, repr=False)


class Transport:
    """The base is the null transport: it delivers nothing and publishes nothing."""

    #: how the worker's log and ``tether status`` name it
    name: str
    #: True when the transport carries job ids itself (workers claim by id)
    delivers: bool = False
    #: with a delivering transport up, the worker still claims from the database
    #: this often (seconds): the backstop for anything the transport dropped
    fallback_interval: float = 30.0
    #: how often the sweep republishes due jobs nothing carries (seconds)
    sweep_interval: float = 1.0
    #: how long a due job may wait for its delivery before the sweep republishes
    #: it, and how often the sweep republishes a job that stays queued
    sweep_grace: float = 5.0

    def check(self, timers: Timers) -> None:
        """Refuse timers this transport cannot work with (ConfigError)."""

    def wake(self, store: Store, on_enqueue: Callable[[str], None]) -> Listener | None:
        """A push channel that nudges an idle claimer; None: poll only."""
        return None

    @property
    def healthy(self) -> bool:
        """True while deliveries flow; otherwise the worker polls the database."""
        return False

    def ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the transport to come up (blocking)."""
        return self.healthy

    def publish(self, jobs: Sequence[tuple[int, str]], *, retry: bool = False) -> int:
        """Announce these (job id, queue) pairs; returns how many the transport
        accepted. Never raises: a lost publish is repaired by the sweep."""
        return 0

    def publish_due(self, due: Sequence[DueJob]) -> int:
        """The sweep's republish of due jobs nothing seems to carry."""
        return 0

    def undelivered(self, queues: Sequence[str]) -> dict[str, int]:
        """Blocking, from any thread but the transport's own: how many messages
        each of these queues holds that no worker has been handed yet (the
        backlog its deliveries are still working through). A queue it cannot
        tell about is left out."""
        return {}

    def start(self, queues: Sequence[str]) -> None:
        """Begin consuming these queues (each worker calls this once; workers
        sharing an app share its transport, so the queues add up)."""

    async def stop(self, queues: Sequence[str]) -> None:
        """The worker that called ``start`` is done with these queues: called
        on its event loop as it stops, before that loop ends (a transport may
        run its client on the worker's loop, and must hand it off now)."""

    async def fetch(self, limit: int, timeout: float, queues: Sequence[str]) -> list[Delivery]:
        """Up to ``limit`` deliveries for ``queues``, waiting at most ``timeout`` seconds for the first."""
        return []

    def fetch_buffered(self, limit: int, queues: Sequence[str]) -> list[Delivery]:
        """``fetch`` without waiting: what the transport holds now (none by default)."""
        return []

    def ack(self, delivery: Delivery) -> None:
        """The database has recorded what became of this delivery's job."""

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        """``ack`` each, in one step where the transport can."""
        for delivery in deliveries:
            self.ack(delivery)

    def nak(self, delivery: Delivery) -> None:
        """Hand this delivery back for another worker at once."""

    def destroy(self) -> None:
        """Remove what this transport created on its server (``tether chaos``
        cleans up its scratch stream with it). Irreversible."""

    def close(self) -> None:
        """Stop and release connections; idempotent."""


class DatabaseTransport(Transport):
    """No broker: workers claim from the database, woken by LISTEN/NOTIFY on
    PostgreSQL (``listen=True``, the default) and by polling otherwise."""

    def __init__(self, *, listen: bool = True) -> None:
        self.listen = listen
        self.name = "notify" if listen else "poll"

    def wake(self, store: Store, on_enqueue: Callable[[str], None]) -> Listener | None:
        return store.listen(on_enqueue) if self.listen else None


def due_now(jobs: Sequence[NewJob], ids: Sequence[int]) -> list[tuple[int, str]]:
    """What an enqueue announces: the (id, queue) of each job due at once. A
    delayed job is published by the sweep when it becomes due (a message for
    it now would only be refused by the claim and acked)."""
    return [(i, j.queue) for i, j in zip(ids, jobs, strict=True) if j.run_at is None and j.delay <= 0]


def announce(transport: Transport, jobs: Sequence[tuple[int, str]], *, retry: bool = False) -> int:
    """Publish jobs that the database has *committed* as queued and due, so that
    a delivering transport's workers hear of them now rather than at the next
    sweep. Every path that makes such a job outside a worker comes here after
    its commit: enqueue (app, ``tether enqueue``, ``tether server``) and retry
    (``app.retry``, ``tether retry``, the dashboard, ``tether server``).

    Never raises: the job is in the database whatever becomes of its message
    (the sweep publishes what no message carries), so a publish that fails, or
    a transport that breaks its own never-raise promise, must not fail or undo
    the enqueue or retry that came first. Returns how many the transport took.
    """
    if not jobs or not transport.delivers:
        return 0
    try:
        return transport.publish(jobs, retry=retry)
    except Exception as exc:
        log.warning("publishing %d job(s) to %s failed (%s: %s); the sweep publishes them later", len(jobs),
                    transport.name, type(exc).__name__, exc)
        return 0
