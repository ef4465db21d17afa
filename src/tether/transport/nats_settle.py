"""Settling NATS messages (ack, nak, term) on the link loop, reading them as
deliveries, and which loop the caller runs on: the NATS transport's helpers
(``nats.py``)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable

from nats.aio.msg import Msg

from .base import Delivery

__all__ = ["SETTLE_DELAY", "Coalesced", "_current_loop", "_settle", "_settle_all", "deliveries", "parse"]

log = logging.getLogger("tether.nats")

#: settles (acks) queued on a worker's loop wait this long for others to go with them
SETTLE_DELAY = 0.002


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


def parse(msg: Msg) -> Delivery | None:
    """A message's delivery; None (logged) for a malformed one, which the caller terminates."""
    try:
        body = json.loads(msg.data)
        job_id, queue = body["job_id"], body["queue"]
        if not isinstance(job_id, int) or isinstance(job_id, bool) or not isinstance(queue, str):
            raise ValueError("job_id must be an int and queue a string")
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("NATS: dropping a malformed message on %s (%s): %r", msg.subject, exc, msg.data[:200])
        return None
    return Delivery(job_id=job_id, queue=queue, retry=bool(body.get("retry")), handle=msg)


def deliveries(msgs: list[Msg], settle: Callable[[Msg, str], None]) -> list[Delivery]:
    """The messages' deliveries; a malformed one is terminated (``settle(msg, "term")``)."""
    out = []
    for msg in msgs:
        d = parse(msg)
        if d is None:
            settle(msg, "term")
        else:
            out.append(d)
    return out


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
