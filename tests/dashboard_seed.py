"""A database with jobs in every state, made through the real store
operations (claims, fenced failures, a lapsed lease and its reaping), for the
dashboard tests."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

from tether import JobContext, Tether
from tether.model import NewJob, Outcome, WorkerInfo
from tether.store import Store

XSS = "<script>alert('x')</script>"


@dataclass
class Seeded:
    queued: int
    running: int
    succeeded: int
    dead: int  # three attempts: failed, lease expired (recovered), failed; args and errors hold <script>
    cancelled: int
    retryable: int  # dead, for the retry action


def seed(app: Tether) -> Seeded:
    @app.task(name="reports.build", queue="reports", retry_backoff=0)
    def build(ctx: JobContext, **kwargs: object) -> None: ...

    @app.task(name="mail.send", queue="mail", retry_backoff=0, max_attempts=1)
    def send(ctx: JobContext, **kwargs: object) -> None: ...

    store = app.store
    store.register_worker(WorkerInfo(id="worker-a@host", host="host", pid=os.getpid(), proc_start=None,
                                     started_at=None, last_seen=None, queues=["reports", "mail"],  # type: ignore[arg-type]
                                     concurrency=4))
    dead = build.using(max_attempts=3).enqueue(title=XSS, pages=3)
    [c] = store.claim("worker-a@host", ["reports"], 1, 30)
    store.fail("worker-a@host", dead, c.attempt, outcome=Outcome.FAILED, error=f"ValueError: bad title {XSS}",
               traceback=f"Traceback (most recent call last):\n  File \"app.py\", line 1\nValueError: {XSS}")
    [c] = store.claim("worker-b@gone", ["reports"], 1, 30)
    store.lapse_leases(["worker-b@gone"])
    store.reap(10)
    [c] = store.claim("worker-a@host", ["reports"], 1, 30)
    store.fail("worker-a@host", dead, c.attempt, outcome=Outcome.FAILED, error="RuntimeError: still broken")

    succeeded = send.enqueue(to="ada@example.com")
    [c] = store.claim("worker-a@host", ["mail"], 1, 30)
    store.complete("worker-a@host", [(succeeded, c.attempt, '{"sent": true}')])

    retryable = send.enqueue(to="bob@example.com")
    [c] = store.claim("worker-a@host", ["mail"], 1, 30)
    store.fail("worker-a@host", retryable, c.attempt, outcome=Outcome.FAILED, error="SMTPError: 421 try later")

    cancelled = send.using(delay=3600).enqueue(to="eve@example.com")
    store.cancel(cancelled)

    running = build.using(limit_key="tenant:<b>7").enqueue(title="Q3 report", pages=40)
    [c] = store.claim("worker-a@host", ["reports"], 1, 300)
    store.progress("worker-a@host", running, c.attempt, 0.4, "page 16 of 40", 300)

    queued = build.using(delay=3600).enqueue(title="Q4 report", pages=12)
    return Seeded(queued=queued, running=running, succeeded=succeeded, dead=dead, cancelled=cancelled,
                  retryable=retryable)


def seed_history(store: Store, minutes: int = 50) -> tuple[int, int]:
    """Jobs finished over the last ``minutes`` minutes (2 to 6 a minute, an
    attempt failing every seventh minute and retried later), at past times
    through ``now=``: the throughput chart's picture. Returns how many
    attempts succeeded and failed."""
    now, ok, bad = store.db_now(), 0, 0
    for k in range(minutes, 0, -1):
        at = now - timedelta(minutes=k)
        n = 2 + (k * 7) % 5
        store.enqueue([NewJob(task="reports.build", args_json="{}", queue="history") for _ in range(n)], now=at)
        claimed = store.claim("worker-a@host", ["history"], n, 30, now=at + timedelta(seconds=1))
        failing, done = (claimed[:1], claimed[1:]) if k % 7 == 0 else ([], claimed)
        for c in failing:
            store.fail("worker-a@host", c.id, c.attempt, outcome=Outcome.FAILED, error="S3 timed out",
                       now=at + timedelta(seconds=2))
        store.complete("worker-a@host", [(c.id, c.attempt, None) for c in done], now=at + timedelta(seconds=20))
        ok, bad = ok + len(done), bad + len(failing)
    return ok, bad
