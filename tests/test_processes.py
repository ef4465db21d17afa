"""The contract under real process faults: SIGKILL, SIGSTOP/SIGCONT, restarts,
SIGTERM, and handlers that hog the event loop or the CPU.

Workers are real processes (``tests/proc_app.py``) on a real SQLite file or a
real PostgreSQL schema, directly or through PgBouncer in transaction pooling
mode (where workers have no LISTEN and poll); timers are short so the suite
stays quick. Nothing here fakes a crash by back-dating a timestamp.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tether import JobState, Outcome
from tether.model import Job, NewJob
from tether.store import Store
from tether.worker.identity import process_is, process_start_time

from .conftest import BACKENDS, PGBOUNCER, backend_param

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "tests" / "proc_app.py"
T = TypeVar("T")

TTL, HB, REAPER = 2.0, 0.4, 0.5
SLACK = 1.5  # process start-up and scheduling on a busy two-core machine


class Workers:
    """Starts worker processes for one test and kills any left at the end."""

    def __init__(self, db_url: str, tmp: Path) -> None:
        self.db_url = db_url
        self.tmp = tmp
        self.marks = tmp / "marks"
        self.marks.mkdir()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}

    def start(self, **env: str | float) -> subprocess.Popen[bytes]:
        full = dict(os.environ)
        full.update({
            "TETHER_DATABASE_URL": self.db_url, "T_MARK_DIR": str(self.marks),
            "T_TTL": str(TTL), "T_HB": str(HB), "T_REAPER": str(REAPER),
            "PYTHONPATH": str(ROOT / "src"),
        })
        full.update({k: str(v) for k, v in env.items()})
        log = self.tmp / f"worker-{len(self.procs)}.log"
        with log.open("wb") as err:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen([sys.executable, str(APP)], env=full, stdout=subprocess.DEVNULL, stderr=err)
        self.procs.append(proc)
        self.logs[proc.pid] = log
        return proc

    def wait_started(self, proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
        wait_for(lambda: "started:" in self.log(proc) or proc.poll() is not None, timeout, "worker start")
        assert proc.poll() is None, self.log(proc)

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        return self.logs[proc.pid].read_text(errors="replace")

    def started(self, job_id: int) -> list[tuple[int, int]]:
        """(attempt, pid) of every handler start of this job."""
        out = []
        for p in self.marks.glob(f"{job_id}-*.start"):
            _, attempt, pid = p.stem.split("-")
            out.append((int(attempt), int(pid)))
        return sorted(out)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait(timeout=10)


def wait_for(check: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(params=[*BACKENDS, PGBOUNCER])
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


@pytest.fixture
def workers(db_url: str, store: Store, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(db_url, tmp_path)
    yield w
    w.close()


def enqueue(store: Store, task: str, queue: str = "default", max_attempts: int = 3, **args: Any) -> int:
    return store.enqueue([NewJob(task=task, args_json=json.dumps(args), queue=queue, max_attempts=max_attempts)])[0]


def job(store: Store, job_id: int) -> Job:
    j = store.get_job(job_id)
    assert j is not None
    return j


def finished(store: Store, job_id: int) -> Job | None:
    j = job(store, job_id)
    return j if j.state not in (JobState.QUEUED, JobState.RUNNING) else None


def test_sigkill_mid_job_is_recovered_by_a_sibling_within_the_bound(workers: Workers, store: Store) -> None:
    sigkill_mid_job_is_recovered_by_a_sibling(workers, store)


def sigkill_mid_job_is_recovered_by_a_sibling(workers: Workers, store: Store, **env: str) -> None:
    """SIGKILL the worker running a job while a live sibling runs; the sibling
    must finish it, with recovery (kill to re-claim) within TTL + reaper."""
    jid = enqueue(store, "sleepy", seconds=3)
    a = workers.start(**env)
    wait_for(lambda: workers.started(jid), 15, "worker A to start the job")
    b = workers.start(**env)  # a live sibling: recovery must come from the lease, not start-up reconciliation
    workers.wait_started(b)
    a.kill()
    killed_at = datetime.now(UTC)
    a.wait(timeout=5)

    done = wait_for(lambda: finished(store, jid), 25, "the job to finish")
    assert_recovered_by(done, dead=a.pid, sibling=b.pid, killed_at=killed_at)


def assert_recovered_by(done: Job, *, dead: int, sibling: int, killed_at: datetime) -> None:
    """Attempt 1 (on ``dead``) lapsed; attempt 2 succeeded on ``sibling`` within I5's bound."""
    assert done.state is JobState.SUCCEEDED
    assert done.result["pid"] == sibling
    first, second = done.attempts
    assert (first.attempt, first.outcome) == (1, Outcome.LEASE_EXPIRED)
    assert f"-{dead}-" in first.worker
    assert (second.attempt, second.outcome) == (2, Outcome.SUCCEEDED)
    recovery = (second.claimed_at - killed_at).total_seconds()
    assert recovery <= TTL + REAPER + SLACK, f"recovered after {recovery:.2f}s"


