"""How a handler is started: an ``async def`` one as a task on the loop (eager
on Python 3.12+), a ``def`` one as a plain call on a handler thread."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from ..context import JobContext

__all__ = ["call_sync", "start_task"]


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
