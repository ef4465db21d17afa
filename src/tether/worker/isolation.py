"""Process isolation (``isolation="process"``): a ``def`` handler runs in a
child process the worker can kill, so no straggler outlives its attempt.

The worker keeps everything that owns the job: the lease, the heartbeats,
the fence, the outcome's report. A handler thread takes an idle child from
the pool (or forks one), sends it the claimed job, and relays what comes
back: ``ctx.progress`` calls (written by the worker, the answer sent back,
so ``ctx.cancelled`` and ``StaleAttempt`` work in the child as in-process),
then the result (as JSON) or the exception (pickled when it can be, with the
child's traceback text; else a ``HandlerError`` that names it).

When the attempt ends without the handler (timed out, lost, shut down past
its grace) the executor kills the child with SIGKILL *before* the attempt's
outcome is written, so a retry can never run beside it; a cancel request
sends SIGTERM, then SIGKILL after KILL_GRACE. A child that dies on its own
(a segfault, the OOM killer, ``os._exit``) fails the attempt at once with
that reason (``HandlerProcessDied``). Children are recycled between jobs
after ``max_tasks`` jobs or once their resident memory passed ``max_memory``
bytes: at the job's end, or while it ran (the handler thread that waits for
the child reads its /proc entry every MEMORY_POLL seconds, a few microseconds
each: a job that grew past the limit and gave the memory back still has its
child replaced after it). A child is never killed for its memory mid-job
(the OOM killer's part: that fails the attempt as a crash). A child notices its worker's death (PR_SET_PDEATHSIG on Linux, and a
watchdog thread), so a kill -9 of the worker leaves no handler running past
its lease. Linux sends that signal when the *thread* that forked the child
ends, not its process, so children are forked by one thread of the pool's
that lives until ``close()`` has reaped them all (``_forking``), never by the
handler thread that asked. A child is signalled only until it is reaped
(``_waited``, under the pool's lock): its pid is free after that.

Children are forked from the worker, as a prefork pool's are: they inherit
the app and its handlers, however they were defined. ``ctx.transaction()``
is not available in a child (its connection is the worker's).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from queue import SimpleQueue
from typing import Any

from ..context import CancelReason, JobCancelled, JobContext
from ..errors import ConfigError, StaleAttempt, TetherError
from ..payload import describe, dump_json, traceback_text

__all__ = ["KILL_GRACE", "REAP_WAIT", "ChildPool", "HandlerError", "HandlerProcessDied", "parse_size"]

#: after SIGTERM (a cancel request), seconds before SIGKILL
KILL_GRACE = 0.5
#: after SIGKILL, the most the worker waits for the child's reaping before it writes the attempt's outcome
REAP_WAIT = 2.0
#: how often a handler thread waiting on its child looks at the attempt's cancel signal
POLL = 0.05
#: how often a child's watchdog checks that its worker is alive
WATCHDOG = 0.5
#: with max_memory, how often the handler thread reads its busy child's resident memory
MEMORY_POLL = 0.5

_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2, "MIB": 1024**2,
          "G": 1024**3, "GB": 1024**3, "GIB": 1024**3}


class HandlerProcessDied(TetherError):
    """The child process running a handler died before it answered (a
    signal, ``os._exit``, the OOM killer): the attempt fails with this."""


class HandlerError(TetherError):
    """What a handler in a child raised, when that exception could not cross
    back as itself (it does not pickle): its type and message."""


def parse_size(value: int | str | None, what: str = "max_memory_per_child") -> int | None:
    """Bytes from an int or ``"500MB"``, ``"1.5G"``, ``"200MiB"`` (units of 1024); None stays None."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str):
        text = value.strip().upper().replace(" ", "")
        digits = text.rstrip("KMGIB")
        with contextlib.suppress(ValueError):
            number = float(digits)
            unit = _UNITS.get(text[len(digits):])
            if unit is not None and number > 0:
                return int(number * unit)
    raise ConfigError(f"{what} must be a positive number of bytes or a size such as '500MB', got {value!r}")


class _Child:
    __slots__ = ("conn", "ended", "kill_at", "pid", "rss", "sample_at", "tasks")

    def __init__(self, pid: int, conn: Connection) -> None:
        self.pid = pid
        self.conn = conn
        self.tasks = 0
        #: the most resident memory seen in its current (or last) job: sampled while it
        #: runs (with max_memory), and its own figure at the end; bytes
        self.rss = 0
        #: monotonic time of its next sample
        self.sample_at = 0.0
        #: monotonic time to send SIGKILL (after a SIGTERM), once one was sent
        self.kill_at: float | None = None
        #: how it ended, once reaped (its pid is free then: another process may get it)
        self.ended: str | None = None


