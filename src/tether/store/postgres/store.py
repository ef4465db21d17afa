"""The PostgreSQL store: psycopg 3 with its connection pools.

Workers on many machines share one database; every ownership decision is a
statement below, and every statement is in ``queries.sql`` beside this file.
How the store connects (and what changes behind PgBouncer) is ``connect.py``;
the operations' statements, without I/O, are ``steps.py``; the LISTEN channel
is ``listener.py``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import ExecStatus

from ... import model
from ...config import DatabaseURL, redact_url
from ...errors import InvalidTransition, JobNotFound, SchemaMissing, StaleAttempt
from ...model import (
    MAX_ATTEMPTS_SHOWN,
    Attempt,
    Beat,
    ClaimedJob,
    DueJob,
    Job,
    JobId,
    JobState,
    NewJob,
    Outcome,
    Reaped,
    Stats,
)
from ...payload import stored_failure
from ..base import Listener, Store
from ..buckets import Buckets, fill, window
from ..columns import pg_macros
from ..rows import attempt_from_row, job_from_row, job_with_newest
from ..sqlfile import load_migrations, load_queries, migration_names
from ..worker_rows import DEFAULT_WORKER_RETENTION
from . import connect
from .connect import POOLED_POLL_INTERVAL, literal, net_defaults, open_connections, pooled, quote, warn_if_jit
from .control import PostgresControl
from .flows import FLOW_ANSWERS, PostgresWorkflows
from .ids import ClaimIdsMixin
from .listener import NotifyListener
from .many import PostgresMany
from .schedules import PostgresSchedules
from .steps import Rows, Steps, beats, claim_steps, complete_and_claim_steps, complete_steps, enqueue_steps
from .tx import TransactionsMixin
from .workers import PostgresWorkers

__all__ = ["PostgresStore"]

NOW = "coalesce(%(now)s::timestamptz, now())"
# Every process and schema uses its own advisory lock key for migrations.
_MIGRATE_LOCK = 0x7E7E_0001


#: A worker's per-round statements, whatever their size, are planned once (a
#: generic plan) on connections of their own, a delivering transport's claims
#: of ids too (planned every round, they cost PostgreSQL 0.02-0.03 ms more CPU
#: per job than a database claim); every other statement is planned for its
#: arguments. Planning complete_and_claim took 0.7 ms of a
#: 2.7-3.4 ms round trip at 10 jobs. A generic plan is the custom one here
#: (EXPLAIN at 100 and 200 jobs: the same nodes): a claim's LIMIT is a
#: parameter and every id it handles comes from its own index scan, and a
#: success's fence and result are looked up in one jsonb object by id, not
#: through a join that a plan made for unknown sizes could turn into a
#: quadratic loop, nor with array_position (quadratic whatever the plan).
#: Behind a transaction pooler nothing is prepared, so these too are planned
#: on every execution (see connect.py).
#: a schema missing, or behind the code (no table, function or column a statement names)
SCHEMA_BEHIND = (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName, pg_errors.UndefinedFunction,
                 pg_errors.UndefinedColumn)
GENERIC_PLANS = frozenset({"claim", "claim_known", "complete", "complete_and_claim", "complete_and_claim_known",
                           "claim_ids", "complete_and_claim_ids"})
# Their results come back in binary: a claim's two times (and its numbers)
# are read from their binary form in a fraction of the time it takes to parse
# their text (0.2 us a job, of about 10 in a worker's CPU per no-op job).

TUPLES_OK = ExecStatus.TUPLES_OK
T = TypeVar("T")


def _has_rows(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    """Whether the statement returned rows (a SELECT or a RETURNING), by its
    result's status: ``cur.description`` builds a list of column objects on
    every access, a cost paid on every round."""
    res = cur.pgresult
    return res is not None and res.status == TUPLES_OK


class PostgresStore(ClaimIdsMixin, PostgresWorkflows, PostgresSchedules, PostgresControl, PostgresMany, PostgresWorkers,
                    TransactionsMixin, Store):
    backend = "postgresql"
    # NOTIFY wakes idle workers at once; polling is only the fallback.
    default_poll_interval = 2.0
    # claims eight batches ahead: each round costs a round trip and a commit (docs/performance.md)
    prefetch_factor = 8

    def __init__(self, dsn: DatabaseURL, *, pool_size: int = 8) -> None:
        self.dsn = dsn
        self.schema = dsn.schema
        self.channel = f"tether_{dsn.schema}"
        #: where finished jobs' ids are announced (app.wait); cut to PostgreSQL's
        #: 63-byte limit: two schemas sharing a long prefix only wake each other's waiters
        self.done_channel = f"tether_done_{dsn.schema}"[:63]
        macros = {"schema": quote(dsn.schema), "now": NOW, "channel": literal(self.channel),
                  "done_channel": literal(self.done_channel)}
        # queries prepared on first use, migrations read by migrate: a start needs few (issue 47)
        self.q = load_queries(__package__ or "tether.store.postgres", "queries.sql", macros | pg_macros(), lazy=True)
        self._macros = macros
        if pooled(dsn):
            # behind a transaction pooler: LISTEN only on a direct URL, if given
            self.listen_url = dsn.options.get("listen_url")
            if self.listen_url is None:
                self.default_poll_interval = POOLED_POLL_INTERVAL
        else:
            self.listen_url = dsn.options.get("listen_url", dsn.url)
        conns = open_connections(dsn, pool_size=pool_size)
        self.pool = conns.pool
        #: for GENERIC_PLANS; connected on first use (only workers claim)
        self.round_pool = conns.round_pool
        #: for async calls, each event loop's own; round_async as round_pool
        self.async_connections = conns.async_connections
        self.round_async = conns.round_async

    # -- plumbing -----------------------------------------------------------------
    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        rounds = name in GENERIC_PLANS
        with (self.round_pool if rounds else self.pool).connection() as conn:
            try:
                cur = conn.execute(self.q[name], params or {}, binary=rounds)
            except SCHEMA_BEHIND:
                raise self._no_tables() from None
            rows = cur.fetchall() if _has_rows(cur) else []
        return self.flow_answer(rows) if name in FLOW_ANSWERS else rows

    async def _all_async(self, name: str, params: dict[str, Any]) -> Rows:
        """``_all`` on a connection of the running event loop's."""
        rounds = name in GENERIC_PLANS
        async with (self.round_async if rounds else self.async_connections).connection() as conn:
            try:
                cur = await conn.execute(self.q[name], params, binary=rounds)
            except SCHEMA_BEHIND:
                raise self._no_tables() from None
            rows = await cur.fetchall() if _has_rows(cur) else []
        return self.flow_answer(rows) if name in FLOW_ANSWERS else rows

    def round_connections(self, size: int) -> None:
        self.round_async.limit(size)
        # a worker asks before its start-up statements: its round connection
        # opens meanwhile, not inside its first claim (issue 47: start-up)
        self._warming = asyncio.get_running_loop().create_task(self.round_async.warm())

    def _no_tables(self) -> SchemaMissing:
        return SchemaMissing(f"tether's tables are missing from schema {self.schema!r} at {self._where()}, or are "
                             "behind the code: run `tether migrate`")

    def _where(self) -> str:
        """The database a SchemaMissing names (host, port and database; no
        password): `tether -d postgresql://` reaches whatever libpq's defaults say."""
        return redact_url(self.dsn.url) if self.dsn.url.rstrip("/") != "postgresql:" else "libpq's default database"

    def close(self) -> None:
        self._close_tx()
        self.round_async.close()
        self.async_connections.close()
        self.round_pool.close()
        self.pool.close()

    def db_now(self) -> datetime:
        value: datetime = self._all("db_now")[0][0]
        return value

    # -- schema -------------------------------------------------------------------
    @functools.cached_property
    def _migrations(self) -> list[tuple[int, str, str]]:
        """The migration files, read when ``migrate`` first needs them (a worker's start does not)."""
        return load_migrations(f"{__package__}.migrations", self._macros)

    def migrate(self) -> list[str]:
        applied: list[str] = []
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_MIGRATE_LOCK, self.schema))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(self.schema)}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {quote(self.schema)}.migrations ("
                "version integer PRIMARY KEY, name text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r[0] for r in conn.execute(f"SELECT version FROM {quote(self.schema)}.migrations")}
            for version, name, sql in self._migrations:
                if version in done:
                    continue
                conn.execute(sql.encode(), prepare=False)  # a script: many statements, no params
                conn.execute(
                    f"INSERT INTO {quote(self.schema)}.migrations (version, name) VALUES (%s, %s)",
                    (version, name),
                )
                applied.append(f"{version:04d}_{name}")
        return applied

    def destroy(self) -> None:
        with self.pool.connection() as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {quote(self.schema)} CASCADE")

    def check_schema(self) -> None:
        with self.pool.connection() as conn:  # one round trip: the versions applied and the JIT probe
            try:
                row = conn.execute(f"SELECT array(SELECT version FROM {quote(self.schema)}.migrations), "
                                   f"{connect.JIT_PROBE}").fetchone()
            except pg_errors.UndefinedTable:
                raise SchemaMissing(
                    f"no tether schema in PostgreSQL schema {self.schema!r} at {self._where()}: "
                    "run `tether migrate` first"
                ) from None
            assert row is not None
            warn_if_jit(conn, self.dsn, (row[1], row[2]))
        have = set(row[0])
        missing = [f"{v:04d}_{n}" for v, n in migration_names(f"{__package__}.migrations") if v not in have]
        if missing:
            raise SchemaMissing(f"tether schema {self.schema!r} at {self._where()} is behind ({', '.join(missing)} "
                                "not applied): run `tether migrate`")

    def schema_objects(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        with self.pool.connection() as conn:
            for table, column in conn.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = %s ORDER BY table_name, ordinal_position",
                (self.schema,),
            ):
                out.setdefault(f"table:{table}", []).append(column)
            for (name,) in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s ORDER BY indexname", (self.schema,)
            ):
                out.setdefault("indexes", []).append(name)
        return out

    # -- producers ----------------------------------------------------------------
    def _drive(self, steps: Steps[T]) -> T:
        """Run a sans-I/O operation's statements (see ``Steps``) on the pool."""
        try:
            step = next(steps)
            while True:
                step = steps.send(self._all(*step))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _drive_async(self, steps: Steps[T]) -> T:
        """``_drive`` on the running event loop's own connections: no thread hop."""
        try:
            step = next(steps)
            while True:
                step = steps.send(await self._all_async(*step))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def enqueue(self, jobs: Sequence[NewJob], *, now: datetime | None = None) -> list[JobId]:
        return self._drive(enqueue_steps(jobs, now))

    async def enqueue_async(self, jobs: Sequence[NewJob], *, now: datetime | None = None) -> list[JobId]:
        return await self._drive_async(enqueue_steps(jobs, now))

    def get_job(self, job_id: int) -> Job | None:
        # the row and its history from one snapshot (REPEATABLE READ): read
        # apart, an attempt ending in between showed in one and not the other
        with self.pool.connection() as conn, conn.transaction():
            try:
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                rows = conn.execute(self.q["get_job"], {"id": job_id}).fetchall()
                history = conn.execute(self.q["get_attempts_newest"],
                                       {"id": job_id, "limit": MAX_ATTEMPTS_SHOWN}).fetchall() if rows else []
            except SCHEMA_BEHIND:
                raise self._no_tables() from None
        return job_with_newest(rows[0], history) if rows else None

    def list_jobs(
        self, *, state: str | None = None, queue: str | None = None, task: str | None = None, limit: int = 50
    ) -> list[Job]:
        rows = self._all("list_jobs", {"state": state, "queue": queue, "task": task, "limit": limit})
        return [job_from_row(r, []) for r in rows]

    def recent_attempts(self, outcomes: Sequence[Outcome], *, limit: int = 50) -> list[Attempt]:
        rows = self._all("recent_attempts", {"outcomes": [str(o) for o in outcomes], "limit": limit})
        return [attempt_from_row(r) for r in rows]

    def throughput(self, *, buckets: int, bucket_seconds: int, now: datetime | None = None) -> Buckets:
        w = window(now or self.db_now(), buckets, bucket_seconds)
        return fill(w, self._all("throughput", {"start": w.start, "end": w.end, "bucket": w.seconds}))

    def cancel(self, job_id: int, *, now: datetime | None = None) -> JobState:
        rows = self._all("cancel", {"id": job_id, "now": now})
        if rows:
            return JobState(rows[0][0])
        return self._not_cancellable(job_id)

    def _not_cancellable(self, job_id: int) -> JobState:
        rows = self._all("job_state", {"id": job_id})
        if not rows:
            raise JobNotFound(f"no job {job_id}")
        raise InvalidTransition(f"job {job_id} is already {rows[0][0]}; a finished job cannot be cancelled")

    def retry(self, job_id: int, *, now: datetime | None = None) -> str:
        try:
            rows = self._all("retry", {"id": job_id, "now": now})
        except pg_errors.UniqueViolation:
            raise InvalidTransition(
                f"job {job_id} cannot be retried: another active job holds its dedup key"
            ) from None
        if rows:
            return str(rows[0][0])
        state = self._all("job_state", {"id": job_id})
        if not state:
            raise JobNotFound(f"no job {job_id}")
        raise InvalidTransition(f"job {job_id} is {state[0][0]}; only dead or cancelled jobs can be retried")

    def stats(self) -> Stats:
        counts = {(q, s): int(n) for q, s, n in self._all("counts")}
        oldest = {q: t for q, t in self._all("oldest_queued")}
        return Stats(counts=counts, oldest_queued=oldest, now=self.db_now(), unknown=self.unknown_tasks(),
                     workers=self.workers_page(live_only=True, limit=model.STATS_WORKERS),
                     workers_total=self.count_workers(live_only=True, since=DEFAULT_WORKER_RETENTION))

    # -- worker operations --------------------------------------------------------
    def claim(
        self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, *, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        return self._drive(claim_steps(worker, queues, limit, lease_ttl, now, tasks))

    async def claim_async(
        self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, *,
        executor: Executor | None = None, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        return await self._drive_async(claim_steps(worker, queues, limit, lease_ttl, now, tasks))

    def due_unclaimed(
        self, queues: Sequence[str], *, grace: float, limit: int, now: datetime | None = None
    ) -> list[DueJob]:
        rows = self._all("due_unclaimed", {"queues": list(queues), "grace": grace, "limit": limit, "now": now})
        return [DueJob(id=r[0], queue=r[1], attempt=r[2], run_at=r[3]) for r in rows]

    def heartbeat(
        self, worker: str, held: Sequence[tuple[int, int]], lease_ttl: float, *, now: datetime | None = None
    ) -> dict[int, Beat]:
        rows = self._all(
            "heartbeat",
            {
                "worker": worker,
                "ids": [i for i, _ in held],
                "attempts": [a for _, a in held],
                "lease_ttl": lease_ttl,
                "now": now,
            },
        )
        return beats(held, rows)

    def progress(
        self,
        worker: str,
        job_id: int,
        attempt: int,
        fraction: float | None,
        message: str | None,
        lease_ttl: float,
        *,
        now: datetime | None = None,
    ) -> bool:
        rows = self._all(
            "progress",
            {
                "worker": worker, "id": job_id, "attempt": attempt, "fraction": fraction,
                "message": message, "lease_ttl": lease_ttl, "now": now,
            },
        )
        if not rows:
            raise StaleAttempt(job_id, attempt, worker, "progress")
        return bool(rows[0][0])

    def complete(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], *, now: datetime | None = None
    ) -> set[int]:
        return self._drive(complete_steps(worker, done, now))

    async def complete_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], *,
        executor: Executor | None = None, now: datetime | None = None,
    ) -> set[int]:
        return await self._drive_async(complete_steps(worker, done, now))

    def complete_and_claim(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
        lease_ttl: float, *, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        return self._drive(complete_and_claim_steps(worker, done, queues, limit, lease_ttl, now, tasks))

    async def complete_and_claim_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
        lease_ttl: float, *, executor: Executor | None = None, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        return await self._drive_async(complete_and_claim_steps(worker, done, queues, limit, lease_ttl, now, tasks))

    def fail(
        self,
        worker: str,
        job_id: int,
        attempt: int,
        *,
        outcome: Outcome,
        error: str,
        traceback: str | None = None,
        retry: bool = True,
        now: datetime | None = None,
        delay: float | None = None,
    ) -> JobState:
        error, traceback = stored_failure(outcome is Outcome.SNOOZED, error, traceback)  # type: ignore[assignment]
        rows = self._all(
            "fail",
            {
                "worker": worker, "id": job_id, "attempt": attempt, "outcome": str(outcome),
                "error": error, "traceback": traceback, "retry": retry, "now": now, "delay": delay,
                "max_released": model.MAX_HANDBACKS,
            },
        )
        if not rows:
            raise StaleAttempt(job_id, attempt, worker, "fail")
        return JobState(rows[0][0])

    def release(self, worker: str, job_id: int, attempt: int, *, now: datetime | None = None) -> JobState:
        rows = self._all("release", {"worker": worker, "id": job_id, "attempt": attempt, "now": now})
        if not rows:
            raise StaleAttempt(job_id, attempt, worker, "release")
        state = JobState(rows[0][0])
        if state is JobState.QUEUED:
            self._notify({rows[0][1]})
        return state

    def _notify(self, queues: set[str]) -> None:
        if queues:
            self._all("notify", {"queues": sorted(queues)})

    # -- hooks of tx.TransactionsMixin (enqueue on a caller's connection, ctx.transaction())
    def _enqueue_plan(self, jobs: Sequence[NewJob], now: datetime | None) -> Steps[list[JobId]]:
        return enqueue_steps(jobs, now)

    def _fence(self, worker: str, job_id: int, attempt: int) -> dict[str, Any]:
        return next(complete_steps(worker, [(job_id, attempt, None)], None))[1]  # complete's, for one attempt

    def _conn_kwargs(self) -> dict[str, Any]:  # as connect.open_connections gives the main pool's
        session = not pooled(self.dsn)
        return {"autocommit": True, "prepare_threshold": 0 if session else None,
                **net_defaults(self.dsn.url, session=session)}

    # -- maintenance --------------------------------------------------------------
    def reap(self, limit: int, *, now: datetime | None = None) -> list[Reaped]:
        rows = self._all("reap", {"limit": limit, "now": now})
        self._notify({r[5] for r in rows if r[4] == JobState.QUEUED})
        return [
            Reaped(
                id=r[0], attempt=r[1], worker=r[2],
                outcome=Outcome.TIMED_OUT if r[3] else Outcome.LEASE_EXPIRED, state=JobState(r[4]),
                queue=r[5], lease_until=r[6],
            )
            for r in rows
        ]

    def lapse_leases(self, worker_ids: Sequence[str], *, now: datetime | None = None) -> int:
        if not worker_ids:
            return 0
        return len(self._all("lapse_leases", {"workers": list(worker_ids), "now": now}))

    def listen(self, on_enqueue: Callable[[str], None]) -> Listener | None:
        """LISTEN on the database URL, or on ``listen_url`` when given; behind
        a transaction pooler without one, None: a LISTEN through the pooler
        would hold a server connection that the next transaction gives to
        another client, and its notifications would be lost, so workers poll
        (every POOLED_POLL_INTERVAL) instead."""
        if self.listen_url is None:
            return None
        if "listen_url" in self.dsn.options:  # a URL of its own: connect.py's check_listen_url
            connect.check_listen_url(self.listen_url, self.pool)
        return NotifyListener(self.listen_url, self.channel, on_enqueue)

    def listen_finished(self, on_finished: Callable[[str], None]) -> Listener | None:
        """LISTEN for finished jobs where ``listen`` would LISTEN for enqueues
        (None behind a pooler without ``listen_url``: app.wait polls)."""
        if self.listen_url is None:
            return None
        return NotifyListener(self.listen_url, self.done_channel, on_finished)
