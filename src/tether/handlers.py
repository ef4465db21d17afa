"""The app's registrations around handlers: ``@app.middleware`` (what wraps
every execution; the chain itself is ``tether.worker.middleware``),
``@app.enqueue_middleware`` (what sees each job before it is written:
``tether.spec``), and
``app.run_worker(processes=N)``, which becomes ``tether worker --processes N``.
A mixin of ``Tether``, kept out of app.py, which holds the registry and the
enqueue API."""

from __future__ import annotations

import inspect
import os
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from .errors import ConfigError
from .spec import JobSpec
from .transport import Transport, open_transport
from .worker.middleware import Middleware

__all__ = ["HandlerHooks"]

M = TypeVar("M", bound=Middleware)
E = TypeVar("E", bound=Callable[[JobSpec], JobSpec])


class HandlerHooks:
    #: ``@app.middleware``, in registration order (the first is outermost)
    middlewares: list[Middleware]
    #: ``@app.enqueue_middleware``, in registration order
    enqueue_middlewares: list[Callable[[JobSpec], JobSpec]]
    transport: Transport

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
        _register(self.middlewares, fn, "middleware", "ctx, call_next")
        return fn

    def enqueue_middleware(self, fn: E, /) -> E:
        """Register a function that sees, and may change, every job this app
        enqueues before it is written: ``def stamp(spec): return
        spec.with_meta(tenant=current_tenant())``. It takes a ``JobSpec`` and
        returns one of the same task, in registration order; what it raises
        reaches the caller and nothing is written (``tether.spec``)."""
        _register(self.enqueue_middlewares, fn, "enqueue middleware", "spec")
        return fn

    def _forked(self) -> None:
        """In a handler's child process (isolation="process"): the worker's
        store, connections and all, is the worker's. Set aside, never used nor
        closed here (closing would end the worker's sessions on the sockets it
        shares); the child opens its own on first use (``app.enqueue``,
        ``app.get_job`` from a handler). A delivering transport (NATS) runs on
        a thread of the worker, not here: jobs enqueued here are left to the
        database (NOTIFY, and the workers' sweep)."""
        _INHERITED.append(vars(self).copy())
        vars(self).update(_store=None, _finish_watch=None, _store_lock=threading.Lock())
        if getattr(self, "transport", None) is not None and self.transport.delivers:
            self.transport = open_transport(None)

    def _run_processes(self, processes: int, options: Mapping[str, Any]) -> None:
        """``run_worker(processes=N)``: this process becomes ``tether worker
        --app REF --processes N`` with the same options (exec: the same pid, so a
        service manager's signals reach the supervisor). Each worker process
        imports the app by its reference, as ``tether worker`` does: the module
        that defines it (for a script, the script's file by its name, with
        ``if __name__ == "__main__":`` around its ``run_worker`` call)."""
        if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
            raise ConfigError(f"processes must be an int >= 1, got {processes!r}")
        flags = _worker_flags(options)
        if getattr(self, "scratch", None) is not None:
            raise ConfigError("run_worker(processes=N): a sqlite:///:memory: database is this process's alone")
        argv = [sys.executable, "-m", "tether", "worker", "--app", self._reference(), "--processes", str(processes),
                *flags]
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, argv)

    def _reference(self) -> str:
        """``module:attribute`` naming this app, for a worker process to import;
        a script's directory goes first on PYTHONPATH for its children."""
        found = [(name, attr) for name, module in list(sys.modules.items()) if not name.startswith("__")
                 for attr, value in list(vars(module).items()) if value is self]
        if found:
            name, attr = found[0]
            return f"{name}:{attr}"
        main = sys.modules.get("__main__")
        path = getattr(main, "__file__", None)
        attrs = [attr for attr, value in vars(main).items() if value is self] if main is not None else []
        if path is None or not attrs or not Path(path).stem.isidentifier():
            raise ConfigError("run_worker(processes=N) needs the app at the top level of a module or script that a "
                              "worker process can import (module:attribute); run `tether worker --app module:app "
                              "--processes N` instead")
        where = str(Path(path).resolve().parent)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (where, os.environ.get("PYTHONPATH")) if p)
        return f"{Path(path).stem}:{attrs[0]}"


#: what a handler's child process inherited from its worker and must not touch (HandlerHooks._forked)
_INHERITED: list[object] = []

#: run_worker's options as ``tether worker``'s flags (None: left to the flag's default)
_FLAGS = {"concurrency": "--concurrency", "shutdown_timeout": "--shutdown-timeout",
          "poll_interval": "--poll-interval", "unknown_task_grace": "--unknown-task-grace",
          "isolation": "--isolation", "max_tasks_per_child": "--max-tasks-per-child",
          "max_memory_per_child": "--max-memory-per-child"}


def _worker_flags(options: Mapping[str, Any]) -> list[str]:
    flags: list[str] = []
    for name, value in options.items():
        if name in _FLAGS:
            if value is not None or name == "unknown_task_grace":
                flags += [_FLAGS[name], str(0 if value is None else value)]
        elif name == "queues":
            if isinstance(value, str):
                raise ConfigError(f"queues must be a list of queue names, not the string {value!r}")
            if value is not None:
                flags += ["--queues", ",".join(value)]
        elif name in ("prefetch", "burst"):
            if bool(value) != (name == "prefetch"):  # not the default
                flags.append("--no-prefetch" if name == "prefetch" else "--burst")
        else:
            raise ConfigError(f"run_worker(processes=N) does not take {name}= (tether worker has no flag for it)")
    return flags


def _register(registry: list[Any], fn: object, kind: str, takes: str) -> None:
    """Add ``fn`` to ``registry`` once it is a function taking ``takes``."""
    if not callable(fn):
        raise ConfigError(f"@app.{kind.replace(' ', '_')} takes a function ({takes}), got {fn!r}")
    try:
        inspect.signature(fn).bind(*[None] * len(takes.split(",")))
    except TypeError:
        raise ConfigError(f"{kind} {getattr(fn, '__qualname__', fn)!r} must take ({takes})") from None
    except ValueError:  # no signature to read (a builtin): let the call say
        pass
    if fn in registry:
        raise ConfigError(f"{kind} {getattr(fn, '__qualname__', fn)!r} is registered twice")
    registry.append(fn)
