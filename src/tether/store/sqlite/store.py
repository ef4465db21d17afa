"""The SQLite store: tether embedded, one machine, many processes on one file.

WAL mode lets readers run beside the one writer; ``busy_timeout`` makes a
writer wait its turn instead of failing. Each thread has its own connection.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

from ... import model
from ...config import DatabaseURL
from ...errors import InvalidDSN, InvalidTransition, JobNotFound, SchemaMissing, StaleAttempt
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
from ..base import Store
from ..buckets import Buckets, fill, window
from ..columns import sqlite_macros, sqlite_row
from ..rows import (
    assign_ids,
    attempt_from_row,
    claimed_from_rows,
    epoch_to_dt,
    inserted_ids,
    job_from_row,
    job_with_newest,
    json_text,
    missing_keys,
)
from ..sqlfile import load_migrations, load_queries
from ..worker_rows import DEFAULT_WORKER_RETENTION
from .conns import ThreadConnections
from .control import SQLiteControl, finished_states_sql
from .ending import end, forget_ended, reopen, take_ended
from .flows import SQLiteWorkflows
from .keys import next_round, register_key_rooms
from .many import SQLiteMany, register_functions
from .rounds import InlineRounds
from .schedules import SQLiteSchedules
from .schema import MISSING, SQLiteSchema
from .tx import TransactionsMixin
from .workers import SQLiteWorkers

__all__ = ["SQLiteStore"]

NOW = "coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)"
BUSY_TIMEOUT_MS = 30_000



def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


class SQLiteStore(SQLiteSchema, SQLiteWorkflows, SQLiteSchedules, SQLiteControl, SQLiteMany, SQLiteWorkers,
                  TransactionsMixin, InlineRounds, Store):
    backend = "sqlite"
    # No push channel on SQLite: idle workers poll, sub-second by default.
    default_poll_interval = 0.2
    # The statement runs in the worker's own process, and every process shares
    # one write lock: claiming ahead gained nothing (bench/scenarios/sqlite.py)
    # and kept each worker in a write transaction more of the time, so that a
    # paused worker more often stalled all the others (tether chaos, stop).
    claims_ahead = False

    def __init__(self, dsn: DatabaseURL) -> None:
        self.path = dsn.url
        self.synchronous = dsn.options.get("synchronous", "normal").upper()
        if self.synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise InvalidDSN(f"synchronous={self.synchronous.lower()} is not one of off, normal, full, extra")
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise InvalidDSN(f"SQLite URL points into {folder!r}, which is not a directory")
        macros = {"now": NOW, "finished_states": finished_states_sql()}
        self.q = load_queries(__package__ or "tether.store.sqlite", "queries.sql", macros | sqlite_macros())
        self._migrations = load_migrations(f"{__package__}.migrations", macros)
        self._conns = ThreadConnections(self._open)
        self._init_rounds(self._open_nowait, inline=self.synchronous in ("OFF", "NORMAL"))
        with self._use():  # fail early on an unusable file
            pass

    # -- plumbing -----------------------------------------------------------------
    def _use(self) -> AbstractContextManager[sqlite3.Connection]:
        """This thread's connection, held: ``close()`` waits for its statement.
        (A round tried on the event loop gets the loop's no-wait one: rounds.py.)"""
        return (self._nowait_conns if self._mode.nowait else self._conns).use()

    def _open(self, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=busy_timeout_ms / 1000, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            register_functions(conn)
            register_key_rooms(conn, self.q)
        except sqlite3.Error as exc:
            raise InvalidDSN(f"cannot open SQLite database {self.path!r}: {exc}") from None
        return conn

    def _open_nowait(self) -> sqlite3.Connection:
        """A loop's connection for its rounds: never waits for the lock, never
        checkpoints (rounds.py sends its checkpoints to a thread)."""
        conn = self._open(0)
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        return conn

    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[Any]:
        try:
            with self._use() as conn:
                return conn.execute(self.q[name], params or {}).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                raise SchemaMissing(MISSING.format(path=self.path)) from None
            raise

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A short write transaction; IMMEDIATE takes the write lock up front so
        what we read inside cannot change before we write."""
        with self._use() as conn:
            conn.execute("BEGIN IMMEDIATE")
            forget_ended()
            try:
                yield conn
            except sqlite3.OperationalError as exc:
                forget_ended()
                conn.execute("ROLLBACK")
                if "no such table" in str(exc):
                    raise SchemaMissing(MISSING.format(path=self.path)) from None
                raise
            except BaseException:
                forget_ended()
                conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")
                # what its endings finished and released, told once it stands (ending.py)
                self.flows_ended(take_ended())

    def close(self) -> None:
        self._close_tx()
        self._conns.close()
        self._nowait_conns.close()

    def db_now(self) -> datetime:
        value = epoch_to_dt(self._all("db_now", {"now": None})[0][0])
        assert value is not None
        return value

    # -- producers ----------------------------------------------------------------
    def enqueue(self, jobs: Sequence[NewJob], *, now: datetime | None = None) -> list[JobId]:
        if not jobs:
            return []
        with self._write() as conn:
            return self._enqueue_in(conn, jobs, now)

    def _enqueue_in(self, conn: sqlite3.Connection | sqlite3.Cursor, jobs: Sequence[NewJob],
                    now: datetime | None) -> list[JobId]:
        """The insert and its dedup lookups, inside a write transaction the
        caller holds, so no key's holder can finish in between. A key held by
        a finished job whose dedup window has passed is released
        (release_dedup), and the jobs that wanted it are inserted in a second
        pass, in the same transaction."""
        rows = self._insert(conn, jobs, now)
        if len(rows) == len(jobs):
            return inserted_ids(rows)
        keys = missing_keys(jobs, rows)
        if keys:
            conn.execute(self.q["release_dedup"], {"keys": json.dumps(keys), "now": _ts(now)})
        ids = assign_ids(jobs, rows, self._holders(conn, keys) if keys else {})
        again = [j for j, i in zip(jobs, ids, strict=True) if i is None]
        if again:  # released windows: their keys are free now
            more = iter(self._enqueue_in(conn, again, now))
            ids = [next(more) if i is None else i for i in ids]
        # One write transaction: a key's holder cannot finish between the insert and the lookup.
        assert None not in ids, "a dedup key changed hands inside a write transaction"
        return [i for i in ids if i is not None]

    def _insert(self, conn: sqlite3.Connection | sqlite3.Cursor, jobs: Sequence[NewJob],
                now: datetime | None) -> list[Any]:
        payload = json.dumps([sqlite_row(j, _ts(j.run_at), _ts) for j in jobs])
        return sorted(conn.execute(self.q["enqueue"], {"jobs": payload, "now": _ts(now)}).fetchall())

    def _holders(self, conn: sqlite3.Connection | sqlite3.Cursor, keys: list[str]) -> dict[str, int]:
        rows = conn.execute(self.q["dedup_holders"], {"keys": json.dumps(keys)}).fetchall()
        return {k: i for i, k in rows}

    def get_job(self, job_id: int) -> Job | None:
        # the row and its history in one read transaction (one snapshot): read
        # apart, an attempt ending in between showed in one and not the other
        with self._use() as conn:
            own = not conn.in_transaction
            if own:
                conn.execute("BEGIN")
            try:
                rows = self._all("get_job", {"id": job_id})
                history = self._all("get_attempts_newest", {"id": job_id, "limit": MAX_ATTEMPTS_SHOWN}) if rows else []
            finally:
                if own:
                    conn.execute("COMMIT")
        return job_with_newest(rows[0], history, epoch_to_dt, json_text) if rows else None

    def list_jobs(
        self, *, state: str | None = None, queue: str | None = None, task: str | None = None, limit: int = 50
    ) -> list[Job]:
        rows = self._all("list_jobs", {"state": state, "queue": queue, "task": task, "limit": limit})
        return [job_from_row(r, [], epoch_to_dt, json_text) for r in rows]

    def recent_attempts(self, outcomes: Sequence[Outcome], *, limit: int = 50) -> list[Attempt]:
        rows = self._all("recent_attempts", {"outcomes": json.dumps([str(o) for o in outcomes]), "limit": limit,
                                             "successes": Outcome.SUCCEEDED in outcomes})
        return [attempt_from_row(r, epoch_to_dt) for r in rows]

    def throughput(self, *, buckets: int, bucket_seconds: int, now: datetime | None = None) -> Buckets:
        w = window(now or self.db_now(), buckets, bucket_seconds)
        return fill(w, self._all("throughput", {"start": w.start, "end": w.end, "bucket": w.seconds}))

    def cancel(self, job_id: int, *, now: datetime | None = None) -> JobState:
        with self._write() as conn:
            rows = end(conn, self.q, "cancel", {"id": job_id, "now": _ts(now)})
        if rows:
            return JobState(rows[0][1])
        state = self._all("job_state", {"id": job_id})
        if not state:
            raise JobNotFound(f"no job {job_id}")
        raise InvalidTransition(f"job {job_id} is already {state[0][0]}; a finished job cannot be cancelled")

    def retry(self, job_id: int, *, now: datetime | None = None) -> str:
        try:
            with self._write() as conn:
                rows = conn.execute(self.q["retry"], {"id": job_id, "now": _ts(now)}).fetchall()
                if rows and rows[0][1]:  # it has dependents: those its ending cancelled wait again
                    reopen(conn, self.q, job_id)
        except sqlite3.IntegrityError:
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
        oldest = {q: epoch_to_dt(t) for q, t in self._all("oldest_queued", {"now": None})}
        return Stats(
            counts=counts,
            oldest_queued={q: t for q, t in oldest.items() if t is not None},
            workers=self.workers_page(live_only=True, limit=model.STATS_WORKERS),
            now=self.db_now(),
            unknown=self.unknown_tasks(),
            workers_total=self.count_workers(live_only=True, since=DEFAULT_WORKER_RETENTION),
        )

    def unknown_tasks(self, *, since: float = model.LIVE_WITHIN, now: datetime | None = None) -> list[model.UnknownTaskJobs]:
        rows = self._all("unknown_tasks", {"since": since, "now": _ts(now)})
        return [model.UnknownTaskJobs(queue=q, task=t, jobs=n, oldest=epoch_to_dt(o) or datetime.min) for q, t, n, o in rows]

    def bury_unknown(
        self, queues: Sequence[str], *, grace: float, limit: int, now: datetime | None = None
    ) -> list[model.Buried]:
        with self._write() as conn:
            rows = end(conn, self.q, "bury_unknown", {"queues": json.dumps(list(queues)), "since": grace,
                                                      "limit": limit, "now": _ts(now)})
        return [model.Buried(id=r[0], queue=r[9], task=r[10], error=r[11]) for r in rows]

    def expire(self, worker: str, *, limit: int, now: datetime | None = None) -> list[model.Buried]:
        with self._write() as conn:
            rows = end(conn, self.q, "expire", {"worker": worker, "limit": limit, "now": _ts(now)})
        return [model.Buried(id=r[0], queue=r[9], task=r[10], error=r[11]) for r in rows]

    # -- worker operations --------------------------------------------------------
    def claim(
        self, worker: str, queues: Sequence[str], limit: int, lease_ttl: float, *, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        return _claimed(self._all(*self._claim_params(worker, queues, limit, lease_ttl, now, tasks)))

    @staticmethod
    def _claim_params(
        worker: str, queues: Sequence[str], limit: int, lease_ttl: float, now: datetime | None,
        tasks: Sequence[str] | None,
    ) -> tuple[str, dict[str, Any]]:
        """The claim query's name (claim_known with tasks) and its parameters."""
        return "claim" if tasks is None else "claim_known", {
            "worker": worker, "queues": json.dumps(list(queues)), "limit": limit, "lease_ttl": lease_ttl,
            "now": _ts(now), "tasks": None if tasks is None else json.dumps(list(tasks)), "round": next_round()}

    def claim_ids(
        self, worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, *,
        now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        if not ids:
            return []
        return _claimed(self._all("claim_ids", self._ids_params(worker, ids, queues, lease_ttl, now, tasks)))

    @staticmethod
    def _ids_params(
        worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, now: datetime | None,
        tasks: Sequence[str] | None,
    ) -> dict[str, Any]:
        return {"worker": worker, "ids": json.dumps([int(i) for i in ids]), "queues": json.dumps(list(queues)),
                "lease_ttl": lease_ttl, "now": _ts(now), "tasks": None if tasks is None else json.dumps(list(tasks)),
                "round": next_round()}

    def due_unclaimed(
        self, queues: Sequence[str], *, grace: float, limit: int, now: datetime | None = None
    ) -> list[DueJob]:
        rows = self._all("due_unclaimed", {"queues": json.dumps(list(queues)), "grace": grace, "limit": limit,
                                           "now": _ts(now)})
        return [DueJob(id=r[0], queue=r[1], attempt=r[2], run_at=epoch_to_dt(r[3]) or datetime.min) for r in rows]

    def heartbeat(
        self, worker: str, held: Sequence[tuple[int, int]], lease_ttl: float, *, now: datetime | None = None
    ) -> dict[int, Beat]:
        params = {"worker": worker, "held": json.dumps([list(h) for h in held]), "lease_ttl": lease_ttl,
                  "now": _ts(now)}
        with self._write() as conn:
            conn.execute(self.q["touch_worker"], params)
            rows = conn.execute(self.q["heartbeat"], params).fetchall() if held else []
        renewed = {r[0]: bool(r[1]) for r in rows}
        return {
            job_id: (Beat.LOST if job_id not in renewed
                     else Beat.CANCEL_REQUESTED if renewed[job_id] else Beat.RENEWED)
            for job_id, _ in held
        }

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
            {"worker": worker, "id": job_id, "attempt": attempt, "fraction": fraction, "message": message,
             "lease_ttl": lease_ttl, "now": _ts(now)},
        )
        if not rows:
            raise StaleAttempt(job_id, attempt, worker, "progress")
        return bool(rows[0][0])

    def complete(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], *, now: datetime | None = None
    ) -> set[int]:
        if not done:
            return set()
        with self._write() as conn:
            return self._complete_in(conn, worker, done, now)

    def complete_and_claim(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], queues: Sequence[str], limit: int,
        lease_ttl: float, *, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        # One write transaction (one commit) for both, as PostgreSQL's one statement.
        if not done:
            return set(), self.claim(worker, queues, limit, lease_ttl, now=now, tasks=tasks)
        name, params = self._claim_params(worker, queues, limit, lease_ttl, now, tasks)
        with self._write() as conn:
            accepted = self._complete_in(conn, worker, done, now)
            rows = conn.execute(self.q[name], params).fetchall()
        return accepted, _claimed(rows)

    def complete_and_claim_ids(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], ids: Sequence[int], queues: Sequence[str],
        lease_ttl: float, *, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        # One write transaction, as complete_and_claim: the claim sees the
        # successes written (their slots and exclusive keys free).
        if not done or not ids:
            return super().complete_and_claim_ids(worker, done, ids, queues, lease_ttl, now=now, tasks=tasks)
        with self._write() as conn:
            accepted = self._complete_in(conn, worker, done, now)
            rows = conn.execute(self.q["claim_ids"], self._ids_params(worker, ids, queues, lease_ttl, now, tasks))
            return accepted, _claimed(rows.fetchall())

    def _complete_in(
        self, conn: sqlite3.Connection | sqlite3.Cursor, worker: str, done: Sequence[tuple[int, int, str | None]],
        now: datetime | None,
    ) -> set[int]:
        rows = end(conn, self.q, "complete", {"worker": worker, "done": json.dumps([list(d) for d in done]),
                                              "now": _ts(now)})
        return {r[0] for r in rows}  # the rows are the successes' audit (queries.sql, complete)

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
        params = {"worker": worker, "id": job_id, "attempt": attempt, "outcome": str(outcome), "error": error,
                  "traceback": traceback, "retry": retry, "now": _ts(now), "delay": delay,
                  "max_released": model.MAX_HANDBACKS}
        return self._finish("fail", params)

    def release(self, worker: str, job_id: int, attempt: int, *, now: datetime | None = None) -> JobState:
        params = {"worker": worker, "id": job_id, "attempt": attempt, "now": _ts(now)}
        return self._finish("release", params)

    def _finish(self, query: str, params: dict[str, Any]) -> JobState:
        with self._write() as conn:
            rows = end(conn, self.q, query, params)
        if not rows:
            raise StaleAttempt(params["id"], params["attempt"], params["worker"], query)
        return JobState(rows[0][1])

    # -- maintenance --------------------------------------------------------------
    def reap(self, limit: int, *, now: datetime | None = None) -> list[Reaped]:
        out: list[Reaped] = []
        with self._write() as conn:
            lapsed = conn.execute(self.q["lapsed"], {"limit": limit, "now": _ts(now)}).fetchall()
            for job_id, attempt, worker, claimed_at, timed_out, queue, lease_until in lapsed:
                rows = end(conn, self.q, "reap_one", {"id": job_id, "attempt": attempt, "timed_out": timed_out,
                                                      "worker": worker, "claimed_at": claimed_at, "now": _ts(now)})
                if not rows:
                    continue
                out.append(Reaped(id=job_id, attempt=attempt, worker=worker, outcome=Outcome(rows[0][2]),
                                  state=JobState(rows[0][1]), queue=queue, lease_until=epoch_to_dt(lease_until)))
        return out

    def lapse_leases(self, worker_ids: Sequence[str], *, now: datetime | None = None) -> int:
        if not worker_ids:
            return 0
        return len(self._all("lapse_leases", {"workers": json.dumps(list(worker_ids)), "now": _ts(now)}))


def _claimed(rows: list[Any]) -> list[ClaimedJob]:
    return claimed_from_rows(rows, epoch_to_dt)
