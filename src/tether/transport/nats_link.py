"""The NATS transport's link: its client, keeper and pullers, on the loop they
run on (a loop of the transport's own on the ``tether-nats`` thread, or a
worker's loop it adopted; ``nats.py``'s docstring). The transport holds the
link's parts; this module starts a loop of its own, runs a coroutine on the
link loop from another, and ends a link."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from nats.aio.client import Client
from nats.js import JetStreamContext

from .nats_names import consumer_name
from .nats_pull import Puller
from .nats_settle import Settler, _current_loop, _settle_all
from .nats_wire import PUBLISH_TIMEOUT

__all__ = ["Ending", "OnceEach", "backlog", "end", "on_loop", "own_loop"]

T = TypeVar("T")


def own_loop() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """A loop of the transport's own, running on the ``tether-nats`` thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="tether-nats", daemon=True)
    thread.start()
    return loop, thread


async def on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T | None:
    """``coro`` run on ``loop``, awaited from a coroutine on any loop; None if
    ``loop`` ended under it (a worker holding the link stopped meanwhile)."""
    if loop is _current_loop():
        return await coro
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and not task.cancelling():  # not this caller: the link's loop ended
            return None  # (the caller's next call finds the new link)
        raise


@dataclass(eq=False)
class Ending:
    """A link's parts, taken before the transport forgets it, for ``end``."""

    keeper: Any  # the keeper's task (adopted) or future (own loop)
    pullers: list[Puller]
    nc: Client | None
    pending: set[asyncio.Future[None]]  # flushes and hand-backs under way
    adopted: bool

    async def shut(self, settles: Settler) -> None:
        """On the link loop: end it. On a worker's loop, only the link's own
        tasks: the worker's go on; on the transport's own, every other."""
        if self.keeper is not None:
            self.keeper.cancel()
        for puller in self.pullers:  # what they hold goes to other workers now
            with contextlib.suppress(Exception):
                await puller.drop()
        await _settle_all(settles.take())  # acks still waiting for a wake-up (SETTLE_DELAY): sent now
        if self.pending:
            await asyncio.wait(self.pending, timeout=1.0)
            for task in self.pending:
                task.cancel()
        if not self.adopted:
            for other in asyncio.all_tasks():
                if other is not asyncio.current_task():
                    other.cancel()
        nc = self.nc
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 2.0)


def end(ending: Ending, loop: asyncio.AbstractEventLoop, thread: threading.Thread | None, settles: Settler,
        closing: set[asyncio.Task[None]]) -> None:
    """Blocking, from any thread: end a link the transport has forgotten, and
    its loop if the transport's own (a worker's goes on). On a worker's loop's
    own thread (a sync close there) it cannot wait: the shut is a task kept in
    ``closing``."""
    if loop.is_closed():
        return
    if ending.adopted and loop is _current_loop():
        task = loop.create_task(ending.shut(settles))
        closing.add(task)
        task.add_done_callback(closing.discard)
    else:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(ending.shut(settles), loop).result(3.0)
    if not ending.adopted:
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=3.0)
        if not loop.is_running():
            loop.close()


async def backlog(js: JetStreamContext, stream: str, prefix: str, queues: list[str]) -> dict[str, int]:
    """Each queue's consumer's ``num_pending`` (``NatsTransport.undelivered``)."""
    out: dict[str, int] = {}
    for queue in queues:
        with contextlib.suppress(Exception):  # no such consumer (yet): unknown, left out
            info = await js.consumer_info(stream, consumer_name(prefix, queue), timeout=PUBLISH_TIMEOUT)
            out[queue] = info.num_pending or 0
    return out


class OnceEach:
    """A retried step's failure, logged once for each distinct error rather
    than at every retry (a NATS server without JetStream answered every
    stream set-up, four times a second, with the same unhelpful warning)."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.last: str | None = None

    def failed(self, what: str, exc: Exception) -> None:
        text = f"{what} failed ({exc})"
        if type(exc).__name__ == "ServiceUnavailableError":  # 503: no JetStream there
            text += ": is JetStream enabled on the server (nats-server -js)?"
        if text != self.last:
            self.last = text
            self.log.warning("%s; retrying (quietly while it fails so)", text)

    def passed(self) -> None:
        self.last = None