def test_restart_recovers_dead_predecessor_at_once_and_spares_live_sibling(
    workers: Workers, store: Store
) -> None:
    long_ttl = {"T_TTL": 30, "T_HB": 5, "T_REAPER": 30}
    sib_job = enqueue(store, "sleepy", queue="sib", seconds=6)
    sibling = workers.start(T_QUEUES="sib", **long_ttl)
    wait_for(lambda: workers.started(sib_job), 15, "the sibling to start its job")

    jid = enqueue(store, "sleepy", queue="mine", seconds=2)
    a = workers.start(T_QUEUES="mine", **long_ttl)
    wait_for(lambda: workers.started(jid), 15, "worker A to start the job")
    a.kill()
    a.wait(timeout=5)
    killed = time.monotonic()

    a2 = workers.start(T_QUEUES="mine", **long_ttl)  # same host: reconciles at start
    wait_for(lambda: len(workers.started(jid)) == 2, 15, "the restarted worker to take the job")
    assert time.monotonic() - killed < 10, "recovery waited for the 30 s lease instead of reconciling"
    assert workers.started(jid)[1] == (2, a2.pid)

    # The live sibling's job was not touched: still its first attempt, still its lease.
    sib = job(store, sib_job)
    assert sib.state is JobState.RUNNING
    assert sib.attempt == 1 and sib.locked_by is not None and f"-{sibling.pid}-" in sib.locked_by

    done = wait_for(lambda: finished(store, jid), 20, "the recovered job to finish")
    assert done.state is JobState.SUCCEEDED and done.result["pid"] == a2.pid
    assert done.attempts[0].outcome is Outcome.LEASE_EXPIRED
    sib_done = wait_for(lambda: finished(store, sib_job), 20, "the sibling's job to finish")
    assert sib_done.state is JobState.SUCCEEDED
    assert sib_done.attempt == 1 and sib_done.result["pid"] == sibling.pid
    assert [a.outcome for a in sib_done.attempts] == [Outcome.SUCCEEDED]


def test_an_unreaped_process_is_not_taken_for_a_live_predecessor() -> None:
    """A worker SIGKILLed under a parent that has not reaped it (a container
    whose PID 1 never reaps, or a supervisor that reaps late) is a zombie: it
    answers kill(pid, 0) and keeps its start time. Before, start-up recovery
    took it for a live sibling, and its jobs waited for their leases."""
    child = subprocess.Popen(["sleep", "30"])
    start = process_start_time(child.pid)
    try:
        assert process_is(child.pid, start)
        child.kill()
        wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] == "Z", 5, "a zombie")
        assert not process_is(child.pid, start) and not process_is(child.pid, None)
    finally:
        child.wait()


