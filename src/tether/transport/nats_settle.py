"""Settling NATS messages (ack, nak, term) on the link loop, and which loop
the caller runs on: the NATS transport's helpers (``nats.py``).

A worker settles a message once the database has recorded each of its
deliveries' outcomes, from its event loop or from a database thread; the ack
itself must go out on the loop the NATS client runs on (the link loop: the
transport's own thread, or the worker's loop when it adopted that one).
``Settler`` queues them and wakes the link loop once for a batch.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from nats.aio.msg import Msg

from .nats_wire import Carrier

__all__ = ["SETTLE_DELAY", "Coalesced", "Settler", "_current_loop", "_settle", "_settle_all"]

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
    """``fn`` (waking the link loop) for a caller on an event loop: once per
    ``SETTLE_DELAY`` for all the calls from that loop, not once per call (a
    round's acks come in several batches), the link loop included (a worker
    whose loop runs the client); at once from a thread without a loop. Should
    that loop stop before the wake-up, the link loop's keeper sends what waits
    (every 0.25 s)."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self._armed: set[asyncio.AbstractEventLoop] = set()
        self._lock = threading.Lock()

    def __call__(self) -> None:
        loop = _current_loop()
        if loop is None:
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


Settle = tuple[Msg, str]


class Settler:
    """The settles waiting for the link loop, queued from any thread.

    ``link()`` is the link loop (None once closed); ``flush(batch)`` runs on it
    for each wake-up, with what was queued (it may be empty: a wake-up also
    asks the pullers for more)."""

    def __init__(self, link: Callable[[], asyncio.AbstractEventLoop | None],
                 flush: Callable[[list[Settle]], None]) -> None:
        self.link, self.flush = link, flush
        self.queued: list[Settle] = []
        self._lock = threading.Lock()
        self._kicked = False  # a wake-up is on its way to the link loop
        self.soon = Coalesced(self.kick)  # from a worker's loop: its acks in one wake-up

    def share(self, carrier: Carrier, how: str) -> None:
        """One delivery settled: its message, once the last of its deliveries is."""
        self.share_all([carrier], how)

    def share_all(self, carriers: list[Carrier], how: str) -> None:
        """``share`` each, under one lock (a round's acks)."""
        settled = False
        with self._lock:
            for carrier in carriers:
                if how != "ack":
                    carrier.how = how
                carrier.left -= 1
                if carrier.left <= 0:
                    self.queued.append((carrier.msg, carrier.how))
                    settled = True
        if settled:
            self.soon()

    def kick(self) -> None:
        """Any thread: wake the link loop once for whatever waits (settles, top-ups)."""
        loop = self.link()
        if loop is None:
            return
        with self._lock:
            if self._kicked:
                return  # a wake-up is already on its way
            self._kicked = True
        try:
            if _current_loop() is loop:
                loop.call_soon(self.wake)  # the worker's own loop runs the client: no system call
            else:
                loop.call_soon_threadsafe(self.wake)
        except RuntimeError:  # the loop has closed: no wake-up will come for what is queued
            self.clear()  # (nor would one ever be sent again); JetStream redelivers after ack_wait

    def wake(self) -> None:
        """On the link loop."""
        self.flush(self.take())

    def take(self) -> list[Settle]:
        with self._lock:
            batch, self.queued, self._kicked = self.queued, [], False
        return batch

    def clear(self) -> None:
        self.take()
