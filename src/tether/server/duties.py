"""The database's upkeep a tether server runs beside its API: periodic
services (``tether server`` runs the pruner, at its ``--retention``), each on
its timer, their ticks on database threads of their own.

Workers that reach the database through a server hold no credentials for it,
and a worker token may not prune: so retention is enforced by the side that
holds the database, and those workers run no pruner (``worker/pruner.py``).
Several servers on one database may all run it: each statement decides in the
database (the pruner's docstring says how).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from ..worker.service import PeriodicService
from ..worker.state import DatabaseThreads

__all__ = ["STOP_WAIT", "Duties"]

log = logging.getLogger("tether.server")

T = TypeVar("T")

#: at shutdown, how long to wait for a tick under way (the pruner's: at most a
#: few bounded statements) before the store is closed anyway
STOP_WAIT = 10.0


class Duties:
    """``services`` on their timers while the server runs: ``start()`` on its
    event loop, ``stop()`` at shutdown."""

    def __init__(self, services: Sequence[PeriodicService]) -> None:
        self.services = list(services)
        self._threads = DatabaseThreads(max_workers=max(1, len(self.services)), thread_name_prefix="tether-duty")
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()

        async def run_blocking(fn: Callable[[], T]) -> T:
            return await loop.run_in_executor(self._threads, fn)

        self._tasks = [loop.create_task(svc.serve(run_blocking), name=f"tether-{svc.name}") for svc in self.services]

    async def stop(self, timeout: float = STOP_WAIT) -> None:
        """Cancel the timers, then wait for a tick still running on its thread:
        returning sooner would let the caller close the store under its
        statement (on SQLite, a crash; see ``WorkerState.close_db``)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        late = await self._threads.close(timeout)
        if late:
            log.warning("%d service tick(s) still running %gs after the stop; not waiting for them", late, timeout)
