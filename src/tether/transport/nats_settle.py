"""Settling NATS messages (ack, nak, term) on the link loop, reading them as
deliveries, and which loop the caller runs on: the NATS transport's helpers
(``nats.py``)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from nats.aio.msg import Msg

from .base import Delivery

__all__ = ["_current_loop", "_settle", "_settle_all", "deliveries", "parse"]

log = logging.getLogger("tether.nats")


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
