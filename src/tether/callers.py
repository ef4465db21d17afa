"""Enqueue on the caller's connection: the app's side of it (issue 19).

``Task.using(connection=conn)`` and ``app.enqueue(name, connection=conn)``
write through here instead of through tether's own connections:
``store/caller.py`` finds the driver connection (SQLAlchemy unwrapped
without importing it), and ``Store.enqueue_on`` runs the usual enqueue
statements on it without committing.

Nothing is committed here, so nothing is published now either (a transport
could announce a job that then rolls back, or before its commit is visible).
A SQLAlchemy Session says when it has committed, and the jobs are published
then; psycopg, sqlite3 and a SQLAlchemy Connection have no after-commit
hook, and with NATS the workers' sweep publishes such a job once it has been
due for the transport's ``sweep_grace``. On PostgreSQL without NATS, the
enqueue trigger's NOTIFY is part of the caller's transaction: sent at its
commit.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Protocol

from .model import JobId, NewJob
from .store import Store
from .store.caller import after_commit, driver_connection, driver_connection_async
from .transport import Transport, announce, due_now

__all__ = ["write_on", "write_on_async"]


class Producer(Protocol):
    """What of ``Tether`` these need (``Tether`` satisfies it without being named)."""

    _store: Store | None
    transport: Transport

    @property
    def store(self) -> Store: ...

    def _enqueued(self, jobs: list[NewJob], ids: list[JobId]) -> None: ...


def _announce_at_commit(app: Producer, connection: object, jobs: list[NewJob], ids: list[JobId]) -> None:
    due = due_now(jobs, ids) if app.transport.delivers else []
    if due:
        after_commit(connection, partial(announce, app.transport, due))


def write_on(app: Producer, connection: object, jobs: list[NewJob]) -> list[JobId]:
    ids = app.store.enqueue_on(driver_connection(connection), jobs)
    app._enqueued(jobs, ids)
    _announce_at_commit(app, connection, jobs, ids)
    return ids


async def write_on_async(app: Producer, connection: object, jobs: list[NewJob]) -> list[JobId]:
    conn = await driver_connection_async(connection)
    store = app._store
    if store is None:  # opening it connects and waits: not on the event loop
        store = await asyncio.to_thread(lambda: app.store)
    ids = await store.enqueue_on_async(conn, jobs)
    app._enqueued(jobs, ids)
    _announce_at_commit(app, connection, jobs, ids)
    return ids
