"""I7, exactly-once effects in the database: the chaos run's transactional
workload and its check.

Jobs of the transactional tasks (``TX_TASKS``) each add one row, (job, attempt,
worker), to an effects table inside ``ctx.transaction()``. Whatever the faults
did (a worker killed or stopped mid-block, cut off before its commit, its
lease reaped and the job re-claimed, even by the same worker id), the
database must end with:

- every succeeded transactional job: exactly one effect row, written by the
  attempt that succeeded (its number and its worker);
- no effect row of an attempt that did not succeed (failed, reaped, released,
  cancelled, or one the database never recorded as finished);
- no effect row for a job that is not transactional, or not this run's.

The check reads only the database's final state: the effects table beside
the jobs and attempts tables, which is what the promise is about.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import parse_database_url
from ..store import Store
from ..store.sqlfile import load_queries
from .checker import AttemptRow, CheckReport, Invariant, JobRow
from .collect import read_jobs

__all__ = ["EFFECTS_TABLE", "TX_TASKS", "EffectRow", "Effects", "check_effects"]

EFFECTS_TABLE = "tether_chaos_effects"
#: the transactional workload's task names (a def handler and an async def one)
TX_TASKS = ("tether.chaos.effect", "tether.chaos.effect_async")
I7_TITLE = ("exactly-once effects: every succeeded job has exactly one effect row, and no effect row belongs "
            "to an attempt that did not succeed")


@dataclass(frozen=True, slots=True)
class EffectRow:
    job_id: int
    attempt: int
    worker: str


class Effects:
    """The effects table of one chaos database (URL as the workers get it)."""

    def __init__(self, url: str) -> None:
        dsn = parse_database_url(url)
        self.backend = dsn.backend
        self.url = dsn.url
        sqlite = dsn.backend == "sqlite"
        table = EFFECTS_TABLE if sqlite else f'"{dsn.schema}".{EFFECTS_TABLE}'
        jobs = "tether_jobs" if sqlite else f'"{dsn.schema}".jobs'
        self.q = load_queries(__package__ or "tether.chaos", "effects.sql", {"table": table, "jobs": jobs})
        #: the insert a handler runs on its ctx.transaction() connection
        self.insert = self.q[f"insert_{self.backend}"]

    def _connect(self) -> Any:
        if self.backend == "sqlite":
            return sqlite3.connect(self.url, timeout=30)
        import psycopg

        return psycopg.connect(self.url, autocommit=True)

    def create(self) -> None:
        conn = self._connect()
        try:
            conn.execute(self.q[f"create_{self.backend}"])
            if self.backend == "sqlite":
                conn.commit()
        finally:
            conn.close()

    def read(self) -> list[EffectRow]:
        conn = self._connect()
        try:
            return [EffectRow(int(j), int(a), str(w)) for j, a, w in conn.execute(self.q["read"]).fetchall()]
        finally:
            conn.close()

    def tasks(self) -> dict[int, str]:
        conn = self._connect()
        try:
            return {int(i): str(t) for i, t in conn.execute(self.q["tasks"]).fetchall()}
        finally:
            conn.close()

    def judge(self, report: CheckReport, jobs: Mapping[int, JobRow], attempts: Iterable[AttemptRow],
              store: Store | None = None) -> CheckReport:
        """Add I7 (and the effect rows' count) to the checker's report.

        ``store``: where to read the jobs that have effect rows but are not in
        ``jobs``: enqueues the producer never heard back about (the
        connection was lost at the commit, as in a failover or a restart),
        which committed and ran all the same. Their effects are judged
        against their own attempts (without them every such effect row read
        as a stale attempt's: a 10-minute failover run found two)."""
        effects = self.read()
        unheard = sorted({e.job_id for e in effects} - set(jobs))
        if store is not None and unheard:
            more, more_attempts = read_jobs(store, unheard)
            jobs, attempts = {**jobs, **more}, [*attempts, *more_attempts]
        report.invariants["I7"] = check_effects(jobs, self.tasks(), attempts, effects)
        report.counts["effect_rows"] = len(effects)
        return report


def check_effects(jobs: Mapping[int, JobRow], tasks: Mapping[int, str], attempts: Iterable[AttemptRow],
                  effects: Iterable[EffectRow]) -> Invariant:
    """I7 over the final state: ``tasks`` gives each job's task name (the
    transactional ones are checked), ``attempts`` the finished attempt rows."""
    inv = Invariant("I7", I7_TITLE)
    outcome = {(a.job_id, a.attempt): a for a in attempts}
    by_job: dict[int, list[EffectRow]] = defaultdict(list)
    for e in effects:
        by_job[e.job_id].append(e)
    for job_id, rows in sorted(by_job.items()):
        if tasks.get(job_id) not in TX_TASKS:
            inv.violations.append(f"job {job_id}: {len(rows)} effect row(s), but it is not a transactional job "
                                  "of this run")
            continue
        for e in rows:
            a = outcome.get((job_id, e.attempt))
            if a is None or a.outcome != "succeeded":
                inv.violations.append(
                    f"job {job_id}: an effect row of attempt {e.attempt} (worker {e.worker}), an attempt that "
                    f"did not succeed ({a.outcome if a else 'no finished attempt row'}): a stale attempt's "
                    "write landed")
            elif a.worker != e.worker:
                inv.violations.append(f"job {job_id}: attempt {e.attempt}'s effect row names worker {e.worker}, "
                                      f"but the database says {a.worker} ran it")
    for job_id, job in sorted(jobs.items()):
        if tasks.get(job_id) not in TX_TASKS:
            continue
        inv.checked += 1
        rows = by_job.get(job_id, [])
        if job.state == "succeeded" and len(rows) != 1:
            inv.violations.append(f"job {job_id}: succeeded with {len(rows)} effect rows, not exactly one "
                                  f"(attempts {sorted(e.attempt for e in rows)})")
        elif job.state != "succeeded" and rows and job.state in ("dead", "cancelled"):
            inv.violations.append(f"job {job_id}: ended {job.state} but {len(rows)} effect row(s) landed")
    return inv
