"""A thread pool of daemon threads for synchronous handlers.

A thread handler cannot be interrupted. When its attempt is lost or times out,
the worker stops waiting for it and frees the slot; the thread runs on until
the handler returns. Daemon threads keep such a straggler from holding the
process open at exit, and a new thread is started whenever none is idle, so a
straggler never blocks the jobs behind it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

__all__ = ["DaemonPool"]

P = ParamSpec("P")
T = TypeVar("T")
_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonPool(Executor):
    def __init__(self, name: str = "tether-handler") -> None:
        self._name = name
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads = 0
        self._shutdown = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        fut: Future[T] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("pool is shut down")
            if self._idle == 0:
                self._threads += 1
                threading.Thread(target=self._run, name=f"{self._name}-{self._threads}", daemon=True).start()
            else:
                self._idle -= 1
        self._queue.put((fut, fn, args, kwargs))
        return fut

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fut, fn, args, kwargs = item
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn(*args, **kwargs))
                except BaseException as exc:
                    fut.set_exception(exc)
            del item, fut, fn, args, kwargs
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            n = self._threads
        for _ in range(n):
            self._queue.put(None)
