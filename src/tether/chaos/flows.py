"""I9 in a chaos run: the workload of jobs that wait, their evidence, and the check.

The producer offers, besides its plain jobs, workflows through the run's
production (chains of three; diamonds, a→{b, c}→d; some with a step whose
policy is ``on_failure="run"``, some steps failing for good so that a failure
cancels or runs what comes after) and two batches with an ``on_complete`` and
an ``on_success`` callback: one of ``BATCH_SIZE`` members, a few of which fail
(its ``on_success`` ends cancelled), and a small one whose members do not
(its ``on_success`` fires). They run on the run's main queue, under every fault.
Besides: some steps expire (``expires_at`` a moment after their enqueue: one
released too late ends cancelled by the expiry service, an ending like any
other), one member in ``GROW_EVERY`` of the big batch adds a member from its
handler (``ctx.batch.add``: the callbacks then wait for those too; the check
reads every member from the database), and halfway through the run a bulk
cancel (``cancel_many``) hits a sample of the steps enqueued so far.

The evidence (flows.sql): each step's and callback's handler records its start
first thing, on a connection of its own (``Starts``), with the dependencies'
states it read; a trigger on the jobs table records every move into or out of
``waiting`` in the transaction that makes it. ``FlowLoad.judge`` reads those,
the jobs' final rows and their attempts' claims, and hands them to
flows_check.py.
"""

from __future__ import annotations

import json
import logging
import math
import random
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..config import parse_database_url
from ..model import NewJob
from ..search import JobFilter
from ..store import Store
from ..store.flows import NewBatch, NewWorkflow
from ..store.sqlfile import load_queries
from .checker import RECONNECT_GRACE, CheckReport, _unhealthy, stopped_windows
from .config import QUEUE
from .flows_check import Ended, Move, Start, Waiter, check_dependencies

__all__ = ["BATCH_SIZE", "CALLBACK_TASK", "MEMBER_TASK", "STEP_TASK", "FlowLoad", "Starts"]

STEP_TASK = "tether.chaos.step"
CALLBACK_TASK = "tether.chaos.callback"
MEMBER_TASK = "tether.chaos.member"
BATCH_SIZE = 200
SMALL_BATCH = 10
#: the workflows' shapes, in turn: (steps' dependencies by index, the steps whose policy is on_failure="run")
SHAPES: tuple[tuple[tuple[tuple[int, ...], ...], frozenset[int]], ...] = (
    (((), (0,), (1,)), frozenset()),                    # a chain of 3
    (((), (0,), (0,), (1, 2)), frozenset()),            # a diamond
    (((), (0,), (1,)), frozenset({2})),                 # a chain whose last step runs whatever happened
    (((), (0,), (0,), (1, 2)), frozenset({3})),         # a diamond whose join runs whatever happened
)
#: a step (or a batch member) fails for good with this chance (max_attempts 2): its dependents are cancelled or run
FAIL_SHARE = 0.12
MEMBER_FAIL_SHARE = 0.03
#: a step after the first expires this long after its enqueue, with this chance
EXPIRE_SHARE, EXPIRE_AFTER = 0.1, (0.3, 3.0)
#: one member in this many of the big batch adds a member from its handler
GROW_EVERY = 25
#: the bulk cancel: when (progress of the production) and how many steps
BULK_CANCEL_AT, BULK_CANCEL_STEPS = 0.5, 12
log = logging.getLogger(__name__)


def _tables(url: str) -> tuple[str, dict[str, str]]:
    dsn = parse_database_url(url)
    sqlite = dsn.backend == "sqlite"
    q = (lambda name: name) if sqlite else (lambda name: f'"{dsn.schema}".{name}')
    return dsn.backend, {"starts": q("tether_chaos_starts"), "moves": q("tether_chaos_moves"),
                         "function": q("tether_chaos_moved"), "jobs": "tether_jobs" if sqlite else q("jobs")}


def _connect(url: str) -> Any:
    dsn = parse_database_url(url)
    if dsn.backend == "sqlite":
        return sqlite3.connect(dsn.url, timeout=10, isolation_level=None)
    import psycopg

    # Bounded: a worker cut off by a partition must not hang its handler here.
    return psycopg.connect(dsn.url, autocommit=True, connect_timeout=3, tcp_user_timeout=3000)


