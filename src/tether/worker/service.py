"""The shape of a worker's background duty: a *periodic service*.

A worker is a supervisor of services (``runtime.Worker``). The claimer,
executor and reporter hand jobs to one another on the event loop; the rest are
maintenance duties that run on a timer on every worker at once (reaper,
transport sweeper, scheduler, pruner). A ``tether server`` runs one too, on the
database it holds: the pruner, which its remote workers do not run
(``server.app.create_app(services=...)``). Each of those is a
``PeriodicService``:

- its defaults are named constants in its own module, its config is checked in
  ``__init__`` with a message that names the bad value (``ConfigError``);
- ``run_once()`` does one tick's work with blocking store calls: the worker
  runs it on a database thread, tests call it directly (no sleeping for ticks);
- ``tick()`` is what the timer calls: ``run_once()`` unless a service drains a
  backlog in several rounds (the reaper);
- ``serve(run_blocking)`` is the timer loop itself, started by the worker (or
  the server) and cancelled at shutdown; a failed tick is logged and the loop
  goes on; the worker's ``on_tick`` hook hears each tick's result.

A duty is safe to run on every worker at once because each statement it sends
decides in the database (a row moves once; a unique key admits one insert).
"""

from __future__ import annotations

import abc
import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

from ..errors import ConfigError

__all__ = ["PeriodicService", "RunBlocking"]

T = TypeVar("T")
#: how the worker runs a blocking call off its event loop (on its database threads)
RunBlocking = Callable[[Callable[[], T]], Awaitable[T]]

#: a tick waits between this fraction of the interval and all of it, so that
#: workers started together drift apart instead of ticking in the same instant
JITTER_FLOOR = 0.9


class PeriodicService(abc.ABC):
    """A duty run every ``interval`` seconds on every worker (see the module docstring)."""

    #: the name in logs, thread names and the worker's counts
    name: ClassVar[str]

    def __init__(self, interval: float, *, spread_start: bool = True) -> None:
        if not isinstance(interval, int | float) or not interval > 0 or interval == float("inf"):
            raise ConfigError(f"{self.name} interval must be a positive, finite number of seconds, got {interval!r}")
        self.interval = float(interval)
        #: wait a random part of the first interval before the first tick
        self.spread_start = spread_start
        #: the worker's hook, on the event loop, after each tick that succeeded,
        #: with its result (the reaper's wakes the claimer for recovered jobs)
        self.on_tick: Callable[[Any], object] | None = None
        self.ticks = 0
        self.failures = 0
        self.log = logging.getLogger(f"tether.{self.name}")

    @abc.abstractmethod
    def run_once(self) -> Any:
        """One tick's work (blocking; a database thread in a worker, the caller's in tests)."""

    def tick(self) -> Any:
        """What the timer runs each interval: ``run_once()`` unless overridden."""
        return self.run_once()

    def ticked(self, result: Any, started: float) -> None:  # noqa: B027 - a hook, empty by default
        """On the event loop, after a tick succeeded (``started``: its monotonic start)."""

    def failed(self, exc: Exception, started: float) -> None:
        """On the event loop, after a tick raised: logged; the loop goes on."""
        self.log.warning("%s tick failed: %s", self.name, exc)

    def first_wait(self) -> float:
        return random.uniform(0, self.interval) if self.spread_start else 0.0

    def next_wait(self, took: float) -> float:
        """The pause after a tick that took ``took`` seconds: the interval counts
        from the tick's start, so a slow tick does not push the next one back."""
        return max(0.0, self.interval * random.uniform(JITTER_FLOOR, 1.0) - took)

    async def serve(self, run_blocking: RunBlocking[Any]) -> None:
        """The timer loop; runs until cancelled."""
        await asyncio.sleep(self.first_wait())
        while True:
            started = time.monotonic()
            try:
                result = await run_blocking(self.tick)
            except Exception as exc:
                self.failures += 1
                self.failed(exc, started)
            else:
                self.ticks += 1
                self.ticked(result, started)
                if self.on_tick is not None:
                    self.on_tick(result)
            await asyncio.sleep(self.next_wait(time.monotonic() - started))