class ChildPool:
    """The children of one worker. ``lookup(task)``: the callable a child runs
    for a task (the handler inside its ``def`` middleware), read in the child."""

    def __init__(self, lookup: Callable[[str], Callable[..., Any]], *, worker_id: str, max_payload_bytes: int,
                 max_tasks: int | None = None, max_memory: int | None = None,
                 forked: Callable[[], object] | None = None) -> None:
        if max_tasks is not None and (not isinstance(max_tasks, int) or isinstance(max_tasks, bool) or max_tasks < 1):
            raise ConfigError(f"max_tasks_per_child must be an int >= 1 (or None), got {max_tasks!r}")
        self.lookup = lookup
        #: called first thing in each child: the app lets go of the worker's connections (``Tether._forked``)
        self.forked = forked
        self.worker_id = worker_id
        self.max_payload_bytes = max_payload_bytes
        self.max_tasks = max_tasks
        self.max_memory = parse_size(max_memory)
        self._lock = threading.Lock()
        self._idle: list[_Child] = []
        self._children: dict[int, _Child] = {}  # pid -> child, every live one
        self._busy: dict[int, _Child] = {}  # id(ctx) -> the child running its handler
        self._closed = False
        #: forks asked of the forking thread (started on the first; None ends it)
        self._forks: SimpleQueue[Future[_Child] | None] = SimpleQueue()
        self._forker: threading.Thread | None = None
        #: children started and retired (recycled or dead), for tests and the log
        self.started = 0
        self.retired = 0

    # -- the worker's side --------------------------------------------------------------
    def call(self, task: str, ctx: JobContext, /, **_args: Any) -> Any:
        """A handler thread: run ``task``'s handler for ``ctx``'s job in a child;
        its result, or what it raised (``JobCancelled`` once the attempt was
        cancelled and its child killed)."""
        key = id(ctx)
        child = self._start(task, ctx, key)
        started, fresh_tries = False, 1
        try:
            while True:
                if ctx.cancelled and child.kill_at is None:  # (the executor's kill() came first, as a rule)
                    self._signal(child, signal.SIGTERM if ctx.cancel_reason == CancelReason.REQUESTED
                                 else signal.SIGKILL)
                if child.kill_at is not None and time.monotonic() >= child.kill_at:
                    self._signal(child, signal.SIGKILL)
                try:
                    if not child.conn.poll(POLL):
                        if self.max_memory is not None and time.monotonic() >= child.sample_at:
                            child.sample_at = time.monotonic() + MEMORY_POLL  # (its /proc entry: a few us)
                            child.rss = max(child.rss, _rss(child.pid))
                        continue
                    msg = child.conn.recv()
                except (EOFError, OSError):
                    status = self._retire(child)
                    if not started and fresh_tries and not ctx.cancelled:
                        # it died before it took the job (an idle child killed, OOM): the handler never
                        # began, so the job goes to a fresh child rather than failing an attempt
                        fresh_tries -= 1
                        child = self._start(task, ctx, key)
                        continue
                    if ctx.cancelled:
                        raise JobCancelled(ctx.job_id, ctx.cancel_reason or "cancelled") from None
                    raise HandlerProcessDied(f"the handler's process (pid {child.pid}) {status} before it "
                                             "answered") from None
                if msg[0] == "started":
                    started = True
                    continue
                if msg[0] == "progress":
                    child.conn.send(_progress(ctx, msg[1], msg[2]))
                    continue
                child.tasks += 1
                child.rss = max(child.rss, msg[-1])  # its size now, or more while the job ran
                self._give_back(child)
                if msg[0] == "ok":
                    return None if msg[1] is None else json.loads(msg[1])
                raise _rebuilt(msg[1], msg[2], msg[3])
        finally:
            with self._lock:
                self._busy.pop(key, None)

    def _start(self, task: str, ctx: JobContext, key: int) -> _Child:
        """A child, registered for ``kill`` and sent the job. Registered first,
        then the cancel signal read: a kill() that found no child came after the
        signal was set (the executor sets it first), so it is read here, and the
        handler never starts. An idle child found dead is replaced, once."""
        for tries_left in (1, 0):
            child = self._take()
            with self._lock:
                self._busy[key] = child
            if ctx.cancelled:
                with self._lock:
                    self._busy.pop(key, None)
                self._give_back(child)
                raise JobCancelled(ctx.job_id, ctx.cancel_reason or "cancelled")
            child.rss, child.sample_at = 0, time.monotonic() + MEMORY_POLL
            try:
                child.conn.send(("run", task, ctx._job))
            except OSError:
                with self._lock:
                    self._busy.pop(key, None)
                self._retire(child)
                if not tries_left:
                    raise
                continue
            return child
        raise AssertionError("unreachable")

    def kill(self, ctx: JobContext, *, now: bool) -> None:
        """Any thread: end the child running ``ctx``'s handler: SIGKILL (``now``)
        or SIGTERM, then SIGKILL after KILL_GRACE."""
        with self._lock:
            child = self._busy.get(id(ctx))
        if child is not None:
            self._signal(child, signal.SIGKILL if now else signal.SIGTERM)

    def close(self) -> None:
        """The worker stops: idle children are told to exit, busy ones killed; all reaped."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = [c for c in self._children.values() if c not in idle]
        for child in idle:
            child.conn.close()
        for child in busy:
            self._signal(child, signal.SIGKILL)
        for child in idle + busy:
            self._reap(child, wait=2.0)
        self._forks.put(None)  # (a fork asked for meanwhile finds the pool closed)

    def pids(self) -> list[int]:
        with self._lock:
            return sorted(self._children)

    def _signal(self, child: _Child, sig: signal.Signals) -> None:
        if sig == signal.SIGTERM and child.kill_at is None:
            child.kill_at = time.monotonic() + KILL_GRACE
        elif sig == signal.SIGKILL:
            child.kill_at = time.monotonic()
        with self._lock:  # never once reaped: the pid may be another process's by then
            if child.ended is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, sig)

    def _take(self) -> _Child:
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker's handler processes are shut down")
            while self._idle:
                child = self._idle.pop()
                if _waited(child) is None:
                    return child
                # it died while idle (an OOM kill, a kill -9): its pipe may still take our job
                # and only then read as closed, so the job would fail without having started
                with contextlib.suppress(OSError):
                    child.conn.close()
                self._children.pop(child.pid, None)
                self.retired += 1
            if self._forker is None:
                self._forker = threading.Thread(target=self._forking, name="tether-child-forker", daemon=True)
                self._forker.start()
        forked: Future[_Child] = Future()
        self._forks.put(forked)
        return forked.result()

    def _forking(self) -> None:
        """The pool's forking thread, until close(). Linux fires a child's
        PR_SET_PDEATHSIG when the *thread* that forked it ends, not its
        process: a child forked by a handler thread was SIGKILLed when that
        thread ended (an idle child at the worker's shutdown, before close()
        could end it by its pipe). This thread ends after close() has reaped
        every child, or with the process."""
        while True:
            forked = self._forks.get()
            if forked is None:
                return
            try:
                forked.set_result(self._fork())
            except BaseException as exc:
                forked.set_exception(exc)

    def _fork(self) -> _Child:
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker's handler processes are shut down")
            others = [c.conn for c in self._children.values()]
            parent, theirs = Pipe()
            with warnings.catch_warnings():  # 3.12+: a DeprecationWarning on fork from a process with threads
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # the child: never returns
                code = 1
                try:
                    parent.close()
                    for conn in others:
                        conn.close()
                    _serve(theirs, self)
                    code = 0
                finally:
                    os._exit(code)
            theirs.close()
            child = self._children[pid] = _Child(pid, parent)
            self.started += 1
            return child

    def _give_back(self, child: _Child) -> None:
        """Between jobs: recycle the child past its task count or memory, else keep it idle."""
        if ((self.max_tasks is not None and child.tasks >= self.max_tasks)
                or (self.max_memory is not None and child.rss > self.max_memory)):
            child.conn.close()  # it reads EOF and exits
            self._retire(child)
            return
        with self._lock:
            if not self._closed:
                self._idle.append(child)
                return
        child.conn.close()
        self._retire(child)

    def _retire(self, child: _Child) -> str:
        status = self._reap(child, wait=KILL_GRACE * 4)
        with self._lock:
            self._children.pop(child.pid, None)
            self.retired += 1
        return status

    def _reap(self, child: _Child, *, wait: float) -> str:
        """Wait for the child's exit (SIGKILL past ``wait``); how it ended, in words."""
        give_up = time.monotonic() + wait
        while True:
            with self._lock:
                ended = _waited(child)
            if ended is not None:
                break
            if time.monotonic() >= give_up:
                self._signal(child, signal.SIGKILL)
                give_up = time.monotonic() + wait
            time.sleep(0.005)
        with contextlib.suppress(OSError):
            child.conn.close()
        return ended


