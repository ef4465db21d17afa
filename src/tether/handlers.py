"""The app's registrations around handlers: ``@app.middleware`` (what wraps
every execution; the chain itself is ``tether.worker.middleware``). A mixin
of ``Tether``, kept out of app.py, which holds the registry and the enqueue API."""

from __future__ import annotations

import inspect
from typing import TypeVar

from .errors import ConfigError
from .worker.middleware import Middleware

__all__ = ["HandlerHooks"]

M = TypeVar("M", bound=Middleware)


class HandlerHooks:
    #: ``@app.middleware``, in registration order (the first is outermost)
    middlewares: list[Middleware]

    def middleware(self, fn: M, /) -> M:
        """Register a middleware around every handler's execution:
        ``def mw(ctx, call_next): ... return call_next()``, or ``async def``
        with ``return await call_next()``. Registration order is nesting
        order, the first registered outermost. A ``def`` middleware wraps the
        ``def`` handlers, an ``async def`` one the ``async def`` handlers
        (register one of each for a concern that spans both). Register before
        the worker starts. What it raises fails the attempt as the handler's
        raise would (``tether.Retry``/``tether.Discard`` included); what it
        returns is the job's result, whether or not it called ``call_next()``."""
        if not callable(fn):
            raise ConfigError(f"@app.middleware takes a function (ctx, call_next), got {fn!r}")
        try:
            inspect.signature(fn).bind(None, None)
        except TypeError:
            raise ConfigError(f"middleware {getattr(fn, '__qualname__', fn)!r} must take (ctx, call_next)") from None
        except ValueError:  # no signature to read (a builtin): let the call say
            pass
        if fn in self.middlewares:
            raise ConfigError(f"middleware {getattr(fn, '__qualname__', fn)!r} is registered twice")
        self.middlewares.append(fn)
        return fn