class Starts:
    """The handlers' side: each step or callback records its start (flows.sql ``starts``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        backend, tables = _tables(url)
        self.insert = load_queries(__package__ or "tether.chaos", "flows.sql", tables)[f"start_{backend}"]

    def record(self, job_id: int, attempt: int, worker: str, seen: Mapping[str, str] | None) -> None:
        """Best effort: a start that cannot be written (the database away) is
        not evidence, and the claim in the attempts table still is."""
        try:
            conn = _connect(self.url)
            try:
                conn.execute(self.insert, (job_id, attempt, worker, None if seen is None else json.dumps(dict(seen))))
            finally:
                conn.close()
        except Exception as exc:
            log.warning("could not record the start of job %s attempt %s: %s", job_id, attempt, exc)


class FlowLoad:
    """The run's workflows and batches: what was asked for, and the check of it."""

    def __init__(self, url: str, *, steps: int, seed: int) -> None:
        self.url = url
        self.backend, tables = _tables(url)
        self.q = load_queries(__package__ or "tether.chaos", "flows.sql", tables)
        self.rng = random.Random(seed)
        #: how many workflow steps to offer over the run (about; whole workflows)
        self.steps = steps
        self.waiters: list[Waiter] = []
        self.made = 0  # workflows enqueued (or refused)
        #: the batches (members, chance a member fails for good) still to enqueue: one refused is offered again
        self.batches_left: dict[int, float] = {BATCH_SIZE: MEMBER_FAIL_SHARE, SMALL_BATCH: 0.0}
        self.batch_members = 0
        self.workflows = 0  # acknowledged
        #: each workflow's and batch's job: when its enqueue was acknowledged (wall clock)
        self.acked: dict[int, float] = {}
        #: each batch's callbacks: (batch id, on_complete, on_success); their waiters are made at
        #: judge time, over every member the database has (ctx.batch.add's too)
        self.batches: list[tuple[int, int, int]] = []
        self.step_ids: list[int] = []  # every step acknowledged, for the bulk cancel
        self.bulk_cancelled: int | None = None  # how many steps the bulk cancel reached (None: not yet)

    def create(self) -> None:
        conn = _connect(self.url)
        try:
            for part in ("starts", "moves", "function", "trigger"):
                conn.execute(self.q[f"{part}_{self.backend}"])
        finally:
            conn.close()

    # -- the workload --------------------------------------------------------------------
    def due(self, progress: float) -> list[Callable[[Store], tuple[list[int], list[int]]]]:
        """What to enqueue now, ``progress`` (0-1) into the production: each an
        enqueue answering (every job id, the ids due at once)."""
        out: list[Callable[[Store], tuple[list[int], list[int]]]] = []
        want = self._want
        while self.made < min(want, int(want * progress) + 1):
            shape, run = SHAPES[self.made % len(SHAPES)]
            out.append(self._workflow(self.made, shape, run))
            self.made += 1
        if progress >= 0.2:
            out += [self._batch(size, share) for size, share in self.batches_left.items()]
        if progress >= BULK_CANCEL_AT and self.bulk_cancelled is None and self.step_ids:
            out.append(self._bulk_cancel)
        return out

    def _bulk_cancel(self, store: Store) -> tuple[list[int], list[int]]:
        """``cancel_many`` of a sample of the steps so far: the queued ones end
        cancelled (their dependents are cut or run), the running ones get a
        request; waiting ones are not taken by a bulk cancel."""
        ids = sorted(self.rng.sample(self.step_ids, min(BULK_CANCEL_STEPS, len(self.step_ids))))
        count, _ = store.cancel_batch(JobFilter(ids=tuple(ids)), after_id=0, limit=len(ids))
        self.bulk_cancelled = count
        return [], []

    @property
    def done(self) -> bool:
        """Every workflow and batch has been offered."""
        return self.made >= self._want and not self.batches_left

    @property
    def _want(self) -> int:
        return max(4, self.steps // 3)  # workflows over the run

    def _job(self, task: str, ms: int, fail: bool, *, expires: float | None = None, grow: bool = False) -> NewJob:
        args: dict[str, Any] = {"ms": ms, "fail": fail, **({"grow": True} if grow else {})}
        return NewJob(task=task, queue=QUEUE, args_json=json.dumps(args), max_attempts=2 if fail else 8,
                      backoff_base=0.05,
                      expires_at=None if expires is None else datetime.now(UTC) + timedelta(seconds=expires))

    def _expiry(self, i: int) -> float | None:
        return self.rng.uniform(*EXPIRE_AFTER) if i and self.rng.random() < EXPIRE_SHARE else None

    def _workflow(self, n: int, shape: Sequence[tuple[int, ...]], run: frozenset[int]
                  ) -> Callable[[Store], tuple[list[int], list[int]]]:
        names = [f"s{i}" for i in range(len(shape))]
        jobs = [self._job(STEP_TASK, self.rng.randint(20, 300), self.rng.random() < FAIL_SHARE, expires=self._expiry(i))
                for i in range(len(shape))]
        flow = NewWorkflow(f"chaos-{n}", jobs, names, [list(a) for a in shape],
                           ["run" if i in run else "cancel" for i in range(len(shape))])

        def enqueue(store: Store) -> tuple[list[int], list[int]]:
            run_id, ids = store.enqueue_workflow(flow)
            self.workflows += 1
            self.step_ids += ids
            self.acked.update(dict.fromkeys(ids, time.time()))
            self.waiters += [Waiter(ids[i], tuple(ids[u] for u in ups), flow.on_failure[i],
                                    f"workflow {run_id} step {names[i]}") for i, ups in enumerate(shape) if ups]
            return ids, [ids[i] for i, ups in enumerate(shape) if not ups]
        return enqueue

    def _batch(self, size: int, fail_share: float) -> Callable[[Store], tuple[list[int], list[int]]]:
        members = [self._job(MEMBER_TASK, self.rng.randint(1, 8), self.rng.random() < fail_share,
                             grow=size == BATCH_SIZE and i % GROW_EVERY == 0) for i in range(size)]
        batch = NewBatch(members, self._job(CALLBACK_TASK, 20, False), self._job(CALLBACK_TASK, 20, False))

        def enqueue(store: Store) -> tuple[list[int], list[int]]:
            batch_id, ids, (on_complete, on_success) = store.enqueue_batch(batch)
            self.batches_left.pop(size, None)
            self.batch_members += len(ids)
            self.acked.update(dict.fromkeys([*ids, on_complete, on_success], time.time()))
            self.batches.append((batch_id, on_complete, on_success))
            return [*ids, on_complete, on_success], list(ids)
        return enqueue

    # -- the check -----------------------------------------------------------------------
    def _read(self) -> tuple[list[Start], list[Move]]:
        conn = _connect(self.url)
        try:
            starts = [Start(int(j), int(a), _epoch(at), "handler", None if seen is None else json.loads(seen))
                      for j, a, at, seen in conn.execute(self.q["read_starts"]).fetchall()]
            moves = [Move(int(j), str(o), str(s), _epoch(at))
                     for j, o, s, at in conn.execute(self.q["read_moves"]).fetchall()]
        finally:
            conn.close()
        return starts, moves

    def judge(self, report: CheckReport, store: Store, events: Sequence[Mapping[str, Any]], *, mono_to_wall: float,
              bound: float, outages: Iterable[tuple[float, float]], sqlite: bool) -> CheckReport:
        """Add I9 (and its counts) to the checker's report. Time with no healthy
        worker or the database down is not charged to a release: I5's windows
        (``checker._unhealthy``, SQLite's stopped writers) and the outages plus
        the reconnect grace."""
        waiters = [*self.waiters, *self._batch_waiters(store)]
        ids = {w.job_id for w in waiters} | {d for w in waiters for d in w.after}
        ended: dict[int, Ended] = {}
        claims: list[Start] = []
        expired = 0  # steps the expiry service ended (released too late, or their queue behind)
        for job_id in sorted(ids):
            job = store.get_job(job_id)
            if job is None or job.created_at.timestamp() > self.acked.get(job_id, math.inf) + 1.0:
                continue  # missing, or its id handed out again (an asynchronous failover lost it): not judged
            ended[job_id] = Ended(str(job.state), None if job.finished_at is None else job.finished_at.timestamp())
            expired += (job.last_error or "").startswith("expired")
            claims += [Start(job_id, a.attempt, a.claimed_at.timestamp(), "claim") for a in job.attempts]
        starts, moves = self._read()
        waiting = {w.job_id for w in waiters}
        excused = [(b + mono_to_wall, e + mono_to_wall)
                   for b, e in _unhealthy(list(events)) + (stopped_windows(events) if sqlite else [])]
        excused += [(b, e + RECONNECT_GRACE) for b, e in outages]
        inv, counts = check_dependencies(waiters, ended, [*starts, *(c for c in claims if c.job_id in waiting)],
                                         moves, bound=bound, excused=excused)
        report.invariants["I9"] = inv
        added = sum(len(w.after) for w in waiters[len(self.waiters)::2]) - self.batch_members
        report.counts.update(counts, i9_handler_starts=len(starts), i9_moves=len(moves), i9_workflows=self.workflows,
                             i9_batch_members=self.batch_members, i9_batch_members_added=added,
                             i9_bulk_cancelled=self.bulk_cancelled or 0, i9_expired=expired)
        return report

    def _batch_waiters(self, store: Store) -> list[Waiter]:
        """Each batch's callbacks, waiting for every member the database has
        (those a member added with ctx.batch.add included), read a page at a time."""
        out: list[Waiter] = []
        for batch_id, on_complete, on_success in self.batches:
            members: list[int] = []
            while page := store.batch_members(batch_id, after=members[-1] if members else 0, limit=10_000):
                members += page
            out += [Waiter(on_complete, tuple(members), "on_complete", f"batch {batch_id} on_complete"),
                    Waiter(on_success, tuple(members), "on_success", f"batch {batch_id} on_success")]
        return out


def _epoch(at: Any) -> float:
    return float(at) if isinstance(at, (int, float)) else float(at.timestamp())
