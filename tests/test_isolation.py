"""``isolation="process"`` with real workers and real child processes on both
backends: handlers stuck in a pure-Python loop or in C calls are killed at
their timeout and on cancel, and their retries never run beside them (the
first attempt's pid is checked gone when the retry starts); a lost lease
kills the child; a crashed child fails its attempt with a named reason;
children are recycled by task count and by memory; middleware, progress,
Retry/Discard and results cross the process boundary."""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tether import ConfigError, Discard, JobContext, JobState, Outcome, Retry, Tether
from tether.model import ClaimedJob
from tether.worker import executor
from tether.worker.isolation import ChildPool

from .conftest import take_from
from .test_worker import FAST, is_final, running, wait_job

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="process isolation forks")


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process still running code (a zombie is not).
    Reaped between the open and the read, it reads as ProcessLookupError
    (ESRCH): gone too (what made the combined runs' isolation tests flaky)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until(check: Callable[[], bool], timeout: float = 10, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} did not hold within {timeout}s"
        time.sleep(0.02)


def read_pid(path: Path, timeout: float = 10, what: str = "the handler's start") -> int:
    """The pid a handler writes to ``path`` once it is whole (``write_text``
    creates the file empty, then writes: a reader in between read '')."""
    wait_until(lambda: path.exists() and path.read_text().strip().isdigit(), timeout, what)
    return int(path.read_text())


def test_a_handler_runs_in_a_child_with_middleware_progress_and_its_result(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    seen: list[str] = []

    @app.middleware
    def mark(ctx: JobContext, call_next: Callable[[], Any]) -> Any:
        return {"middleware_pid": os.getpid(), "handler": call_next()}

    @app.task(name="work", isolation="process")
    def work(ctx: JobContext, n: int) -> dict[str, Any]:
        ctx.progress(0.5, "half way")
        seen.append("in the child")  # the child's copy of the list: the worker's stays empty
        return {"pid": os.getpid(), "n": n * 2, "cancelled": ctx.cancelled}

    jid = work.enqueue(n=21)
    with running(app):
        job = wait_job(app, jid, is_final)
    assert job.state is JobState.SUCCEEDED, job
    result = job.result
    assert result["handler"]["n"] == 42 and result["handler"]["cancelled"] is False
    assert result["handler"]["pid"] != os.getpid() and result["middleware_pid"] == result["handler"]["pid"]
    assert job.progress_message == "half way"  # (a success sets progress to 1)
    assert seen == []
    assert not alive(result["handler"]["pid"])  # the worker stopped: its children are gone


def test_an_infinite_loop_is_killed_at_its_timeout_and_its_retry_never_overlaps(
        make_app: Callable[..., Tether], tmp_path: Path) -> None:
    app = make_app(**FAST)

    @app.task(name="spin", isolation="process", timeout=1, max_attempts=2, retry_backoff=0)
    def spin(ctx: JobContext, where: str) -> dict[str, Any]:
        Path(where, f"pid-{ctx.attempt}").write_text(str(os.getpid()))
        if ctx.attempt == 1:
            while True:  # never returns, never looks at ctx
                pass
        first = int(Path(where, "pid-1").read_text())
        return {"first_alive_at_retry": alive(first), "pid": os.getpid(), "first": first}

    jid = spin.enqueue(where=str(tmp_path))
    with running(app):
        job = wait_job(app, jid, is_final, timeout=20)
    assert job.state is JobState.SUCCEEDED, job
    assert [a.outcome for a in job.attempts] == [Outcome.TIMED_OUT, Outcome.SUCCEEDED]
    assert job.result["first_alive_at_retry"] is False
    assert job.result["pid"] != job.result["first"]


def test_a_timed_out_attempts_outcome_is_written_after_its_child_is_reaped(
        make_app: Callable[..., Tether], monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL is sent, not yet obeyed: until the child is reaped it may still
    be finishing a system call (the combined runs saw the first attempt's
    child not yet gone when its retry looked). The worker's outcome, and so a
    retry it allows, waits for the reaping. Here the reaping is held back
    (half a second, or until the outcome is seen): the outcome still comes
    after it."""
    order: list[str] = []
    outcome = threading.Event()
    reap = ChildPool._reap

    def held(pool: ChildPool, child: Any, *, wait: float) -> str:
        outcome.wait(0.5)
        ended = reap(pool, child, wait=wait)
        order.append("reaped")
        return ended

    monkeypatch.setattr(ChildPool, "_reap", held)
    monkeypatch.setattr(executor, "REAP_WAIT", 30.0)  # (its bound, not reached here)
    # (a reaper whose first tick falls at a random point of its hour-long interval, so not in these
    # seconds (at 10 s it fell, one run in about fifteen, just past the deadline): past
    # the attempt's deadline in the database, held here, a reaper would end it first, and the worker's
    # own outcome would be refused)
    app = make_app(**{**FAST, "reaper_interval": 3600})

    @app.on("job.failed")
    def failed(event: Any) -> None:
        order.append("outcome")
        outcome.set()

    @app.task(name="spin", isolation="process", timeout=2, max_attempts=1)
    def spin(ctx: JobContext) -> None:
        while True:
            pass

    jid = spin.enqueue()
    with running(app):
        job = wait_job(app, jid, is_final)
        # the event follows the outcome's commit, which wait_job may see first (a combined run did)
        outcome.wait(10)
    assert [a.outcome for a in job.attempts] == [Outcome.TIMED_OUT]
    assert order == ["reaped", "outcome"], (order, job.last_error)


HANGS = {
    "sleep": lambda: time.sleep(3600),
    "select": lambda: select.select([os.pipe()[0]], [], []),  # a blocking C call on a pipe nobody writes
    "pause": signal.pause,
}


@pytest.mark.parametrize("hang", sorted(HANGS))
def test_a_handler_stuck_in_a_c_call_is_killed_at_its_timeout(make_app: Callable[..., Tether], tmp_path: Path,
                                                              hang: str) -> None:
    app = make_app(**FAST)

    @app.task(name="stuck", isolation="process", timeout=0.5, max_attempts=1)
    def stuck(ctx: JobContext, where: str) -> None:
        Path(where, "pid").write_text(str(os.getpid()))
        HANGS[hang]()

    jid = stuck.enqueue(where=str(tmp_path))
    with running(app):
        job = wait_job(app, jid, is_final)
        pid = int((tmp_path / "pid").read_text())
        wait_until(lambda: not alive(pid), 2, "the stuck child's death")
    assert job.state is JobState.DEAD and [a.outcome for a in job.attempts] == [Outcome.TIMED_OUT]


@pytest.mark.parametrize("hang", sorted(HANGS))
def test_a_cancel_request_kills_a_handler_stuck_in_a_c_call(make_app: Callable[..., Tether], tmp_path: Path,
                                                            hang: str) -> None:
    app = make_app(**FAST)

    @app.task(name="stuck", isolation="process")
    def stuck(ctx: JobContext, where: str) -> None:
        Path(where, "pid").write_text(str(os.getpid()))
        HANGS[hang]()

    jid = stuck.enqueue(where=str(tmp_path))
    with running(app):
        pid = read_pid(tmp_path / "pid")
        app.cancel(jid)
        job = wait_job(app, jid, is_final)
        assert not alive(pid)
    assert job.state is JobState.CANCELLED and [a.outcome for a in job.attempts] == [Outcome.CANCELLED]


def test_a_lost_lease_kills_the_child_before_anyone_else_runs_the_job(make_app: Callable[..., Tether],
                                                                       tmp_path: Path) -> None:
    """The worker is alive and beating: another worker's reaper takes the job
    (take_from), the fence refuses the next heartbeat, and the child goes,
    though its handler never looks at ctx. Its ticks (CLOCK_MONOTONIC, one
    clock for every process) stop before the next attempt's first."""
    app = make_app(**FAST)

    @app.task(name="busy", isolation="process")
    def busy(ctx: JobContext, where: str) -> None:
        Path(where, f"pid-{ctx.attempt}").write_text(str(os.getpid()))
        while True:
            with open(Path(where, f"ticks-{ctx.attempt}"), "a") as f:
                f.write(f"{time.monotonic()}\n")
            time.sleep(0.005)

    def ticks(attempt: int) -> list[float]:
        path = tmp_path / f"ticks-{attempt}"
        # whole lines only: a child killed mid-write leaves a partial last one ("17" of "1795886.2")
        return [float(t) for t in path.read_text().split("\n")[:-1]] if path.exists() else []

    jid = busy.enqueue(where=str(tmp_path))
    with running(app) as w:
        wait_until(lambda: bool(ticks(1)), what="the handler's start")
        pid = int((tmp_path / "pid-1").read_text())
        take_from(app.store, w.id, jid)
        wait_until(lambda: not alive(pid), 5, "the child's death after the lost lease")
        wait_until(lambda: bool(ticks(2)), 10, "the next attempt's start")  # this worker claims it again
        app.cancel(jid)
        wait_job(app, jid, is_final)
    assert max(ticks(1)) < min(ticks(2)), (max(ticks(1)), min(ticks(2)))  # no straggler beside the next attempt
    assert int((tmp_path / "pid-2").read_text()) != pid
    assert w.state.counts["lost"] == 1, dict(w.state.counts)


@pytest.mark.parametrize(("how", "reason"), [("segfault", "killed by signal SIGSEGV"),
                                             ("exit", "exited with status 3")])
def test_a_child_that_dies_fails_its_attempt_at_once_with_the_reason(make_app: Callable[..., Tether], how: str,
                                                                     reason: str) -> None:
    app = make_app(**FAST)

    @app.task(name="crash", isolation="process", max_attempts=1)
    def crash(ctx: JobContext) -> None:
        if how == "segfault":
            import ctypes
            ctypes.string_at(0)
        os._exit(3)

    jid = crash.enqueue()
    started = time.monotonic()
    with running(app):
        job = wait_job(app, jid, is_final)
    assert time.monotonic() - started < FAST["lease_ttl"] + 1  # not by lease expiry
    assert job.state is JobState.DEAD
    assert "HandlerProcessDied" in (job.last_error or "") and reason in (job.last_error or "")


@pytest.mark.parametrize(("options", "most_per_child"), [({"max_tasks_per_child": 2}, 2),
                                                         ({"max_memory_per_child": "1MB"}, 1),
                                                         ({"max_memory_per_child": "2GB"}, 6)])
def test_children_are_recycled_by_task_count_and_memory(make_app: Callable[..., Tether], options: dict[str, Any],
                                                        most_per_child: int) -> None:
    app = make_app(**FAST)

    @app.task(name="pid")
    def pid(ctx: JobContext) -> int:
        return os.getpid()

    ids = [pid.enqueue() for _ in range(6)]
    with running(app, concurrency=1, isolation="process", **options):
        pids = [wait_job(app, j, is_final).result for j in ids]
    counts = {p: pids.count(p) for p in pids}
    assert os.getpid() not in counts
    assert max(counts.values()) == most_per_child, counts
    assert not any(alive(p) for p in counts)


def test_retry_discard_and_a_foreign_exception_cross_back(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    class Unpicklable(Exception):
        def __init__(self, a: int, b: int) -> None:
            super().__init__(f"{a}+{b}")

    @app.task(name="policy", isolation="process", max_attempts=1)
    def policy(ctx: JobContext, mode: str) -> str:
        if mode == "retry" and ctx.attempt == 1:
            raise Retry(delay=0)
        if mode == "discard":
            raise Discard("no such customer")
        if mode == "foreign":
            raise Unpicklable(1, 2)
        return "done"

    r, d, f = policy.enqueue(mode="retry"), policy.enqueue(mode="discard"), policy.enqueue(mode="foreign")
    with running(app):
        jr, jd, jf = (wait_job(app, j, is_final) for j in (r, d, f))
    assert (jr.state, jr.result) == (JobState.SUCCEEDED, "done")
    assert [a.outcome for a in jr.attempts] == [Outcome.SNOOZED, Outcome.SUCCEEDED]
    assert (jd.state, jd.last_error) == (JobState.DEAD, "discarded: no such customer")
    assert jf.state is JobState.DEAD and "1+2" in (jf.last_error or "")
    tb = jf.attempts[0].traceback or ""
    assert "Unpicklable" in tb and "in policy" in tb  # the child's own traceback


def test_isolation_options_are_checked(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)
    with pytest.raises(ConfigError, match="isolation must be"):
        app.task(name="x", isolation="fork")(lambda ctx: None)
    with pytest.raises(ConfigError, match="async def handler"):
        @app.task(name="y", isolation="process")
        async def y(ctx: JobContext) -> None: ...
    with pytest.raises(ConfigError, match="max_memory_per_child"):
        app.worker(isolation="process", max_memory_per_child="lots")
    with pytest.raises(ConfigError, match="max_tasks_per_child"):
        app.worker(isolation="process", max_tasks_per_child=0)
    with pytest.raises(ConfigError, match="isolation must be one of"):
        app.worker(isolation="fork")


LEAK: list[bytearray] = []


def touched(size: int) -> bytearray:
    """``size`` bytes made resident page by page (no temporary copy)."""
    buf = bytearray(size)
    for i in range(0, size, 4096):
        buf[i] = 1
    return buf


def test_a_leaking_child_is_replaced_once_past_its_memory_limit(make_app: Callable[..., Tether]) -> None:
    """Each job leaks 64 MiB in its child (kept in a module list, touched so it
    is resident); with a limit 100 MiB above a fresh child's size, the child
    is replaced after its second job: pids go a, a, b, b, c."""
    app = make_app(**FAST)

    @app.task(name="leak")
    def leak(ctx: JobContext, mib: int) -> dict[str, int]:
        # touched page by page: no 2x transient (b"x" * n, then its copy), which the worker's
        # sampling of a running child's memory may see and recycle the child for
        LEAK.append(touched(mib * 1024 * 1024))
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return {"pid": os.getpid(), "rss": pages * os.sysconf("SC_PAGE_SIZE")}

    probe = leak.enqueue(mib=0)
    with running(app, concurrency=1, isolation="process"):
        base = wait_job(app, probe, is_final).result["rss"]
    ids = [leak.enqueue(mib=64) for _ in range(5)]
    with running(app, concurrency=1, isolation="process", max_memory_per_child=base + 100 * 1024 * 1024):
        pids = [wait_job(app, j, is_final).result["pid"] for j in ids]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4], pids
    assert LEAK == []  # the leaks were the children's


def test_a_child_whose_job_grew_past_the_memory_limit_is_replaced_after_it(make_app: Callable[..., Tether],
                                                                          tmp_path: Path) -> None:
    """The limit is read while a job runs, not only at its end: this job
    touches 256 MiB, holds it until the worker has seen it (its sample of the
    child's /proc entry), then gives it back (an mmap'd buffer: its resident
    memory drops), so the child's own figure at the end is under the limit.
    The child is still replaced after the job, not killed during it."""
    app = make_app(**FAST)
    mib = 1024 * 1024

    @app.task(name="spike")
    def spike(ctx: JobContext, where: str, size: int) -> int:
        buf = touched(size)
        Path(where, f"grown-{ctx.job_id}").write_text("")
        while not Path(where, "release").exists():
            time.sleep(0.01)
        del buf
        return os.getpid()

    limit = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") + 100 * mib
    with running(app, concurrency=1, isolation="process", max_memory_per_child=limit) as w:
        first = spike.enqueue(where=str(tmp_path), size=256 * mib)
        wait_until(lambda: (tmp_path / f"grown-{first}").exists(), what="the job's growth")
        pool = w.executor.runners.pool
        assert pool is not None
        # (white-box: what the worker has read of its busy child, before the job lets go of the memory)
        wait_until(lambda: any(c.rss > limit for c in list(pool._children.values())), what="the sample")
        (tmp_path / "release").write_text("")
        one = wait_job(app, first, is_final)
        two = wait_job(app, spike.enqueue(where=str(tmp_path), size=0), is_final)
    assert one.state is two.state is JobState.SUCCEEDED, (one, two)
    assert one.result != two.result and pool.retired >= 1, (one.result, two.result, pool.retired)


def test_ctx_transaction_in_a_child_fails_the_attempt_with_a_clear_error(make_app: Callable[..., Tether]) -> None:
    """The transaction that makes a job's success exactly-once is the
    worker's: in a child, ctx.transaction() is refused, the error saying why
    and what to do, and nothing of the block runs."""
    app = make_app(**FAST)

    @app.task(name="pay", isolation="process", max_attempts=1)
    def pay(ctx: JobContext) -> None:
        with ctx.transaction() as conn:
            conn.execute("SELECT 1")
        raise AssertionError("the block ran")

    jid = pay.enqueue()
    with running(app):
        job = wait_job(app, jid, is_final)
    assert job.state is JobState.DEAD
    error = job.last_error or ""
    assert error.startswith("ConfigError: ctx.transaction() is not available to a handler run in a child process "
                            "(isolation='process')"), error
    assert f"job {jid}'s success" in error and "a worker without --isolation process" in error, error


def test_an_idle_child_that_died_is_replaced_and_the_job_runs(make_app: Callable[..., Tether]) -> None:
    app = make_app(**FAST)

    @app.task(name="pid", isolation="process", max_attempts=1)
    def pid(ctx: JobContext) -> int:
        return os.getpid()

    with running(app, concurrency=1):
        first = wait_job(app, pid.enqueue(), is_final).result
        os.kill(first, signal.SIGKILL)  # idle, waiting for its next job
        wait_until(lambda: not alive(first), what="the idle child's death")
        second = wait_job(app, pid.enqueue(), is_final)
    assert second.state is JobState.SUCCEEDED and second.result != first, (first, second.state, second.last_error)


def test_a_handler_in_a_child_enqueues_and_reads_on_connections_of_its_own(make_app: Callable[..., Tether]) -> None:
    """The child lets go of the worker's store (its sockets are the worker's)
    and opens its own: the follow-up it enqueues runs, and the worker, whose
    connections the child never touched, goes on."""
    app = make_app(**FAST)

    @app.task(name="follow")
    def follow(ctx: JobContext, n: int) -> int:
        return n + 1

    @app.task(name="first", isolation="process")
    def first(ctx: JobContext, n: int) -> dict[str, Any]:
        seen = app.get_job(ctx.job_id)
        return {"next": follow.enqueue(n=n), "state": None if seen is None else seen.state.value}

    ids = [first.enqueue(n=i) for i in range(4)]
    with running(app, concurrency=2):
        results = [wait_job(app, j, is_final).result for j in ids]
        followed = [wait_job(app, r["next"], is_final) for r in results]
    assert [r["state"] for r in results] == ["running"] * 4
    assert [(j.state, j.result) for j in followed] == [(JobState.SUCCEEDED, i + 1) for i in range(4)]


def _ctx(job_id: int) -> JobContext:
    job = ClaimedJob(id=job_id, attempt=1, task="pid", args={}, queue="default", priority=0, max_attempts=1,
                     lease_ttl=30.0, timeout=None, claimed_at=datetime.now(UTC))
    return JobContext(job, worker_id="w", report_progress=lambda job, f, m: False)


def test_an_idle_child_outlives_the_thread_that_asked_for_it() -> None:
    """Linux sends a child's PR_SET_PDEATHSIG when the *thread* that forked it
    ends, not its process. A handler thread that forked its child itself took
    the idle child with it when it ended (the worker's handler threads end at
    its shutdown, before the pool's close: its idle children were SIGKILLed
    rather than told to exit). The pool forks from a thread of its own: the
    child survives its first caller's thread and runs the next job."""
    pool = ChildPool(lambda task: lambda ctx: os.getpid(), worker_id="w", max_payload_bytes=1 << 20)
    pids: list[int] = []
    try:
        caller = threading.Thread(target=lambda: pids.append(pool.call("pid", _ctx(1))))
        caller.start()
        caller.join()
        tid = caller.native_id
        # gone from the kernel too (join() returns a moment before): any death signal has been sent by now
        wait_until(lambda: not Path(f"/proc/self/task/{tid}").exists(), what="the caller thread's exit")
        assert alive(pids[0])
        pids.append(pool.call("pid", _ctx(2)))
        assert pids[1] == pids[0] and pool.started == 1, (pids, pool.started)
    finally:
        pool.close()
    assert not alive(pids[0])
