"""One object per event loop, for the async paths of stores that outlive any
one loop: a tether app sees ``asyncio.run`` twice, a worker's loop on its
thread and a web server's loop, and what an asyncio socket or connection
needs is the loop that drives it.

``PerLoop.mine()`` finds the running loop's object or makes one; a loop that
has ended has its object dropped (``end``) the next time any loop makes one,
since tether cannot know when a caller's loop ends. ``close()`` ends them all
from any thread and refuses new ones.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PerLoop"]

T = TypeVar("T")


class PerLoop(Generic[T]):
    """``make()`` once per event loop; ``end(obj)`` once that loop is gone or at ``close()``."""

    def __init__(self, make: Callable[[], T], end: Callable[[T], None], *, closed: Callable[[], Exception]) -> None:
        self._make = make
        self._end = end
        self._closed_error = closed
        self._lock = threading.Lock()
        self._loops: dict[asyncio.AbstractEventLoop, T] = {}
        self._closed = False

    def mine(self, loop: asyncio.AbstractEventLoop | None = None) -> T:
        """The running (or given) loop's object; raises ``closed()`` after ``close()``."""
        loop = loop or asyncio.get_running_loop()
        found = self._loops.get(loop)  # lock-free: a dict read is atomic, and the common case
        if found is not None:
            return found
        with self._lock:
            if self._closed:
                raise self._closed_error()
            ended = [self._loops.pop(other) for other in list(self._loops) if other.is_closed()]
            found = self._loops.get(loop)
            if found is None:
                found = self._loops[loop] = self._make()
        for gone in ended:
            self._end(gone)
        return found

    def __len__(self) -> int:
        """How many loops have an object now (ended ones not yet dropped included)."""
        return len(self._loops)

    def close(self) -> None:
        """End every loop's object now (from any thread); no new ones after this."""
        with self._lock:
            self._closed = True
            every = list(self._loops.values())
            self._loops.clear()
        for each in every:
            self._end(each)