def _waited(child: _Child) -> str | None:
    """The pool's lock held (so no signal goes to a pid once it is free): how
    the child ended, reaped here if it has; None while it runs."""
    if child.ended is None:
        try:
            pid, status = os.waitpid(child.pid, os.WNOHANG)
        except ChildProcessError:  # (not ours to wait for: never expected)
            child.ended = "exited"
            return child.ended
        if not pid:
            return None
        child.ended = f"exited with status {os.WEXITSTATUS(status)}"
        if os.WIFSIGNALED(status):
            sig: int | signal.Signals = os.WTERMSIG(status)
            with contextlib.suppress(ValueError):
                sig = signal.Signals(sig)
            child.ended = f"was killed by signal {getattr(sig, 'name', sig)}"
    return child.ended


def _progress(ctx: JobContext, fraction: float | None, message: str | None) -> tuple[str, Any]:
    """The worker's answer to a child's ``ctx.progress``: whether a cancel was requested, or refused."""
    try:
        ctx.progress(fraction, message)
    except StaleAttempt as exc:
        return ("stale", (exc.job_id, exc.attempt, exc.worker, exc.op))
    except Exception as exc:  # the database unreachable, a bad fraction: the child raises it as this
        return ("error", describe(exc))
    return ("ok", ctx.cancel_reason)


