"""Settling NATS messages (ack, nak, term) on the link loop, and which loop
the caller runs on: the NATS transport's helpers (``nats.py``)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from nats.aio.msg import Msg

__all__ = ["SETTLE_DELAY", "Coalesced", "_current_loop", "_settle", "_settle_all"]

log = logging.getLogger("tether.nats")

#: settles (acks) queued on a worker's loop wait this long for others to go with
#: them, or for a wake-up of the link loop that takes them along: nothing waits
#: on an ack (JetStream redelivers only after ack_wait), and each wake-up of the
#: link loop from another thread costs both threads a system call and a switch
SETTLE_DELAY = 0.05


async def _settle_all(batch: list[tuple[Msg, str]]) -> None:
    for msg, how in batch:
        await _settle(msg, how)


async def _settle(msg: Msg, how: str) -> None:
    """ack, nak or term; a failure only means JetStream redelivers after ack_wait."""
    try:
        await getattr(msg, how)()
    except Exception as exc:
        log.debug("NATS %s failed: %s", how, exc)


def _current_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Coalesced:
    """``fn`` (waking the link loop) for a caller on an event loop other than
    ``link``: once per ``SETTLE_DELAY`` for all the calls from that loop, not
    once per call (a round's acks come in several batches); at once from a
    thread without a loop, or from the link loop itself. Should that loop stop
    before the wake-up, the link loop's keeper sends what waits (every 0.25 s)."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self._armed: set[asyncio.AbstractEventLoop] = set()
        self._lock = threading.Lock()

    def __call__(self, link: asyncio.AbstractEventLoop | None) -> None:
        loop = _current_loop()
        if loop is None or loop is link:
            self.fn()
            return
        with self._lock:
            if loop in self._armed:
                return
            self._armed.add(loop)
        loop.call_later(SETTLE_DELAY, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._armed.discard(loop)
        self.fn()
