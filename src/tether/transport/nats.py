"""NATS JetStream as a transport: the queue delivers, the database owns.

Layout on the server, all under one validated ``prefix`` (default ``tether``;
give each tether database its own):

- one stream named ``<prefix>`` over ``<prefix>.jobs.>``, work-queue retention
  (a message is gone once acked), file storage, a two-minute duplicate window;
- one subject and one durable pull consumer per queue: ``<prefix>.jobs.<queue>``
  and ``<prefix>_<queue>`` (a ``.`` in a queue name becomes ``~``), shared by
  every worker of that queue, so each message goes to one of them.

A message carries a job id, or several of one queue (``nats_wire.py``). The
worker claims those jobs by id through the fenced claim, and acks the message
once the database has recorded each outcome (or refused the claim).
``ack_wait`` must be longer than ``lease_ttl + reaper_interval``: the database
recovers a dead worker's job first (and the reaper republishes it);
JetStream's redelivery is the backstop.

nats-py is asyncio-only, and its client lives on one event loop, the link
loop; tether's callers are threads (sync enqueue, the worker's database
threads) and the worker's own event loop. Two cases:

- **a worker's loop.** The first worker to start consuming on a transport
  with no link yet runs the client on its own event loop: its rounds take
  messages and send acks without a hand-off between threads (the two threads
  waking each other cost a worker about 15% of its CPU per job). Other
  threads cross over to that loop; a sync publish on the loop's own thread
  (an ``async def`` handler calling ``enqueue``) is sent in the background
  instead of waited for. The worker hands the link back as it
  stops (``stop``), on its loop, before that loop ends: the next publish, or
  a second worker still consuming (which shared that loop meanwhile), starts
  a link on a thread;
- **otherwise** (a producer, or a worker that finds a link already on a
  thread), the transport runs an event loop of its own on the ``tether-nats``
  thread, and everything crosses over to it; a round's messages, once each
  queue's standing pull (``nats_pull.py``) has brought them in, are still
  taken on the worker's loop, which wakes the link loop once per round to ask
  for the next ones and to send the acks waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from ..config import Timers, validate_queue
from ..errors import ConfigError
from ..model import DueJob
from .base import Delivery, Transport
from .nats_link import Ending, OnceEach, backlog, end, on_loop, own_loop
from .nats_names import (
    _seconds,
    ack_wait_for,
    consumer_name,
    server_of,
    split_options,
    subject_for,
    sweep_msg_id,
    validate_prefix,
)
from .nats_pull import Puller, take_now, top_up_all
from .nats_settle import Settle, Settler, _current_loop, _settle_all
from .nats_wire import PUBLISH_CHUNK, PUBLISH_TIMEOUT, Carrier, publish_all

__all__ = ["NatsTransport", "consumer_name", "subject_for"]

log = logging.getLogger("tether.nats")
T = TypeVar("T")

DEFAULT_URL = "nats://127.0.0.1:4222"
DEFAULT_PREFIX = "tether"
CONNECT_TIMEOUT = 2.0
RECONNECT_WAIT = 1.0
#: how often the connection keeper checks the link and redoes the set-up after a reconnect
WATCH_INTERVAL = 0.25
#: JetStream drops a second message with the same Nats-Msg-Id within this window
DUPLICATE_WINDOW = 120.0
#: a message nobody consumed (a queue without workers) is dropped after this;
#: the job is still in the database, where the sweep finds it
MAX_AGE = 7 * 24 * 3600.0
#: a message pulled ahead that waited this long (the worker's slots stayed busy) goes back (nak)
BUFFER_HOLD = 1.0
#: how long to wait before logging "cannot publish" again
COMPLAIN_EVERY = 10.0

class NatsTransport(Transport):
    delivers = True

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        prefix: str = DEFAULT_PREFIX,
        ack_wait: float | None = None,
        fallback_interval: float = 30.0,
        sweep_interval: float = 1.0,
        sweep_grace: float = 5.0,
    ) -> None:
        where = server_of(url)
        self.url = url
        self.prefix = validate_prefix(prefix)
        self.stream = self.prefix
        self.ack_wait_setting = None if ack_wait is None else _seconds(ack_wait, "ack_wait")
        self.ack_wait = self.ack_wait_setting or 60.0  # resolved against the timers by check()
        self.fallback_interval = _seconds(fallback_interval, "fallback_interval")
        self.sweep_interval = _seconds(sweep_interval, "sweep_interval")
        self.sweep_grace = _seconds(sweep_grace, "sweep_grace")
        self.name = f"nats://{where} (stream {self.stream})"
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None  # the link loop's thread (a worker's, when adopted)
        self._adopted = False  # the link loop is a worker's, not the transport's own
        self._consumers = 0  # workers started and not yet stopped
        self._keeper: Any = None  # the connection keeper's future (a task on an adopted loop)
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._ready = threading.Event()  # connected, stream and consumers in place
        self._closed = False
        self._waited = False
        self._queues: list[str] = []
        self._pullers: dict[str, Puller] = {}  # each queue's standing pull (nats_pull.py)
        self._arrived: asyncio.Event | None = None  # set on the link loop when a message arrives
        self._complained = 0.0
        self._pending: set[asyncio.Future[None]] = set()
        self._closing: set[asyncio.Task[None]] = set()  # a close on the adopted loop's own thread
        self._settles = Settler(lambda: None if self._closed else self._loop, self._flush_settles)

    @classmethod
    def from_url(cls, spec: str) -> NatsTransport:
        """``nats://host:4222?prefix=NAME&ack_wait=S&fallback_interval=S&sweep_interval=S&sweep_grace=S``."""
        url, options = split_options(spec)
        return cls(url, **options)

    # -- settings ----------------------------------------------------------------------
    def check(self, timers: Timers) -> None:
        """The database recovers first, JetStream redelivers last: ack_wait must
        outlast a dead worker's recovery (lease_ttl + reaper_interval)."""
        self.ack_wait = ack_wait_for(self.ack_wait_setting, timers)

    # -- the link thread ---------------------------------------------------------------
    def _running_loop(self, adopt: asyncio.AbstractEventLoop | None = None) -> asyncio.AbstractEventLoop:
        """The link loop, started if there is none: ``adopt`` (the caller's
        running loop) if given, else a thread of its own."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the NATS transport is closed")
            if self._loop is not None and self._loop.is_closed():
                self._forget_link()  # an adopted loop that ended without stop(): start afresh
            if self._loop is None:
                if adopt is not None:
                    self._loop, self._thread, self._adopted = adopt, threading.current_thread(), True
                    self._keeper = adopt.create_task(self._keep_connected(), name="tether-nats-keeper")
                else:
                    self._loop, self._thread = own_loop()
                    self._keeper = asyncio.run_coroutine_threadsafe(self._keep_connected(), self._loop)
            return self._loop

    def _forget_link(self) -> None:
        """Under ``_lock``: no link loop any more (the next use starts one)."""
        self._loop = self._thread = self._nc = self._js = self._keeper = None
        self._adopted = False
        self._pullers.clear()
        self._arrived = None
        self._waited = False
        self._ready.clear()

    def _on_link(self) -> bool:
        """True on the link loop's own thread (a worker's loop it adopted, or the transport's)."""
        return self._thread is threading.current_thread()

    async def _on_link_loop(self, coro: Coroutine[Any, Any, T]) -> T | None:
        """Run ``coro`` on the link loop, from a coroutine on any loop; None (and
        the coroutine closed) once closed."""
        try:
            loop = self._running_loop()
        except RuntimeError:
            coro.close()
            return None
        return await on_loop(loop, coro)

    @property
    def healthy(self) -> bool:
        nc = self._nc
        return self._ready.is_set() and nc is not None and nc.is_connected

    def ready(self, timeout: float) -> bool:
        self._running_loop()
        if not self._on_link():  # (waiting on the link loop's own thread would hold it up)
            self._ready.wait(timeout)
        return self.healthy

    async def _keep_connected(self) -> None:
        try:
            await self._keep()
        finally:
            if self._keeper is not None and self._loop is _current_loop():
                # cancelled while still the link's keeper (stop and close forget the link first): the
                # worker's loop ends without stop() (asyncio.run cancels every task left), so the
                # client is closed here, or its socket would outlive the loop
                self._ready.clear()
                if (nc := self._nc) is not None and not nc.is_closed:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(nc.close(), 2.0)

    async def _keep(self) -> None:
        reported, set_up = False, OnceEach(log)
        while not self._closed:
            nc = self._nc
            if nc is None or nc.is_closed:
                # No reconnects inside nats-py: a dropped link closes the client and
                # this loop builds a new one (and new subscriptions), so there is
                # one recovery path for "never reached" and "lost".
                self._ready.clear()
                self._pullers.clear()  # their buffers went with the link: redelivered after ack_wait
                try:
                    nc = await nats.connect(
                        self.url, name="tether", connect_timeout=int(CONNECT_TIMEOUT), allow_reconnect=False,
                        max_reconnect_attempts=1, reconnect_time_wait=int(RECONNECT_WAIT),
                        disconnected_cb=self._on_disconnected, error_cb=self._on_error,
                    )
                except Exception as exc:
                    if not reported:
                        log.warning("cannot reach NATS at %s (%s); retrying every %gs", self.name, exc, RECONNECT_WAIT)
                        reported = True
                    await asyncio.sleep(RECONNECT_WAIT)
                    continue
                self._nc, self._js = nc, nc.jetstream(timeout=PUBLISH_TIMEOUT)
            if nc.is_connected and not self._ready.is_set():
                try:
                    covered = await self._set_up()
                except Exception as exc:
                    set_up.failed(f"NATS at {self.name}: setting up stream {self.stream}", exc)
                else:
                    set_up.passed()
                    with self._lock:  # ready only if no worker added queues meanwhile (start())
                        if set(self._queues) <= covered:
                            self._ready.set()
                    if self._ready.is_set():
                        if reported:
                            log.warning("NATS at %s is reachable again", self.name)
                        reported = False
                        log.info("NATS at %s ready: queues %s", self.name,
                                 ",".join(sorted(covered)) or "(publish only)")
                    continue  # (else: set up the new queues too, at once)
            for puller in list(self._pullers.values()):
                await puller.expire(BUFFER_HOLD)
            if self._settles.queued:  # queued by a loop that stopped before its wake-up came (Coalesced)
                self._settles.wake()
            await asyncio.sleep(WATCH_INTERVAL)

    async def _on_disconnected(self) -> None:
        self._ready.clear()

    async def _on_error(self, exc: Exception) -> None:
        log.debug("NATS: %s", exc)

    async def _set_up(self) -> set[str]:
        """Idempotent: after every (re)connect, make sure the stream and this
        process's consumers exist (a server may come back without its data).
        Returns the queues it set up (a worker may add more meanwhile)."""
        js = self._js
        assert js is not None
        try:
            await js.stream_info(self.stream)
        except NotFoundError:
            await js.add_stream(api.StreamConfig(
                name=self.stream, subjects=[f"{self.prefix}.jobs.>"], retention=api.RetentionPolicy.WORK_QUEUE,
                storage=api.StorageType.FILE, duplicate_window=DUPLICATE_WINDOW, max_age=MAX_AGE,
            ))
            log.info("NATS: created stream %s", self.stream)
        queues = list(self._queues)
        for queue in queues:
            durable = consumer_name(self.prefix, queue)
            await js.add_consumer(self.stream, api.ConsumerConfig(
                durable_name=durable, filter_subject=subject_for(self.prefix, queue),
                ack_policy=api.AckPolicy.EXPLICIT, deliver_policy=api.DeliverPolicy.ALL,
                ack_wait=self.ack_wait, max_deliver=-1, max_ack_pending=-1,
            ))
            if queue not in self._pullers:
                if self._arrived is None:
                    self._arrived = asyncio.Event()
                assert self._nc is not None
                puller = Puller(self._nc, self.stream, durable, self._arrived,
                                lambda msg, how: self._settles.share(Carrier(msg, 1), how), self._hand_back)
                await puller.start()
                self._pullers[queue] = puller
        return set(queues)

    # -- publishing (any thread but the link's) ------------------------------------------
    def publish(self, jobs: Sequence[tuple[int, str]], *, retry: bool = False) -> int:
        """Returns how many new messages the stream took (repeats of a message id
        within the duplicate window are not counted)."""
        return self._publish_sync([(job_id, queue, retry, None) for job_id, queue in jobs])

    def publish_due(self, due: Sequence[DueJob]) -> int:
        return self._publish_sync([(d.id, d.queue, True, sweep_msg_id(self.prefix, d, self.sweep_grace)) for d in due])

    def _publish_sync(self, msgs: list[tuple[int, str, bool, str | None]]) -> int:
        if not msgs:
            return 0
        try:
            loop = self._running_loop()
        except RuntimeError:
            return 0
        if self._on_link():
            if not self._adopted:
                raise RuntimeError("publish from the NATS thread itself would deadlock")
            # a worker's loop runs the client and this call runs on it (a sync
            # enqueue in an async handler): waiting would block the very loop
            # that sends, so it is sent in the background (not counted)
            if self.healthy:
                self._spawn(self._publish(msgs))
            else:
                self._complain(f"NATS at {self.name} is unreachable: {len(msgs)} job(s) not published; "
                               "the sweep publishes them when it is back")
            return 0
        if not self._waited:  # the first publish waits for the first connection
            self._waited = True
            self._ready.wait(CONNECT_TIMEOUT + 1.0)
        if not self.healthy:
            self._complain(f"NATS at {self.name} is unreachable: {len(msgs)} job(s) not published; "
                           "the sweep publishes them when it is back, and workers poll the database meanwhile")
            return 0
        future = asyncio.run_coroutine_threadsafe(self._publish(msgs), loop)
        try:  # each chunk has its own timeout: the whole, as long as they add up to
            return future.result(PUBLISH_TIMEOUT * -(-len(msgs) // PUBLISH_CHUNK) + 1.0)
        except Exception as exc:
            future.cancel()
            self._complain(f"publishing {len(msgs)} job(s) to NATS failed ({str(exc) or type(exc).__name__}); "
                           "the sweep publishes them later")
            return 0

    def undelivered(self, queues: Sequence[str]) -> dict[str, int]:
        """Each queue's durable consumer's ``num_pending``: messages in the
        stream past what the consumer has delivered to any worker. (Not
        ``num_ack_pending``: those were handed over, and include every running
        job's message, which is acked only when its outcome is written.)"""
        loop = self._loop
        if not queues or loop is None or not self.healthy or self._on_link():
            return {}
        assert self._js is not None
        future = asyncio.run_coroutine_threadsafe(backlog(self._js, self.stream, self.prefix, list(queues)), loop)
        try:
            return future.result(PUBLISH_TIMEOUT + 1.0)
        except Exception as exc:
            future.cancel()
            log.debug("NATS: reading the consumers' backlog failed (%s)", exc)
            return {}

    def _complain(self, text: str) -> None:
        now = time.monotonic()
        if now - self._complained >= COMPLAIN_EVERY:
            self._complained = now
            log.warning("%s", text)

    async def _publish(self, msgs: list[tuple[int, str, bool, str | None]]) -> int:
        assert self._js is not None  # how many jobs the stream took new messages for
        return await publish_all(self._js, self.prefix, msgs, self._complain)

    # -- consuming (the worker's event loop) ---------------------------------------------
    def start(self, queues: Sequence[str]) -> None:
        """Called on a worker's running loop, with no link yet: the client runs
        on that loop (the module's docstring); the worker must ``stop``."""
        wanted = [validate_queue(q) for q in queues]
        with self._lock:  # (with the keeper's check: a set-up under way must not end ready without them)
            self._consumers += 1
            new = [q for q in wanted if q not in self._queues]
            if new:
                self._queues = [*self._queues, *new]
                self._ready.clear()  # set up their consumers too
        self._running_loop(adopt=_current_loop())

    async def stop(self, queues: Sequence[str]) -> None:
        """On the worker's loop, as it stops: a link running on this loop closes
        now, before the loop ends; other workers still consuming get one on a
        thread of the transport's own, at once."""
        with self._lock:
            self._consumers = max(0, self._consumers - 1)
            if not (self._adopted and self._loop is _current_loop()) or self._closed:
                return
            others, ending = self._consumers > 0, self._ending()
            self._forget_link()
        await ending.shut(self._settles)  # (an ack queued after it fails with its client: redelivered)
        if others:
            with contextlib.suppress(RuntimeError):
                self._running_loop()

    def fetch_buffered(self, limit: int, queues: Sequence[str]) -> list[Delivery]:
        got = take_now(self._pullers, queues, limit) if self.healthy else []
        if got and any(p.short() for p in list(self._pullers.values())):
            self._settles.kick()  # (taken on the caller's loop: the link loop is only woken to ask for more)
        return got

    async def fetch(self, limit: int, timeout: float, queues: Sequence[str]) -> list[Delivery]:
        if (got := self.fetch_buffered(limit, queues)) or not self.healthy:
            return got
        return await self._on_link_loop(self._fetch(limit, timeout, list(queues))) or []

    async def _fetch(self, limit: int, timeout: float, queues: list[str]) -> list[Delivery]:
        """The link loop's fetch, when the buffers were empty: wait up to ``timeout`` for a first."""
        pullers = [p for q, p in self._pullers.items() if q in queues]
        arrived = self._arrived
        if not pullers or arrived is None:
            await asyncio.sleep(min(timeout, WATCH_INTERVAL))
            return []
        until = (loop := asyncio.get_running_loop()).time() + timeout
        try:
            while not (got := take_now(self._pullers, queues, limit)):
                if self._loop is not loop:  # the link left this loop (its worker stopped) meanwhile
                    return []
                await top_up_all(self._pullers)
                left = until - loop.time()
                if left <= 0 or not self.healthy:
                    return []
                arrived.clear()
                if not any(p.buffer for p in pullers):
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(left, WATCH_INTERVAL)):  # look at the link now and then
                            await arrived.wait()
            if self._loop is loop:
                await top_up_all(self._pullers)  # read ahead: the next round's messages
        except Exception as exc:  # the link dropped under a request
            log.warning("NATS fetch failed (%s); setting the stream up again", exc)
            self._ready.clear()
            await asyncio.sleep(min(timeout, 0.5))
            return []
        return got

    def ack(self, delivery: Delivery) -> None:
        self.ack_many((delivery,))

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        self._settles.share_all([d.handle for d in deliveries if isinstance(d.handle, Carrier)], "ack")

    def nak(self, delivery: Delivery) -> None:
        self._settles.share_all([delivery.handle] if isinstance(delivery.handle, Carrier) else [], "nak")

    def _hand_back(self, rest: list[Delivery]) -> None:
        """Any thread: deliveries a round had no room for (a message split by
        ``Puller.take``) go back to the stream as a message of their own, for
        the next worker that asks; their share of the old message is settled.
        Should that publish fail, their jobs wait for the sweep."""
        msgs: list[tuple[int, str, bool, str | None]] = [(d.job_id, d.queue, d.retry, None) for d in rest]
        if (loop := self._loop) is not None and self.healthy:
            with contextlib.suppress(RuntimeError):  # the loop has closed: the sweep has them
                loop.call_soon_threadsafe(lambda: self._spawn(self._publish(msgs)))
        self.ack_many(rest)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """On the link loop: run ``coro`` as a task of its own, kept until done."""
        self._pending.add(task := asyncio.ensure_future(coro))
        task.add_done_callback(self._pending.discard)

    def _flush_settles(self, batch: list[Settle]) -> None:
        self._spawn(self._flush(batch))  # on the link loop

    async def _flush(self, batch: list[Settle]) -> None:
        with contextlib.suppress(Exception):  # the link dropped: set up again by the keeper
            await top_up_all(self._pullers)
        await _settle_all(batch)

    # -- shutdown --------------------------------------------------------------------------
    def destroy(self) -> None:
        """Delete this transport's stream (and so its consumers and messages)."""
        if not self.ready(CONNECT_TIMEOUT + 1.0):
            raise ConfigError(f"NATS at {self.name} is unreachable: cannot delete stream {self.stream}")
        js = self._js
        assert js is not None and self._loop is not None
        if self._on_link():
            raise RuntimeError("destroy() blocks: call it from a thread other than the NATS client's loop")
        asyncio.run_coroutine_threadsafe(js.delete_stream(self.stream), self._loop).result(PUBLISH_TIMEOUT + 1.0)
        self._ready.clear()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread, ending = self._loop, self._thread, self._ending()
            self._forget_link()  # first: its keeper, cancelled by the shut, then leaves the client to it
        if loop is not None:
            end(ending, loop, thread, self._settles, self._closing)
        with self._lock:  # closed, but usable again: the next publish starts a new link
            self._closed = False
        self._settles.clear()  # their messages are redelivered after ack_wait

    def _ending(self) -> Ending:
        """Under ``_lock``: what ending the link ends, taken before it is forgotten."""
        return Ending(self._keeper, list(self._pullers.values()), self._nc, set(self._pending), self._adopted)
