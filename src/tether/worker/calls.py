"""How a handler is started: an ``async def`` one as a task on the loop (eager
on Python 3.12+), a ``def`` one as a plain call on a handler thread (or in a
child process: ``Runners``); and what is called, middleware included."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from functools import partial
from typing import Any

from ..context import JobContext
from ..errors import ConfigError
from .appview import TaskView
from .isolation import ChildPool, parse_size
from .middleware import Middleware, wrap

__all__ = ["ISOLATIONS", "Runners", "call_sync", "start_task"]

#: where a def handler runs: on a handler thread of the worker, or in a child process
ISOLATIONS = ("thread", "process")


if sys.version_info >= (3, 12):

    def start_task(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        """A handler's task, started at once (an eager task, Python 3.12+): it
        runs up to its first real wait now, as the current task, and one that
        finishes without waiting costs no trip through the loop."""
        return asyncio.Task(coro, loop=loop, eager_start=True)
else:

    def start_task(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        """A handler's task (eager where Python has eager tasks, 3.12+)."""
        return loop.create_task(coro)


def call_sync(run: Callable[..., Any], ctx: JobContext, args: dict[str, Any]) -> Any:
    """A ``def`` handler's call on its thread: ``run(ctx, **args)``."""
    return run(ctx, **args)


class Runners:
    """What a worker calls for each task, built on a task's first job: its
    ``run`` inside the middleware of its kind, or, for a ``def`` handler under
    ``isolation="process"`` (the task's or the worker's), a call into a child
    process (``isolation.ChildPool``, started on first use), where that same
    chain runs."""

    def __init__(self, tasks: Mapping[str, TaskView], middlewares: Sequence[Middleware], *, isolation: str,
                 worker_id: str, max_payload_bytes: int, max_tasks_per_child: int | None = None,
                 max_memory_per_child: int | str | None = None, forked: Callable[[], object] | None = None) -> None:
        if isolation not in ISOLATIONS:
            raise ConfigError(f"isolation must be one of {', '.join(ISOLATIONS)}, got {isolation!r}")
        self.tasks = tasks
        self._middlewares = middlewares  # the app's list: read again at the worker's start (refresh)
        self.middlewares = tuple(middlewares)
        self.isolation = isolation
        self._pool = partial(ChildPool, self.lookup, worker_id=worker_id, max_payload_bytes=max_payload_bytes,
                             max_tasks=max_tasks_per_child, max_memory=parse_size(max_memory_per_child),
                             forked=forked)
        self._pool()  # checks the options now, at start-up (it forks nothing until its first call)
        self.pool: ChildPool | None = None
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[Callable[..., Any], bool]] = {}
        self.plain = False
        self.refresh()

    def refresh(self) -> None:
        """``plain``: no middleware and no process isolation, for any task
        registered now (the worker's start): each job calls ``task.run`` itself."""
        self.middlewares = tuple(self._middlewares)
        self._runs.clear()
        self.plain = not self.middlewares and self.isolation == "thread" and not any(
            getattr(t, "isolation", "") == "process" for t in list(self.tasks.values()))

    def get(self, name: str, task: TaskView) -> tuple[Callable[..., Any], bool]:
        """The loop: (what to call with ``(ctx, **args)``, whether it runs in a child)."""
        hit = self._runs.get(name)
        if hit is None:
            if not task.is_async and (self.isolation == "process" or getattr(task, "isolation", "") == "process"):
                hit = (partial(self.children().call, name), True)
            else:
                hit = (wrap(task.run, task.is_async, self.middlewares), False)
            self._runs[name] = hit
        return hit

    def children(self) -> ChildPool:
        with self._lock:
            if self.pool is None:
                self.pool = self._pool()
            return self.pool

    def lookup(self, name: str) -> Callable[..., Any]:
        """In a child: the task's run inside the ``def`` middleware."""
        task = self.tasks[name]
        return wrap(task.run, False, self.middlewares)

    def kill(self, ctx: JobContext, *, now: bool) -> None:
        if self.pool is not None:
            self.pool.kill(ctx, now=now)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
