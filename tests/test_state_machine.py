"""A hypothesis state machine over both stores, against a pure-Python model.

Each example gets a fresh database (a new SQLite file, or a new PostgreSQL
schema dropped afterwards) and a clock it controls: the base is the database's
``db_now()`` cut to whole seconds, every call passes ``now=``, and a rule moves
the clock by whole seconds, so lease ends are exact on both backends (SQLite
keeps epoch floats; whole seconds are exact there) and nothing ever sleeps.

The rules are what producers, workers, the reaper and operators do, in any
order: enqueue (max_attempts 1-3, optional per-job lease_ttl and timeout, a
dedup key from a tiny pool, one or two jobs per call), claim, heartbeat (with
whatever the worker *believes* it holds, stale beliefs included), progress,
complete, fail and release with a fresh or a stale ``(id, attempt, worker)``,
cancel, reap, crash (a worker forgets everything it holds) and advance time.

The model predicts every row's state, attempt, released, locked_by, lease end
(or run_at), cancel flag and the attempts history; after every step the
database must agree, and:

- I2: a running row has exactly one unfinished attempt, holding locked_by and
  lease_until; no other attempt of the job is unfinished;
- I3: a claim bumps attempt by exactly one; a write with a stale token raises
  ``StaleAttempt`` (heartbeat: ``Beat.LOST``; complete: the id is missing from
  the answer) and leaves the whole job record, history included, unchanged;
  so do a heartbeat and a progress report at or past the attempt's deadline
  (no lease is left to renew), while complete, fail and release still count;
- I4: a terminal job's record never changes again (so it is never re-claimed);
- the attempts table holds exactly one row per finished attempt, with the
  worker and outcome the model expects.

fail's backoff is jittered, so the model does not predict run_at: it reads the
row back and checks it lies in [now + cap/2, now + cap] with
cap = min(3600, backoff_base * 2^(attempts_used - 1)).
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tether.errors import InvalidTransition, JobNotFound, StaleAttempt
from tether.model import TERMINAL_STATES, Beat, Job, JobState, NewJob, Outcome
from tether.store import Store, open_store

from .conftest import PG_URL, _require_pg, _with_schema

# Two queues, and claims over one or both: the claim must take the best due jobs
# across all the queues it is given (priority, then run_at, then id).
QUEUES = ("default", "other")
# Two workers: a worker re-claiming a job it lost (same id, newer attempt) is common,
# which is what an attempt-only or worker-only fence would get wrong.
WORKERS = ("w1", "w2")
DEDUP_KEYS = ("k1", "k2")
WORKER_TTLS = (10.0, 30.0)  # the lease_ttl a worker passes to claim/heartbeat/progress
JOB_TTLS = (None, 5.0, 15.0, 30.0)  # per-job lease_ttl override
TIMEOUTS = (None, 10.0, 25.0, 60.0)  # per-attempt timeout
# Sub-second backoffs: the jittered run_at then lies in (now, now + 1 s) whatever
# the jitter, and the clock moves in whole seconds, so whether a failed job is due
# never depends on the random draw. A failing example then replays identically
# (with multi-second backoffs the jitter made replays diverge and shrinking flaky).
BACKOFF_BASES = (0.125, 0.25)
RESULTS = (None, '"123"', '{"ok": true}', "7")
MAX_JOBS = 10  # keeps the per-step comparison cheap
UNKNOWN_ID = 987_654_321
#: tolerance for the one time the model did not compute itself (the backoff)
JITTER_SLACK = timedelta(milliseconds=1)

SETTINGS = {
    "sqlite": settings(
        max_examples=250,
        stateful_step_count=50,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    ),
    "postgresql": settings(
        max_examples=100,
        stateful_step_count=50,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    ),
}


def fresh_store(backend: str) -> tuple[Store, Callable[[], None]]:
    """A migrated store on a database no other example has touched, and its cleanup."""
    if backend == "sqlite":
        folder = tempfile.mkdtemp(prefix="tether-sm-")
        store = open_store(f"sqlite:///{folder}/sm.db")

        def drop() -> None:
            store.close()
            shutil.rmtree(folder, ignore_errors=True)

    else:
        schema = f"sm_{secrets.token_hex(6)}"
        store = open_store(_with_schema(PG_URL, schema))

        def drop() -> None:
            store.close()
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    try:
        store.migrate()
    except BaseException:
        drop()
        raise
    return store, drop


@dataclass(frozen=True)
class Spec:
    max_attempts: int
    lease_ttl: float | None
    timeout: float | None
    dedup_key: str | None
    queue: str
    priority: int
    delay: float
    backoff_base: float


specs = st.builds(
    Spec,
    max_attempts=st.integers(1, 3),
    lease_ttl=st.sampled_from(JOB_TTLS),
    timeout=st.sampled_from(TIMEOUTS),
    dedup_key=st.sampled_from((None, None, *DEDUP_KEYS)),
    queue=st.sampled_from(QUEUES),
    priority=st.integers(0, 1),
    delay=st.sampled_from((0.0, 0.0, 5.0)),
    backoff_base=st.sampled_from(BACKOFF_BASES),
)


@dataclass
class MJob:
    """What the database should hold for one job."""

    id: int
    spec: Spec
    run_at: datetime
    state: JobState = JobState.QUEUED
    attempt: int = 0
    released: int = 0
    locked_by: str | None = None
    lease_until: datetime | None = None
    deadline: datetime | None = None
    cancel_requested: bool = False
    result: Any = None
    #: finished attempts: attempt -> (worker, outcome)
    outcomes: dict[int, tuple[str, Outcome]] = field(default_factory=dict)
    #: finished attempts: attempt -> how the recorded error must start (None: no error)
    errors: dict[int, str | None] = field(default_factory=dict)
    #: the record as first seen terminal; it must never change again (I4)
    frozen: Job | None = None

    def holds(self, attempt: int, worker: str) -> bool:
        """Would the fence (id AND attempt AND locked_by AND running) pass?"""
        return self.state is JobState.RUNNING and self.attempt == attempt and self.locked_by == worker

    def renewable(self, attempt: int, worker: str, now: datetime) -> bool:
        """Would a heartbeat or progress renew the lease? The fence, and a
        deadline still ahead: at or past it there is no lease left to extend."""
        return self.holds(attempt, worker) and (self.deadline is None or self.deadline > now)

    def lease_from(self, now: datetime, worker_ttl: float) -> datetime:
        """A lease granted or renewed at ``now``: the TTL, capped at the deadline."""
        end = now + timedelta(seconds=self.spec.lease_ttl or worker_ttl)
        return end if self.deadline is None else min(end, self.deadline)

    def finish(self, worker: str, outcome: Outcome, state: JobState, error: str | None = None) -> None:
        assert self.attempt not in self.outcomes, f"attempt {self.attempt} of job {self.id} finished twice"
        self.outcomes[self.attempt] = (worker, outcome)
        self.errors[self.attempt] = error
        self.state = state
        self.locked_by = None
        self.lease_until = None
        self.deadline = None


class StoreMachine(RuleBasedStateMachine):
    def __init__(self, backend: str) -> None:
        super().__init__()
        self.store, self._drop = fresh_store(backend)
        # Whole seconds: every lease end below is then exact, even as an epoch float.
        self.now = self.store.db_now().replace(microsecond=0)
        self.jobs: dict[int, MJob] = {}
        self.last_id = 0
        #: what each worker believes it holds: job id -> attempt (one per job, as
        #: the runtime's in-flight table is keyed by job id)
        self.beliefs: dict[str, dict[int, int]] = {w: {} for w in WORKERS}
        #: every (id, attempt, worker) a claim ever handed out
        self.tokens: set[tuple[int, int, str]] = set()
        #: jobs this step addressed: their attempts history is re-read (every
        #: row is compared after every step; reading every history too would
        #: triple the cost on PostgreSQL, and only a write can change one)
        self.touched: set[int] = set()

    def teardown(self) -> None:
        self._drop()

    # -- helpers ------------------------------------------------------------------
    def _get(self, job_id: int) -> Job:
        job = self.store.get_job(job_id)
        assert job is not None, f"job {job_id} vanished"
        return job

    def _draw_token(self, data: st.DataObject) -> tuple[int, int, str]:
        """A token for a fenced write: fresh (the running attempt and its
        worker); the right attempt from the wrong worker; a zombie (an older
        attempt of a running job under its current worker's id: only the attempt
        tells them apart); or any token from the past, or one from the future."""
        running = [j for j in self.jobs.values() if j.state is JobState.RUNNING and j.locked_by is not None]
        choices: dict[str, list[tuple[int, int, str]]] = {
            "fresh": sorted((j.id, j.attempt, j.locked_by) for j in running),
            "wrong worker": sorted((j.id, j.attempt, w) for j in running for w in WORKERS if w != j.locked_by),
            "zombie": sorted((j.id, a, j.locked_by) for j in running for a in range(1, j.attempt)),
            "stale": sorted(self.tokens | {(j.id, j.attempt + 1, WORKERS[0]) for j in self.jobs.values()}),
        }
        weights = {"fresh": 4, "wrong worker": 1, "zombie": 2, "stale": 2}
        kinds = [k for k, tokens in choices.items() if tokens for _ in range(weights[k])]
        kind = data.draw(st.sampled_from(kinds), label="kind")
        job_id, attempt, worker = data.draw(st.sampled_from(choices[kind]), label="token")
        self.touched.add(job_id)
        return job_id, attempt, worker

    def _forget(self, worker: str, job_id: int, attempt: int) -> None:
        if self.beliefs[worker].get(job_id) == attempt:
            del self.beliefs[worker][job_id]

    # -- producers ----------------------------------------------------------------
    @initialize(batch=st.lists(specs, min_size=1, max_size=4))
    def start_with_jobs(self, batch: list[Spec]) -> None:
        """Every example starts with work to do (rules are swarm-disabled at random)."""
        self.enqueue(batch)

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(batch=st.lists(specs, min_size=1, max_size=2))
    def enqueue(self, batch: list[Spec]) -> None:
        active = {j.spec.dedup_key: j.id for j in self.jobs.values()
                  if j.spec.dedup_key is not None and j.state in (JobState.QUEUED, JobState.RUNNING)}
        ids = self.store.enqueue(
            [NewJob(task="t", args_json="{}", queue=s.queue, priority=s.priority, delay=s.delay,
                    max_attempts=s.max_attempts, lease_ttl=s.lease_ttl, timeout=s.timeout,
                    backoff_base=s.backoff_base, dedup_key=s.dedup_key)
             for s in batch],
            now=self.now,
        )
        assert len(ids) == len(batch)
        self.touched.update(ids)
        for spec, job_id in zip(batch, ids, strict=True):
            if spec.dedup_key is not None and spec.dedup_key in active:
                # A dedup hit inserts nothing and answers with the active job's id.
                assert job_id == active[spec.dedup_key], (spec.dedup_key, job_id, active)
                continue
            assert job_id > self.last_id, f"enqueue returned {job_id}, not a new id (last {self.last_id})"
            self.last_id = job_id
            self.jobs[job_id] = MJob(id=job_id, spec=spec, run_at=self.now + timedelta(seconds=spec.delay))
            if spec.dedup_key is not None:
                active[spec.dedup_key] = job_id

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from([*sorted(self.jobs), UNKNOWN_ID]), label="job")
        self.touched.add(job_id)
        m = self.jobs.get(job_id)
        if m is None:
            with pytest.raises(JobNotFound):
                self.store.cancel(job_id, now=self.now)
            return
        if m.state in TERMINAL_STATES:
            before = self._get(job_id)
            with pytest.raises(InvalidTransition):
                self.store.cancel(job_id, now=self.now)
            assert self._get(job_id) == before
            return
        state = self.store.cancel(job_id, now=self.now)
        if m.state is JobState.QUEUED:
            assert state is JobState.CANCELLED
            m.state = JobState.CANCELLED
        else:
            assert state is JobState.RUNNING
            m.cancel_requested = True

    # -- workers ------------------------------------------------------------------
    @rule(
        worker=st.sampled_from(WORKERS),
        queues=st.sampled_from((QUEUES[:1], QUEUES[1:], QUEUES)),
        limit=st.integers(1, 3),
        ttl=st.sampled_from(WORKER_TTLS),
    )
    def claim(self, worker: str, queues: tuple[str, ...], limit: int, ttl: float) -> None:
        due = sorted((j for j in self.jobs.values()
                      if j.state is JobState.QUEUED and j.spec.queue in queues and j.run_at <= self.now),
                     key=lambda j: (-j.spec.priority, j.run_at, j.id))
        expected = {j.id for j in due[:limit]}
        claimed = self.store.claim(worker, list(queues), limit, ttl, now=self.now)
        got = [c.id for c in claimed]
        self.touched.update(got, expected)
        assert len(got) == len(set(got)), f"a claim handed out one job twice: {got}"
        assert set(got) == expected, f"claimed {sorted(got)}, expected {sorted(expected)} (due: {[j.id for j in due]})"
        for c in claimed:
            m = self.jobs[c.id]
            assert c.attempt == m.attempt + 1, f"job {c.id}: attempt {m.attempt} -> {c.attempt} on claim"
            assert c.lease_ttl == (m.spec.lease_ttl or ttl)
            assert (c.max_attempts, c.timeout, c.queue) == (m.spec.max_attempts, m.spec.timeout, m.spec.queue)
            m.state = JobState.RUNNING
            m.attempt = c.attempt
            m.locked_by = worker
            m.cancel_requested = False
            m.deadline = None if m.spec.timeout is None else self.now + timedelta(seconds=m.spec.timeout)
            m.lease_until = m.lease_from(self.now, ttl)
            self.beliefs[worker][c.id] = c.attempt
            self.tokens.add((c.id, c.attempt, worker))

    @rule(worker=st.sampled_from(WORKERS), ttl=st.sampled_from(WORKER_TTLS), data=st.data())
    def heartbeat(self, worker: str, ttl: float, data: st.DataObject) -> None:
        held = sorted(self.beliefs[worker].items())
        if data.draw(st.booleans(), label="with a foreign token"):
            # Someone else's token, or one from the past: must come back LOST.
            extra = sorted((i, a) for i, a, _ in self.tokens if i not in self.beliefs[worker])
            if extra:
                held.append(data.draw(st.sampled_from(extra), label="extra"))
        before = {job_id: self._get(job_id) for job_id, attempt in held
                  if not self.jobs[job_id].renewable(attempt, worker, self.now)}
        beats = self.store.heartbeat(worker, held, ttl, now=self.now)
        self.touched.update(job_id for job_id, _ in held)
        assert set(beats) == {job_id for job_id, _ in held}
        for job_id, attempt in held:
            m = self.jobs[job_id]
            if m.renewable(attempt, worker, self.now):
                assert beats[job_id] is (Beat.CANCEL_REQUESTED if m.cancel_requested else Beat.RENEWED), (
                    job_id, attempt, beats[job_id])
                m.lease_until = m.lease_from(self.now, ttl)
            else:
                assert beats[job_id] is Beat.LOST, (job_id, attempt, beats[job_id])
                assert self._get(job_id) == before[job_id], f"a stale heartbeat changed job {job_id}"
                self._forget(worker, job_id, attempt)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), ttl=st.sampled_from(WORKER_TTLS), fraction=st.sampled_from((None, 0.5)))
    def progress(self, data: st.DataObject, ttl: float, fraction: float | None) -> None:
        job_id, attempt, worker = self._draw_token(data)
        m = self.jobs[job_id]
        if not m.renewable(attempt, worker, self.now):
            self._expect_stale(job_id, lambda: self.store.progress(
                worker, job_id, attempt, fraction, "msg", ttl, now=self.now))
            self._forget(worker, job_id, attempt)
            return
        assert self.store.progress(worker, job_id, attempt, fraction, "msg", ttl, now=self.now) is m.cancel_requested
        m.lease_until = m.lease_from(self.now, ttl)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), result=st.sampled_from(RESULTS))
    def complete(self, data: st.DataObject, result: str | None) -> None:
        job_id, attempt, worker = self._draw_token(data)
        done = [(job_id, attempt, result)]
        # Sometimes a batch: another of this worker's beliefs (fresh or not) rides along.
        others = sorted((i, a) for i, a in self.beliefs[worker].items() if i != job_id)
        if others and data.draw(st.booleans(), label="batch"):
            i, a = data.draw(st.sampled_from(others), label="second")
            done.append((i, a, None))
        before = {i: self._get(i) for i, a, _ in done if not self.jobs[i].holds(a, worker)}
        accepted = self.store.complete(worker, done, now=self.now)
        self.touched.update(i for i, _, _ in done)
        for i, a, res in done:
            m = self.jobs[i]
            if i in before:
                assert i not in accepted, f"complete accepted stale ({i}, {a}, {worker})"
                assert self._get(i) == before[i], f"a stale complete changed job {i}"
            else:
                assert i in accepted, f"complete refused fresh ({i}, {a}, {worker})"
                m.finish(worker, Outcome.SUCCEEDED, JobState.SUCCEEDED)
                m.result = None if res is None else json.loads(res)
            self._forget(worker, i, a)

    @precondition(lambda self: self.tokens)
    @rule(
        data=st.data(),
        outcome=st.sampled_from((Outcome.FAILED, Outcome.FAILED, Outcome.TIMED_OUT, Outcome.CANCELLED)),
        retry=st.sampled_from((True, True, False)),
    )
    def fail(self, data: st.DataObject, outcome: Outcome, retry: bool) -> None:
        job_id, attempt, worker = self._draw_token(data)
        m = self.jobs[job_id]
        self._forget(worker, job_id, attempt)
        if not m.holds(attempt, worker):
            self._expect_stale(job_id, lambda: self.store.fail(
                worker, job_id, attempt, outcome=outcome, error="boom", retry=retry, now=self.now))
            return
        used = m.attempt - m.released
        if outcome is Outcome.CANCELLED or m.cancel_requested:
            expected = JobState.CANCELLED
        elif not retry or used >= m.spec.max_attempts:
            expected = JobState.DEAD
        else:
            expected = JobState.QUEUED
        state = self.store.fail(worker, job_id, attempt, outcome=outcome, error="boom", retry=retry, now=self.now)
        assert state is expected, f"fail of job {job_id} (used {used}/{m.spec.max_attempts}): {state}, not {expected}"
        m.finish(worker, outcome, state, "boom")
        if state is JobState.QUEUED:
            cap = timedelta(seconds=min(3600.0, m.spec.backoff_base * 2 ** (used - 1)))
            run_at = self._get(job_id).run_at
            assert self.now + cap / 2 - JITTER_SLACK <= run_at <= self.now + cap + JITTER_SLACK, (
                f"backoff after failure {used}: run_at {run_at - self.now} after now, cap {cap}")
            m.run_at = run_at

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        job_id, attempt, worker = self._draw_token(data)
        m = self.jobs[job_id]
        self._forget(worker, job_id, attempt)
        if not m.holds(attempt, worker):
            self._expect_stale(job_id, lambda: self.store.release(worker, job_id, attempt, now=self.now))
            return
        expected = JobState.CANCELLED if m.cancel_requested else JobState.QUEUED
        assert self.store.release(worker, job_id, attempt, now=self.now) is expected
        m.finish(worker, Outcome.RELEASED, expected)
        m.released += 1
        m.run_at = min(m.run_at, self.now)  # due again at once, in its old place in the claim order

    @rule(worker=st.sampled_from(WORKERS))
    def crash(self, worker: str) -> None:
        """The worker dies: it forgets what it held; its leases will lapse."""
        self.beliefs[worker].clear()

    def _expect_stale(self, job_id: int, write: Callable[[], object]) -> None:
        before = self._get(job_id)
        with pytest.raises(StaleAttempt):
            write()
        assert self._get(job_id) == before, f"a stale write changed job {job_id}"

    # -- time and the reaper --------------------------------------------------------
    # Whole seconds, often exactly a TTL or timeout, so leases end *at* now as
    # well as before and after it (the reaper takes lease_until < now only).
    @rule(seconds=st.one_of(st.sampled_from((5, 10, 15, 30)), st.integers(0, 40)))
    def advance_time(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(limit=st.integers(1, 4))
    def reap(self, limit: int) -> None:
        lapsed = {j.id: j for j in self.jobs.values()
                  if j.state is JobState.RUNNING and j.lease_until is not None and j.lease_until < self.now}
        reaped = self.store.reap(limit, now=self.now)
        self.touched.update(j.id for j in self.jobs.values() if j.state is JobState.RUNNING)
        ids = [r.id for r in reaped]
        assert len(ids) == len(set(ids)) == min(limit, len(lapsed)), (ids, sorted(lapsed))
        assert set(ids) <= set(lapsed), f"reaped {ids}; only {sorted(lapsed)} had lapsed"
        left = [j.lease_until for i, j in lapsed.items() if i not in ids]
        if reaped and left:
            assert max(lapsed[i].lease_until for i in ids) <= min(left), "the reaper skipped an older lease"  # type: ignore[type-var]
        for r in reaped:
            m = lapsed[r.id]
            assert (r.attempt, r.worker) == (m.attempt, m.locked_by)
            timed_out = m.deadline is not None and m.deadline <= self.now
            assert r.outcome is (Outcome.TIMED_OUT if timed_out else Outcome.LEASE_EXPIRED)
            if m.cancel_requested:
                expected = JobState.CANCELLED
            elif m.attempt - m.released >= m.spec.max_attempts:
                expected = JobState.DEAD
            else:
                expected = JobState.QUEUED
            assert r.state is expected, f"reap of job {r.id}: {r.state}, not {expected}"
            assert m.locked_by is not None
            error = "attempt timed out after " if timed_out else f"worker lease expired (worker {m.locked_by})"
            m.finish(m.locked_by, r.outcome, expected, error)
            m.run_at = min(m.run_at, self.now)  # due again at once (no backoff), in its old place

    # -- the checks after every step -------------------------------------------------
    @invariant()
    def database_matches_model(self) -> None:
        rows = {j.id: j for j in self.store.list_jobs(limit=MAX_JOBS * 10)}
        assert set(rows) == set(self.jobs), f"database holds {sorted(rows)}, model {sorted(self.jobs)}"
        for job_id, m in self.jobs.items():
            job = rows[job_id]
            where = f"job {job_id} at {self.now}"
            got = (job.state, job.attempt, job.released, job.locked_by, job.cancel_requested)
            want = (m.state, m.attempt, m.released, m.locked_by, m.cancel_requested)
            assert got == want, f"{where}: (state, attempt, released, locked_by, cancel) {got} != {want}"
            assert job.max_attempts == m.spec.max_attempts
            if m.state is JobState.RUNNING:
                # I2: one owner, and it holds a lease.
                assert job.locked_by is not None and job.lease_until is not None, where
                assert job.lease_until == m.lease_until, f"{where}: lease_until {job.lease_until} != {m.lease_until}"
            else:
                assert job.lease_until is None, where
            if m.state is JobState.QUEUED:
                assert job.run_at == m.run_at, f"{where}: run_at {job.run_at} != {m.run_at}"
            if m.state is JobState.SUCCEEDED:
                assert job.result == m.result, where
            if m.frozen is not None:  # I4: terminal is final (the row; the history below)
                assert replace(job, attempts=[]) == replace(m.frozen, attempts=[]), (
                    f"{where}: a terminal job changed:\n{m.frozen}\n{job}")
            if job_id in self.touched:
                self._check_history(m, self._get(job_id))
        self.touched.clear()

    def _check_history(self, m: MJob, job: Job) -> None:
        where = f"job {m.id} at {self.now}"
        unfinished = [(a.attempt, a.worker) for a in job.attempts if a.outcome is None]
        finished = {a.attempt: (a.worker, a.outcome) for a in job.attempts if a.outcome is not None}
        # I2: the running attempt is the only unfinished one.
        assert unfinished == ([(m.attempt, m.locked_by)] if m.state is JobState.RUNNING else []), where
        # One attempts row per finished attempt, numbered 1..n without gaps,
        # each with the worker and outcome that ended it.
        assert finished == m.outcomes, f"{where}: attempts {finished} != {m.outcomes}"
        for a in job.attempts:
            if a.outcome is not None:
                want = m.errors[a.attempt]
                assert (a.error is None) if want is None else (a.error or "").startswith(want), (
                    f"{where}: attempt {a.attempt} error {a.error!r}, expected {want!r}")
        last_finished = m.attempt - (1 if m.state is JobState.RUNNING else 0)
        assert sorted(finished) == list(range(1, last_finished + 1)), where
        if m.state in TERMINAL_STATES:  # I4: terminal is final, history included
            if m.frozen is None:
                assert job.finished_at is not None, where
                m.frozen = job
            else:
                assert job == m.frozen, f"{where}: a terminal job changed:\n{m.frozen}\n{job}"

    @invariant()
    def beliefs_are_tokens(self) -> None:
        for worker, held in self.beliefs.items():
            for job_id, attempt in held.items():
                assert (job_id, attempt, worker) in self.tokens


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_store_state_machine(backend: str) -> None:
    if backend == "postgresql":
        _require_pg()
    run_state_machine_as_test(lambda: StoreMachine(backend), settings=SETTINGS[backend])
