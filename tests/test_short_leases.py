"""A job's own lease shorter than two of its worker's beats.

A per-job or per-task ``lease_ttl`` is checked against the timers of the app
that enqueued or registered it, and the claim grants it as it is. A worker
with a longer heartbeat interval than that app's then let the lease lapse
before its first beat: the job was reaped and claimed again while its first
attempt still ran. The worker now beats sooner while it holds such a job (at
least two beats per held lease). Real workers on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tether import JobContext, JobState, Outcome, Tether
from tether.model import Beat, NewJob
from tether.worker.heartbeat import Heartbeater
from tether.worker.inflight import InFlight, Running

from .test_worker import is_final, running, wait_job

#: the producer's timers: a job lease of 1 s is two of its beats, so it is taken
PRODUCER = {"lease_ttl": 3.0, "heartbeat_interval": 0.5, "reaper_interval": 0.3}
#: the worker's: beats every 2.5 s, four times longer than the job's lease allows
WORKER = {"lease_ttl": 6.0, "heartbeat_interval": 2.5, "reaper_interval": 0.3}


def test_a_job_lease_shorter_than_two_of_the_worker_s_beats_is_renewed_in_time(
    make_app: Callable[..., Tether],
) -> None:
    producer, worker_app = make_app(**PRODUCER), make_app(**WORKER)
    lock = threading.Lock()
    live: list[int] = []
    overlaps: list[list[int]] = []

    def body(ctx: JobContext) -> None:
        with lock:
            live.append(ctx.attempt)
            if len(live) > 1:
                overlaps.append(list(live))
        try:
            time.sleep(3.0)  # three of the job's leases, a def handler: nothing interrupts it
        finally:
            with lock:
                live.remove(ctx.attempt)

    producer.task(name="short_lease", max_attempts=3)(body)
    worker_app.task(name="short_lease", max_attempts=3)(body)
    job_id = producer.get_task("short_lease").using(lease_ttl=1.0).enqueue()

    with running(worker_app, concurrency=2):
        job = wait_job(worker_app, job_id, is_final, timeout=20)

    assert overlaps == [], f"attempts ran at once: {overlaps}"
    assert job.state is JobState.SUCCEEDED, job
    assert [a.outcome for a in job.attempts] == [Outcome.SUCCEEDED], job.attempts


def _hold(app: Tether, inflight: InFlight, lease_ttl: float) -> None:
    """Claim a job of this lease as worker w-1 and hold it, as the executor does."""
    app.store.enqueue([NewJob(task="t", args_json="{}", lease_ttl=lease_ttl)])
    sent = time.monotonic()
    (job,) = app.store.claim("w-1", ["default"], 1, WORKER["lease_ttl"])
    assert job.lease_ttl == lease_ttl
    ctx = JobContext(job, worker_id="w-1", report_progress=lambda job, fraction, message: False)
    inflight.add(Running(job=job, ctx=ctx, local_deadline=sent + job.lease_ttl, started=sent))


def test_the_beat_comes_at_half_the_shortest_held_lease(make_app: Callable[..., Tether]) -> None:
    """``period()``: the worker's interval, unless a held job's lease is
    shorter than two of them; then half of that lease, renewed in one beat."""
    app = make_app(**WORKER)
    inflight = InFlight()
    hb = Heartbeater(app.store, "w-1", inflight, interval=2.5, lease_ttl=WORKER["lease_ttl"],
                     on_lost=lambda running, why: None, on_cancel_requested=lambda running: None)
    assert hb.period() == 2.5
    _hold(app, inflight, 6.0)
    assert hb.period() == 2.5
    _hold(app, inflight, 1.0)
    assert hb.period() == 0.5
    assert list(hb.run_once().values()) == [Beat.RENEWED, Beat.RENEWED]  # one statement for both
