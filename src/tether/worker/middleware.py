"""Handler middleware (``@app.middleware``): code around every execution.

A middleware is ``mw(ctx, call_next)``; ``call_next()`` runs the rest of the
chain and the handler and returns the handler's result (or raises what it
raised). The chain is built once per task, in registration order, the first
registered outermost, and it runs in the process and on the thread (or event
loop) that runs the handler, so a context manager around ``call_next()``
(a tenant, a database session, a Sentry scope) holds for the handler's whole run.

The rule for mixing kinds: **a middleware wraps the handlers of its own
kind**. A ``def`` middleware wraps ``def`` handlers (on the handler's thread,
or in its child process under ``isolation="process"``); an ``async def``
middleware wraps ``async def`` handlers (in the handler's task, on the loop),
and its ``call_next()`` is awaited. A ``def`` middleware cannot wrap a
coroutine (its ``with`` block would end before the coroutine ran), and an
``async def`` one around a thread would move the handler off its thread and
out of the worker's timeout and cancel handling; so an application with both
kinds of handler registers one middleware of each kind for a concern that
spans them. The worker logs, at start, the tasks that no middleware wraps
while middleware of the other kind exists.

What a middleware raises is the attempt's failure, as if the handler raised
it (``tether.Retry`` and ``tether.Discard`` included); what it returns is the
job's result, whether or not it called ``call_next()`` (one that does not
call it ends the job as its return or raise says, and the handler never
runs). It sees the handler's result as the JSON-ready value that is stored
(a typed return annotation already converted). ``call_next()`` runs once per
attempt: a second call raises ``RuntimeError``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ..context import JobContext

__all__ = ["Middleware", "is_async_middleware", "unwrapped", "wrap"]

Middleware = Callable[[JobContext, Callable[[], Any]], Any]


def is_async_middleware(fn: object) -> bool:
    """Whether ``fn`` is an ``async def`` middleware (a coroutine function, or
    an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def wrap(run: Callable[..., Any], is_async: bool, middlewares: Sequence[Middleware]) -> Callable[..., Any]:
    """``run(ctx, **args)`` inside the middleware of its kind; ``run`` itself when none is."""
    chain = tuple(m for m in middlewares if is_async_middleware(m) == is_async)
    if not chain:
        return run
    depth = len(chain)
    if is_async:

        async def run_async(ctx: JobContext, /, **args: Any) -> Any:
            async def step(i: int) -> Any:
                if i == depth:
                    return await run(ctx, **args)
                return await chain[i](ctx, _once(step, i + 1))

            return await step(0)

        return run_async

    def run_sync(ctx: JobContext, /, **args: Any) -> Any:
        def step(i: int) -> Any:
            if i == depth:
                return run(ctx, **args)
            return chain[i](ctx, _once(step, i + 1))

        return step(0)

    return run_sync


def _once(step: Callable[[int], Any], i: int) -> Callable[[], Any]:
    called = False

    def call_next() -> Any:
        nonlocal called
        if called:
            raise RuntimeError("a middleware called call_next() twice: it runs the handler once per attempt")
        called = True
        return step(i)

    return call_next


def unwrapped(tasks: dict[str, bool], middlewares: Sequence[Middleware]) -> list[str]:
    """The tasks (name -> is_async) that no middleware wraps while some
    middleware of the other kind exists: worth a warning at start."""
    kinds = {is_async_middleware(m) for m in middlewares}
    if len(kinds) != 1:
        return []
    (kind,) = kinds
    return sorted(name for name, is_async in tasks.items() if is_async != kind)
