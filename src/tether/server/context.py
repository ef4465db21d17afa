"""What every operation of the server is handed: the store and the server's
settings (``Server``), and the wake-ups of long-polling claims (``Wakeups``)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from ..store import Store
from ..transport import Transport
from .auth import TokenTable
from .owners import WorkerOwners
from .requests import Args
from .throttle import Throttle
from .workers import WorkerPolicy

__all__ = ["Args", "Server", "Wakeups"]


class Wakeups:
    """Wakes long-polling claims when jobs may have become due."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self) -> None:
        self._loop = asyncio.get_running_loop()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    def notify_threadsafe(self, _queue: str = "*") -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self.notify)

    async def wait(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)


@dataclass
class Server:
    store: Store
    tokens: TokenTable
    client_clock: bool
    max_body: int
    max_payload: int
    max_wait: float
    #: announces what enqueue and retry committed (None: nothing to announce to)
    transport: Transport | None = None
    #: failed bearer tokens, by client address
    throttle: Throttle = field(default_factory=Throttle)
    workers: WorkerPolicy = field(default_factory=WorkerPolicy)
    wakeups: Wakeups = field(default_factory=Wakeups)
    owners: WorkerOwners = field(init=False)

    def __post_init__(self) -> None:
        self.owners = WorkerOwners(self.store)
