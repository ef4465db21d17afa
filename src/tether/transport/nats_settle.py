"""Settling NATS messages (ack, nak, term) on the link loop, and which loop
the caller runs on: the NATS transport's helpers (``nats.py``)."""

from __future__ import annotations

import asyncio
import logging

from nats.aio.msg import Msg

__all__ = ["_current_loop", "_settle", "_settle_all"]

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