def _rebuilt(pickled: bytes | None, described: str, tb: str) -> BaseException:
    exc: BaseException | None = None
    if pickled is not None:
        with contextlib.suppress(Exception):
            exc = pickle.loads(pickled)
    if not isinstance(exc, BaseException):
        exc = HandlerError(described)
    exc.__tether_traceback__ = tb  # type: ignore[attr-defined]  # the child's, for the attempt (payload.traceback_text)
    return exc


# -- the child's side ---------------------------------------------------------------------
def _serve(conn: Connection, pool: ChildPool) -> None:
    """A child's life: run the jobs its worker sends until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the worker's to handle; it ends us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)  # the worker's event loop's: a signal here must not wake it
    from .. import context

    context._CANCEL_LOCK = threading.Lock()  # another thread of the worker may have held it at the fork
    _die_with(os.getppid())
    if pool.forked is not None:
        pool.forked()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        _, task, job = msg
        conn.send(("started",))  # the job is ours: a death from here on is the attempt's

        def report(_job: Any, fraction: float | None, message: str | None) -> bool:
            conn.send(("progress", fraction, message))
            kind, value = conn.recv()
            if kind == "stale":
                raise StaleAttempt(*value)
            if kind == "error":
                raise TetherError(value)
            return bool(value)

        ctx = JobContext(job, pool.worker_id, report, None, _no_transaction)
        try:
            result = pool.lookup(task)(ctx, **job.args)
            text = None if result is None else dump_json(result, f"result of task {task!r}", pool.max_payload_bytes)
            answer: tuple[Any, ...] = ("ok", text, _rss())
        except BaseException as exc:
            answer = ("err", _pickled(exc), describe(exc), traceback_text(exc), _rss())
        conn.send(answer)


def _no_transaction(ctx: JobContext, *connection: object) -> Any:
    """``ctx.transaction()`` (and ``transaction_on``, as Django's ``context.transaction()``) in a child: refused."""
    name = "transaction_on" if connection else "transaction"
    raise ConfigError(
        f"ctx.{name}() is not available to a handler run in a child process (isolation='process'): the "
        f"transaction that writes job {ctx.job_id}'s success with the handler's writes is the worker's, on its "
        "connection, in its process. Run this task on the worker's threads: no isolation='process' on its "
        "@app.task, and a worker without --isolation process (which puts every def handler in a child)")


def _pickled(exc: BaseException) -> bytes | None:
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)  # one that pickles but does not unpickle (a required argument) is sent as text
    except Exception:
        return None
    return data


def _rss(pid: int | None = None) -> int:
    """A process's resident memory, in bytes: a child's (``pid``, from Linux's
    /proc; 0 elsewhere), or this process's (elsewhere its peak)."""
    try:
        with open(f"/proc/{pid or 'self'}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        if pid is not None:
            return 0
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def _die_with(parent: int) -> None:
    """Exit when the worker dies: PR_SET_PDEATHSIG (Linux: even a handler
    stuck in a C call that holds the GIL is killed; sent when the pool's
    forking thread ends, which it does with the process or after close()),
    and a watchdog thread elsewhere."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the call above
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(WATCHDOG)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="tether-child-watchdog", daemon=True).start()
