"""The PostgreSQL store: psycopg 3 with its connection pool.

Workers on many machines share one database; every ownership decision is a
statement below, and every statement is in ``queries.sql`` beside this file.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Executor
from datetime import datetime
from operator import attrgetter
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import ExecStatus
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from ...config import DatabaseURL
from ...errors import InvalidDSN, InvalidTransition, JobNotFound, SchemaMissing, StaleAttempt
from ...model import Attempt, Beat, ClaimedJob, DueJob, Job, JobState, NewJob, Outcome, Reaped, Stats, WorkerInfo
from ..base import Listener, Store
from ..buckets import Buckets, fill, window
from ..rows import assign_ids, attempt_from_row, claimed_from_rows, job_from_row, missing_keys, worker_from_row
from ..sqlfile import load_migrations, load_queries
from .loop_connections import LoopConnections
from .tx import TransactionsMixin

__all__ = ["PostgresStore"]

log = logging.getLogger("tether.store.postgres")

NOW = "coalesce(%(now)s::timestamptz, now())"
# Every process and schema uses its own advisory lock key for migrations.
_MIGRATE_LOCK = 0x7E7E_0001


# Connection settings; any of these in the URL wins. A worker cut off by a
# network partition must find out in seconds, not after the kernel's two-hour
# keepalive default: probe idle connections and give up on unacknowledged writes.
CONN_DEFAULTS = {
    # Plan every execution for its own arguments: the arrays tether passes vary
    # from 1 to thousands of elements, and a generic plan chosen for one size
    # turned the heartbeat quadratic at 5,000 held jobs (8.6 s a beat). The
    # exceptions (GENERIC_PLANS) run on a pool of their own.
    "options": "-c plan_cache_mode=force_custom_plan",
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}


#: A worker's per-round statements, whatever their size, are planned once (a
#: generic plan) on connections of their own; every other statement is
#: planned for its arguments. Planning complete_and_claim took 0.7 ms of a
#: 2.7-3.4 ms round trip at 10 jobs. A generic plan is the custom one here
#: (EXPLAIN at 100 and 200 jobs: the same nodes): a claim's LIMIT is a
#: parameter and every id it handles comes from its own index scan, and a
#: success's fence and result are looked up in one jsonb object by id, not
#: through a join that a plan made for unknown sizes could turn into a
#: quadratic loop, nor with array_position (quadratic whatever the plan).
GENERIC_PLANS = frozenset({"claim", "complete", "complete_and_claim"})
# Their results come back in binary: a claim's two times (and its numbers)
# are read from their binary form in a fraction of the time it takes to parse
# their text (0.2 us a job, of about 10 in a worker's CPU per no-op job).
#: at most this many successes per statement (a reporter's batch after an
#: outage can be thousands), so that no one statement is unbounded
DONE_CHUNK = 200
_GENERIC_OPTIONS = "-c plan_cache_mode=force_generic_plan"

#: how long a caller waits for a free pooled connection before the call fails
POOL_TIMEOUT = 10.0
#: psycopg_pool retries a failed connection with a delay that doubles until
#: reconnect_timeout (300 s by default): after a server restart or a partition a
#: worker could then sit out tens of seconds with the server already back, and
#: its reaper with it (found by `tether chaos`: leases recovered 35 s late).
#: Giving up early makes the next request start a fresh attempt, 1 s apart.
RECONNECT_TIMEOUT = 2.0
#: connections per event loop for async calls (``enqueue_async``): each is
#: busy only for one statement's round trip, and a loop is one thread
ASYNC_CONNECTIONS = 4
#: connections for a worker's rounds (GENERIC_PLANS), per event loop and in the
#: sync pool: a worker has at most a claim ahead and a report in flight
ROUND_CONNECTIONS = 2

Rows = list[tuple[Any, ...]]
TUPLES_OK = ExecStatus.TUPLES_OK
T = TypeVar("T")
#: An operation as the statements it needs, without any I/O, so that the sync
#: and the async paths run the same plan (and retries, chunks, lookups): it
#: yields (query name, params), is sent each statement's rows, and returns
#: its answer. ``_drive`` and ``_drive_async`` run one.
Steps = Generator[tuple[str, dict[str, Any]], Rows, T]


def _has_rows(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    """Whether the statement returned rows (a SELECT or a RETURNING), by its
    result's status: ``cur.description`` builds a list of column objects on
    every access, a cost paid on every round."""
    res = cur.pgresult
    return res is not None and res.status == TUPLES_OK


def _net_defaults(url: str) -> dict[str, Any]:
    given = psycopg.conninfo.conninfo_to_dict(url)
    return {k: v for k, v in CONN_DEFAULTS.items() if k not in given}


def _redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _quote(ident: str) -> str:
    return '"' + ident.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class PostgresStore(TransactionsMixin, Store):
    backend = "postgresql"
    # NOTIFY wakes idle workers at once; polling is only the fallback.
    default_poll_interval = 2.0

    def __init__(self, dsn: DatabaseURL, *, pool_size: int = 8) -> None:
        self.dsn = dsn
        self.schema = dsn.schema
        self.channel = f"tether_{dsn.schema}"
        macros = {"schema": _quote(dsn.schema), "now": NOW, "channel": _literal(self.channel)}
        self.q = load_queries(__package__ or "tether.store.postgres", "queries.sql", macros)
        self._migrations = load_migrations(f"{__package__}.migrations", macros)
        try:
            psycopg.conninfo.conninfo_to_dict(dsn.url)
        except psycopg.ProgrammingError as exc:
            raise InvalidDSN(f"malformed PostgreSQL URL: {exc}") from None
        kwargs = {"autocommit": True, "prepare_threshold": 0, **_net_defaults(dsn.url)}
        self.pool: ConnectionPool[psycopg.Connection[TupleRow]] = ConnectionPool(
            dsn.url,
            min_size=1,
            max_size=pool_size,
            timeout=POOL_TIMEOUT,
            reconnect_timeout=RECONNECT_TIMEOUT,
            kwargs=kwargs,
            open=False,
            name=f"tether-{dsn.schema}",
        )
        #: for GENERIC_PLANS; connected on first use (only workers claim)
        self.round_pool: ConnectionPool[psycopg.Connection[TupleRow]] = ConnectionPool(
            dsn.url,
            min_size=0,
            max_size=ROUND_CONNECTIONS,
            timeout=POOL_TIMEOUT,
            reconnect_timeout=RECONNECT_TIMEOUT,
            kwargs={**kwargs, "options": _GENERIC_OPTIONS} if "options" in kwargs else kwargs,
            open=False,
            name=f"tether-{dsn.schema}-rounds",
        )
        #: for async calls, each event loop's own; round_async as round_pool
        self.async_connections = LoopConnections(dsn.url, size=ASYNC_CONNECTIONS, **kwargs)
        self.round_async = LoopConnections(
            dsn.url, size=ROUND_CONNECTIONS,
            **({**kwargs, "options": _GENERIC_OPTIONS} if "options" in kwargs else kwargs))
        # One direct connection first: it fails fast and says why (refused,
        # unknown database, bad password), where the pool would only time out.
        try:
            psycopg.connect(dsn.url, connect_timeout=5, **{k: v for k, v in _net_defaults(dsn.url).items()
                                                           if k != "connect_timeout"}).close()
        except psycopg.Error as exc:
            raise InvalidDSN(f"cannot connect to PostgreSQL at {_redact(dsn.url)}: {str(exc).strip()}") from None
        try:
            self.pool.open(wait=True, timeout=10)
            self.round_pool.open()
        except Exception as exc:
            self.pool.close()
            self.round_pool.close()
            raise InvalidDSN(f"cannot connect to PostgreSQL at {_redact(dsn.url)}: {exc}") from None

    # -- plumbing -----------------------------------------------------------------
    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        rounds = name in GENERIC_PLANS
        with (self.round_pool if rounds else self.pool).connection() as conn:
            try:
                cur = conn.execute(self.q[name], params or {}, binary=rounds)
            except pg_errors.UndefinedTable:
                raise self._no_tables() from None
            return cur.fetchall() if _has_rows(cur) else []

    async def _all_async(self, name: str, params: dict[str, Any]) -> Rows:
        """``_all`` on a connection of the running event loop's."""
        rounds = name in GENERIC_PLANS
        async with (self.round_async if rounds else self.async_connections).connection() as conn:
            try:
                cur = await conn.execute(self.q[name], params, binary=rounds)
            except pg_errors.UndefinedTable:
                raise self._no_tables() from None
            return await cur.fetchall() if _has_rows(cur) else []

    def _no_tables(self) -> SchemaMissing:
        return SchemaMissing(f"tether's tables are missing from schema {self.schema!r}: run `tether migrate`")

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
    def migrate(self) -> list[str]:
        applied: list[str] = []
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_MIGRATE_LOCK, self.schema))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote(self.schema)}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {_quote(self.schema)}.migrations ("
                "version integer PRIMARY KEY, name text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r[0] for r in conn.execute(f"SELECT version FROM {_quote(self.schema)}.migrations")}
            for version, name, sql in self._migrations:
                if version in done:
                    continue
                conn.execute(sql.encode(), prepare=False)  # a script: many statements, no params
                conn.execute(
                    f"INSERT INTO {_quote(self.schema)}.migrations (version, name) VALUES (%s, %s)",
                    (version, name),
                )
                applied.append(f"{version:04d}_{name}")
        return applied

    def destroy(self) -> None:
        with self.pool.connection() as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {_quote(self.schema)} CASCADE")

    def check_schema(self) -> None:
        with self.pool.connection() as conn:
            try:
                rows = conn.execute(f"SELECT version FROM {_quote(self.schema)}.migrations").fetchall()
            except pg_errors.UndefinedTable:
                raise SchemaMissing(
                    f"no tether schema in PostgreSQL schema {self.schema!r}: run `tether migrate` first"
                ) from None
        have = {r[0] for r in rows}
        missing = [f"{v:04d}_{n}" for v, n, _ in self._migrations if v not in have]
        if missing:
            raise SchemaMissing(f"tether schema is behind ({', '.join(missing)} not applied): run `tether migrate`")

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

    def enqueue(self, jobs: Sequence[NewJob], *, now: datetime | None = None) -> list[int]:
        return self._drive(_enqueue_steps(jobs, now))

    async def enqueue_async(self, jobs: Sequence[NewJob], *, now: datetime | None = None) -> list[int]:
        return await self._drive_async(_enqueue_steps(jobs, now))

    def get_job(self, job_id: int) -> Job | None:
        rows = self._all("get_job", {"id": job_id})
        if not rows:
            return None
        attempts = [attempt_from_row(r) for r in self._all("get_attempts", {"id": job_id})]
        return job_from_row(rows[0], attempts)

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
        return Stats(counts=counts, oldest_queued=oldest, workers=self.list_workers(live_only=True), now=self.db_now())

    # -- worker operations --------------------------------------------------------
    def claim(
        self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, *, now: datetime | None = None
    ) -> list[ClaimedJob]:
        return self._drive(_claim_steps(worker, queues, limit, lease_ttl, now))

    async def claim_async(
        self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, *,
        executor: Executor | None = None, now: datetime | None = None,
    ) -> list[ClaimedJob]:
        return await self._drive_async(_claim_steps(worker, queues, limit, lease_ttl, now))

    def claim_ids(
        self, worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, *,
        now: datetime | None = None,
    ) -> list[ClaimedJob]:
        if not ids:
            return []
        return claimed_from_rows(self._all(
            "claim_ids",
            {"worker": worker, "ids": list(ids), "queues": list(queues), "lease_ttl": lease_ttl, "now": now},
        ))

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
        return _beats(held, rows)

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
        return self._drive(_complete_steps(worker, done, now))

    async def complete_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], *,
        executor: Executor | None = None, now: datetime | None = None,
    ) -> set[int]:
        return await self._drive_async(_complete_steps(worker, done, now))

    def complete_and_claim(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
        lease_ttl: float, *, now: datetime | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        return self._drive(_complete_and_claim_steps(worker, done, queues, limit, lease_ttl, now))

    async def complete_and_claim_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
        lease_ttl: float, *, executor: Executor | None = None, now: datetime | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        return await self._drive_async(_complete_and_claim_steps(worker, done, queues, limit, lease_ttl, now))

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
    ) -> JobState:
        rows = self._all(
            "fail",
            {
                "worker": worker, "id": job_id, "attempt": attempt, "outcome": str(outcome),
                "error": error, "traceback": traceback, "retry": retry, "now": now,
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
    def _enqueue_plan(self, jobs: Sequence[NewJob], now: datetime | None) -> Steps[list[int]]:
        return _enqueue_steps(jobs, now)

    def _fence(self, worker: str, job_id: int, attempt: int) -> dict[str, Any]:
        return {**_done_params(worker, [(job_id, attempt, None)]), "now": None}

    def _conn_kwargs(self) -> dict[str, Any]:
        return {"autocommit": True, "prepare_threshold": 0, **_net_defaults(self.dsn.url)}

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

    def expire_leases(self, worker_ids: Sequence[str], *, now: datetime | None = None) -> int:
        if not worker_ids:
            return 0
        return len(self._all("expire_leases", {"workers": list(worker_ids), "now": now}))

    def register_worker(self, info: WorkerInfo, *, owner: str | None = None) -> None:
        self._all(
            "register_worker",
            {
                "id": info.id, "host": info.host, "pid": info.pid, "proc_start": info.proc_start,
                "queues": json.dumps(info.queues), "concurrency": info.concurrency, "owner": owner,
            },
        )

    def worker_owners(self, worker_ids: Sequence[str]) -> dict[str, str | None]:
        if not worker_ids:
            return {}
        return {r[0]: r[1] for r in self._all("worker_owners", {"ids": list(worker_ids)})}

    def stop_worker(self, worker_id: str, *, now: datetime | None = None) -> None:
        self._all("stop_worker", {"id": worker_id, "now": now})

    def list_workers(self, *, host: str | None = None, live_only: bool = False) -> list[WorkerInfo]:
        return [worker_from_row(r) for r in self._all("list_workers", {"host": host, "live_only": live_only})]

    def listen(self, on_enqueue: Callable[[str], None]) -> Listener | None:
        return _NotifyListener(self.dsn.url, self.channel, on_enqueue)


def _enqueue_steps(jobs: Sequence[NewJob], now: datetime | None) -> Steps[list[int]]:
    """The insert, and for dedup hits the lookup of the active jobs holding
    their keys."""
    if not jobs:
        return []
    query, params = _enqueue_plan(jobs, now)
    for _ in range(3):
        # Ids follow the ORDER BY of the insert's SELECT; RETURNING's own
        # order is unspecified, so sort by id to get the input order back.
        rows = sorted((yield query, params))
        if len(rows) == len(jobs):
            return [r[0] for r in rows]
        keys = missing_keys(jobs, rows)
        held = {k: i for i, k in (yield "active_by_dedup_key", {"keys": keys})} if keys else {}
        ids = assign_ids(jobs, rows, held)
        if ids is not None:
            return ids
        # The job holding a key finished between our insert and our lookup:
        # its key is free now, so the next try inserts.
    raise RuntimeError("enqueue: dedup key kept changing hands; try again")


def _enqueue_plan(jobs: Sequence[NewJob], now: datetime | None) -> tuple[str, dict[str, Any]]:
    """The insert for these jobs: one job, many sharing their options, or any mix."""
    if len(jobs) == 1:
        (j,) = jobs
        return "enqueue_one", {
            "now": now, "queue": j.queue, "task": j.task, "args": j.args_json, "priority": j.priority,
            "run_at": j.run_at, "delay": j.delay, "max_attempts": j.max_attempts, "lease_ttl": j.lease_ttl,
            "timeout": j.timeout, "backoff_base": j.backoff_base, "dedup_key": j.dedup_key, "meta": j.meta_json,
        }
    if _uniform(jobs):
        j = jobs[0]
        return "enqueue_uniform", {
            "now": now, "queue": j.queue, "task": j.task, "args": "[" + ",".join(x.args_json for x in jobs) + "]",
            "priority": j.priority, "run_at": j.run_at, "delay": j.delay, "max_attempts": j.max_attempts,
            "lease_ttl": j.lease_ttl, "timeout": j.timeout, "backoff_base": j.backoff_base, "meta": j.meta_json,
        }
    return "enqueue", _enqueue_arrays(jobs, now)


def _enqueue_arrays(jobs: Sequence[NewJob], now: datetime | None) -> dict[str, Any]:
    return {
        "now": now,
        "queue": [j.queue for j in jobs],
        "task": [j.task for j in jobs],
        "args": [j.args_json for j in jobs],
        "priority": [j.priority for j in jobs],
        "run_at": [j.run_at for j in jobs],
        "delay": [j.delay for j in jobs],
        "max_attempts": [j.max_attempts for j in jobs],
        "lease_ttl": [j.lease_ttl for j in jobs],
        "timeout": [j.timeout for j in jobs],
        "backoff_base": [j.backoff_base for j in jobs],
        "dedup_key": [j.dedup_key for j in jobs],
        "meta": [j.meta_json for j in jobs],
    }


#: every field of a NewJob but its args (derived, so a new field cannot be missed)
_options = attrgetter(*(f for f in NewJob.__dataclass_fields__ if f != "args_json"))


def _uniform(jobs: Sequence[NewJob]) -> bool:
    """Whether these jobs differ only in their args, and none has a dedup key."""
    first = _options(jobs[0])
    return jobs[0].dedup_key is None and all(_options(j) == first for j in jobs[1:])


def _claim_steps(
    worker: str, queues: Sequence[str], limit: int, lease_ttl: float, now: datetime | None
) -> Steps[list[ClaimedJob]]:
    rows = yield "claim", {"worker": worker, "queues": list(queues), "limit": limit, "lease_ttl": lease_ttl,
                           "now": now}
    return claimed_from_rows(rows)


def _complete_steps(
    worker: str, done: Sequence[tuple[int, int, str | None]], now: datetime | None
) -> Steps[set[int]]:
    """Chunked: the fence reads each row's attempt by array_position, a
    linear search (see _complete_done); one chunk is at most a claim batch."""
    accepted: set[int] = set()
    for start in range(0, len(done), DONE_CHUNK):
        rows = yield "complete", {**_done_params(worker, done[start:start + DONE_CHUNK]), "now": now}
        accepted.update(r[0] for r in rows)
    return accepted


def _complete_and_claim_steps(
    worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
    lease_ttl: float, now: datetime | None,
) -> Steps[tuple[set[int], list[ClaimedJob]]]:
    """One statement; none to carry, or more successes than one statement
    takes (see _complete_steps): complete's statements, then claim's."""
    if not done or len(done) > DONE_CHUNK:
        accepted = yield from _complete_steps(worker, done, now)
        return accepted, (yield from _claim_steps(worker, queues, limit, lease_ttl, now))
    rows = yield "complete_and_claim", {
        **_done_params(worker, done), "queues": list(queues), "limit": limit, "lease_ttl": lease_ttl, "now": now,
    }
    return {r[1] for r in rows if r[0] == 1}, claimed_from_rows([r[1:] for r in rows if r[0] == 0])


def _done_params(worker: str, done: Sequence[tuple[int, int, str | None]]) -> dict[str, Any]:
    """complete's rows as _complete_done reads them: the ids, and one JSON
    object of {"<id>": [attempt] or [attempt, result]}. A result is already
    JSON text (dump_json made it), so it goes in as it is, not parsed again."""
    return {
        "worker": worker,
        # an array literal: psycopg's list dumper runs Python code per element
        "ids": "{" + ",".join([str(d[0]) for d in done]) + "}",
        "done": "{" + ",".join(f'"{i}":[{a}]' if r is None else f'"{i}":[{a},{r}]' for i, a, r in done) + "}",
    }


def _beats(held: Sequence[tuple[int, int]], rows: list[tuple[Any, ...]]) -> dict[int, Beat]:
    renewed = {r[0]: bool(r[1]) for r in rows}
    return {
        job_id: (Beat.LOST if job_id not in renewed else Beat.CANCEL_REQUESTED if renewed[job_id] else Beat.RENEWED)
        for job_id, _ in held
    }


class _NotifyListener(Listener):
    """LISTEN on a dedicated connection in a thread; reconnects when it drops."""

    def __init__(self, url: str, channel: str, on_enqueue: Callable[[str], None]) -> None:
        self._url = url
        self._channel = channel
        self._on_enqueue = on_enqueue
        self._stop = threading.Event()
        self._healthy = False
        self._conn: psycopg.Connection[TupleRow] | None = None
        self._thread = threading.Thread(target=self._run, name="tether-listen", daemon=True)
        self._thread.start()

    @property
    def healthy(self) -> bool:
        return self._healthy

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True, **_net_defaults(self._url)) as conn:
                    self._conn = conn
                    conn.execute(f"LISTEN {_quote(self._channel)}")
                    self._healthy = True
                    # An enqueue may have landed while we were (re)connecting.
                    self._on_enqueue("*")
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=1.0):
                            self._on_enqueue(note.payload)
            except Exception as exc:  # the connection dropped: poll until it is back
                if not self._stop.is_set():
                    log.warning("LISTEN connection lost (%s); polling until it is back", exc)
            finally:
                self._healthy = False
                self._conn = None
            self._stop.wait(1.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)  # a daemon; it may be blocked on a dead socket