def test_sigstop_zombie_late_report_is_rejected(workers: Workers, store: Store) -> None:
    jid = enqueue(store, "sleepy", seconds=2.5)
    a = workers.start()
    wait_for(lambda: workers.started(jid), 15, "worker A to start the job")
    b = workers.start()
    workers.wait_started(b)
    a.send_signal(signal.SIGSTOP)
    try:
        done = wait_for(lambda: finished(store, jid), 25, "worker B to finish the job")
    finally:
        a.send_signal(signal.SIGCONT)
    assert done.result["pid"] == b.pid
    # The zombie wakes up with its handler about to finish: whether its heartbeat
    # thread fences it first or its completion is refused, it must say it lost the job.
    wait_for(lambda: "lost" in workers.log(a) or "refused" in workers.log(a), 15, "the zombie to learn it lost")
    time.sleep(1.0)  # give any late write every chance to land
    after = job(store, jid)
    assert after.state is JobState.SUCCEEDED
    assert after.result == done.result and after.attempt == 2
    assert [(x.attempt, x.outcome) for x in after.attempts] == [(1, Outcome.LEASE_EXPIRED), (2, Outcome.SUCCEEDED)]
    assert f"-{a.pid}-" in after.attempts[0].worker


def test_job_that_kills_its_worker_ends_dead_after_max_attempts(workers: Workers, store: Store) -> None:
    jid = enqueue(store, "suicide", max_attempts=3)
    for _ in range(6):
        w = workers.start()
        wait_for(lambda: w.poll() is not None or finished(store, jid), 20, "the worker to die or the job to end")  # noqa: B023
        if finished(store, jid):
            break
    else:
        pytest.fail("the job kept killing workers past its budget")
    done = job(store, jid)
    assert done.state is JobState.DEAD
    assert done.attempt == 3
    assert done.last_error is not None and "lease expired" in done.last_error
    assert [a.outcome for a in done.attempts] == [Outcome.LEASE_EXPIRED] * 3
    assert len(workers.started(jid)) == 3


def test_sigterm_releases_running_jobs_without_spending_budget(workers: Workers, store: Store) -> None:
    jid = enqueue(store, "sleepy", max_attempts=1, seconds=3)
    w = workers.start(T_SHUTDOWN=0.3)
    wait_for(lambda: workers.started(jid), 15, "the worker to start the job")
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=15) == 0
    released = job(store, jid)
    assert released.state is JobState.QUEUED
    assert (released.attempt, released.released, released.attempts_used) == (1, 1, 0)
    assert [a.outcome for a in released.attempts] == [Outcome.RELEASED]

    w2 = workers.start()
    done = wait_for(lambda: finished(store, jid), 20, "a second worker to finish the released job")
    assert done.state is JobState.SUCCEEDED, "a release must not spend the only attempt"
    assert done.result["pid"] == w2.pid


def test_second_signal_stops_at_once(workers: Workers, store: Store) -> None:
    jid = enqueue(store, "sleepy", seconds=60)
    w = workers.start(T_SHUTDOWN=60)
    wait_for(lambda: workers.started(jid), 15, "the worker to start the job")
    w.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert w.poll() is None, "the first signal waits for running jobs"
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=10) == 0
    assert job(store, jid).state is JobState.QUEUED


@pytest.mark.parametrize("task", ["block_loop", "spin"])
def test_handler_hogging_loop_or_cpu_keeps_its_lease(workers: Workers, store: Store, task: str) -> None:
    jid = enqueue(store, task, seconds=TTL * 2.5)
    w = workers.start()
    wait_for(lambda: workers.started(jid), 15, "the worker to start the job")
    reaper = workers.start(T_QUEUES="nothing-here")  # reaps on its own free loop
    workers.wait_started(reaper)
    done = wait_for(lambda: finished(store, jid), 30, "the job to finish")
    assert done.state is JobState.SUCCEEDED
    assert done.attempt == 1, f"the lease lapsed under a busy handler: {done.attempts}"
    assert done.result["pid"] == w.pid
    assert [a.outcome for a in done.attempts] == [Outcome.SUCCEEDED]
