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

nats-py is asyncio-only; tether's callers are threads (sync enqueue, the
worker's database threads) and the worker's own event loop. So the transport
runs one event loop of its own on the ``tether-nats`` thread, holding the
connection, and everything crosses over to it; but a round's messages, once
each queue's standing pull (``nats_pull.py``) has brought them in, are taken
on the worker's loop, which wakes the link loop once per round to ask for the
next ones and to send the acks waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from ..config import Timers, validate_queue
from ..errors import ConfigError
from ..model import DueJob
from .base import Delivery, Transport
from .nats_names import _seconds, consumer_name, subject_for, sweep_msg_id, validate_prefix
from .nats_pull import Puller, take_now, top_up_all
from .nats_settle import Coalesced, _current_loop, _settle_all
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
#: default ack_wait, as a multiple of the database's recovery bound
ACK_WAIT_FACTOR = 2.0
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
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("nats", "tls") or not parts.hostname:
            raise ConfigError(f"NATS URL {url!r} must look like nats://host:4222")
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            raise ConfigError(f"NATS URL {url!r}: the port is not a number") from None
        if parts.query:
            raise ConfigError(f"NATS URL {url!r}: options go to NatsTransport(...), or use NatsTransport.from_url")
        self.url = url
        self.prefix = validate_prefix(prefix)
        self.stream = self.prefix
        self.ack_wait_setting = None if ack_wait is None else _seconds(ack_wait, "ack_wait")
        self.ack_wait = self.ack_wait_setting or 60.0  # resolved against the timers by check()
        self.fallback_interval = _seconds(fallback_interval, "fallback_interval")
        self.sweep_interval = _seconds(sweep_interval, "sweep_interval")
        self.sweep_grace = _seconds(sweep_grace, "sweep_grace")
        where = parts.hostname + (f":{parts.port}" if parts.port else "")
        self.name = f"nats://{where} (stream {self.stream})"
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._keeper: Any = None  # the connection keeper's future
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
        self._to_settle: list[tuple[Msg, str]] = []  # acks and naks for the link loop
        self._settle_lock = threading.Lock()
        self._kicked = False  # a flush is on its way to the link loop
        self._kick_soon = Coalesced(self._kick)  # from a worker's loop: its acks in one wake-up

    @classmethod
    def from_url(cls, spec: str) -> NatsTransport:
        """``nats://host:4222?prefix=NAME&ack_wait=S&fallback_interval=S&sweep_interval=S&sweep_grace=S``."""
        parts = urlsplit(spec)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        known = {"prefix", "ack_wait", "fallback_interval", "sweep_interval", "sweep_grace"}
        unknown = sorted(set(query) - known)
        if unknown:
            raise ConfigError(f"NATS URL {spec!r}: unknown option(s) {', '.join(unknown)} "
                              f"(known: {', '.join(sorted(known))})")
        options: dict[str, Any] = {k: _seconds(v, k) for k, v in query.items() if k != "prefix"}
        if "prefix" in query:
            options["prefix"] = query["prefix"]
        return cls(parts._replace(query="").geturl(), **options)

    # -- settings ----------------------------------------------------------------------
    def check(self, timers: Timers) -> None:
        """The database recovers first, JetStream redelivers last: ack_wait must
        outlast a dead worker's recovery (lease_ttl + reaper_interval)."""
        bound = timers.recovery_bound
        if self.ack_wait_setting is None:
            self.ack_wait = ACK_WAIT_FACTOR * bound
            return
        if self.ack_wait_setting <= bound:
            raise ConfigError(
                f"NATS ack_wait ({self.ack_wait_setting:g}s) must be longer than lease_ttl + reaper_interval "
                f"({timers.lease_ttl:g}s + {timers.reaper_interval:g}s = {bound:g}s), so that the database "
                f"recovers a dead worker's job before JetStream redelivers its message: raise ack_wait to "
                f"{ACK_WAIT_FACTOR * bound:g}s or more (or leave it unset), or shorten the lease timers"
            )
        self.ack_wait = self.ack_wait_setting

    # -- the link thread ---------------------------------------------------------------
    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeError("the NATS transport is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name="tether-nats", daemon=True)
                self._thread.start()
                self._loop = loop
                self._keeper = asyncio.run_coroutine_threadsafe(self._keep_connected(), loop)
            return self._loop

    def _submit(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T] | None:
        """Run ``coro`` on the link loop; None (and the coroutine closed) once closed."""
        try:
            loop = self._running_loop()
        except RuntimeError:
            coro.close()
            return None
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop), loop=_current_loop())

    @property
    def healthy(self) -> bool:
        nc = self._nc
        return self._ready.is_set() and nc is not None and nc.is_connected

    def ready(self, timeout: float) -> bool:
        self._running_loop()
        self._ready.wait(timeout)
        return self.healthy

    async def _keep_connected(self) -> None:
        reported = False
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
                    await self._set_up()
                except Exception as exc:
                    log.warning("NATS at %s: setting up stream %s failed (%s); retrying", self.name, self.stream, exc)
                else:
                    if reported:
                        log.warning("NATS at %s is reachable again", self.name)
                    reported = False
                    self._ready.set()
                    log.info("NATS at %s ready: queues %s", self.name, ",".join(self._queues) or "(publish only)")
            for puller in list(self._pullers.values()):
                await puller.expire(BUFFER_HOLD)
            if self._to_settle:  # queued by a loop that stopped before its wake-up came (Coalesced)
                self._flush_settles()
            await asyncio.sleep(WATCH_INTERVAL)

    async def _on_disconnected(self) -> None:
        self._ready.clear()

    async def _on_error(self, exc: Exception) -> None:
        log.debug("NATS: %s", exc)

    async def _set_up(self) -> None:
        """Idempotent: after every (re)connect, make sure the stream and this
        process's consumers exist (a server may come back without its data)."""
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
        for queue in self._queues:
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
                                lambda msg, how: self._settle_share(Carrier(msg, 1), how), self._hand_back)
                await puller.start()
                self._pullers[queue] = puller

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
        if threading.current_thread() is self._thread:
            raise RuntimeError("publish from the NATS thread itself would deadlock")
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
        if not queues or loop is None or not self.healthy or threading.current_thread() is self._thread:
            return {}
        future = asyncio.run_coroutine_threadsafe(self._undelivered(list(queues)), loop)
        try:
            return future.result(PUBLISH_TIMEOUT + 1.0)
        except Exception as exc:
            future.cancel()
            log.debug("NATS: reading the consumers' backlog failed (%s)", exc)
            return {}

    async def _undelivered(self, queues: list[str]) -> dict[str, int]:
        js = self._js
        assert js is not None
        out: dict[str, int] = {}
        for queue in queues:
            with contextlib.suppress(Exception):  # no such consumer (yet): unknown, left out
                info = await js.consumer_info(self.stream, consumer_name(self.prefix, queue), timeout=PUBLISH_TIMEOUT)
                out[queue] = info.num_pending or 0
        return out

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
        new = [validate_queue(q) for q in queues if q not in self._queues]
        if new:
            self._queues = [*self._queues, *new]
            self._ready.clear()  # set up their consumers too
        self._running_loop()

    async def fetch(self, limit: int, timeout: float, queues: Sequence[str]) -> list[Delivery]:
        if not self.healthy:
            return []
        got = take_now(self._pullers, queues, limit)
        if got:  # taken here, on the caller's loop: the link loop is only woken to ask for more
            if any(p.short() for p in list(self._pullers.values())):
                self._kick()
            return got
        future = self._submit(self._fetch(limit, timeout, list(queues)))
        return [] if future is None else await future

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
                await top_up_all(self._pullers)
                left = until - loop.time()
                if left <= 0 or not self.healthy:
                    return []
                arrived.clear()
                if not any(p.buffer for p in pullers):
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(left, WATCH_INTERVAL)):  # look at the link now and then
                            await arrived.wait()
            await top_up_all(self._pullers)  # read ahead: the next round's messages
        except Exception as exc:  # the link dropped under a request
            log.warning("NATS fetch failed (%s); setting the stream up again", exc)
            self._ready.clear()
            await asyncio.sleep(min(timeout, 0.5))
            return []
        return got

    def ack(self, delivery: Delivery) -> None:
        if isinstance(delivery.handle, Carrier):
            self._settle_share(delivery.handle, "ack")

    def nak(self, delivery: Delivery) -> None:
        if isinstance(delivery.handle, Carrier):
            self._settle_share(delivery.handle, "nak")

    def _settle_share(self, carrier: Carrier, how: str) -> None:
        """One delivery settled: its message, once the last of its deliveries is."""
        with self._settle_lock:
            if how != "ack":
                carrier.how = how
            carrier.left -= 1
            if carrier.left > 0:
                return
            self._to_settle.append((carrier.msg, carrier.how))
        self._kick_soon(self._loop)

    def _hand_back(self, rest: list[Delivery]) -> None:
        """Any thread: deliveries a round had no room for (a message split by
        ``Puller.take``) go back to the stream as a message of their own, for
        the next worker that asks; their share of the old message is settled.
        Should that publish fail, their jobs wait for the sweep."""
        msgs: list[tuple[int, str, bool, str | None]] = [(d.job_id, d.queue, d.retry, None) for d in rest]
        if (loop := self._loop) is not None and self.healthy:
            with contextlib.suppress(RuntimeError):  # the loop has closed: the sweep has them
                loop.call_soon_threadsafe(lambda: self._spawn(self._publish(msgs)))
        for d in rest:
            self.ack(d)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """On the link loop: run ``coro`` as a task of its own, kept until done."""
        self._pending.add(task := asyncio.ensure_future(coro))
        task.add_done_callback(self._pending.discard)

    def _kick(self) -> None:
        """Any thread: wake the link loop once for whatever waits (settles, top-ups)."""
        loop = self._loop
        if loop is None or self._closed:
            return
        with self._settle_lock:
            if self._kicked:
                return  # a flush is already on its way
            self._kicked = True
        try:
            loop.call_soon_threadsafe(self._flush_settles)
        except RuntimeError:  # the loop has closed: no flush will come for what is queued
            with self._settle_lock:  # (nor would one ever be sent again); JetStream redelivers after ack_wait
                self._to_settle.clear()
                self._kicked = False

    def _flush_settles(self) -> None:
        with self._settle_lock:  # on the link loop
            batch, self._to_settle, self._kicked = self._to_settle, [], False
        self._spawn(self._flush(batch))

    async def _flush(self, batch: list[tuple[Msg, str]]) -> None:
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
        asyncio.run_coroutine_threadsafe(js.delete_stream(self.stream), self._loop).result(PUBLISH_TIMEOUT + 1.0)
        self._ready.clear()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        self._ready.clear()
        if loop is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shut(), loop).result(3.0)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=3.0)
        if not loop.is_running():
            loop.close()
        with self._lock:  # closed, but usable again: the next publish starts a new link
            self._loop = self._thread = self._nc = self._js = self._keeper = None
            self._pullers.clear()
            self._arrived = None
            self._waited = False
            self._closed = False
        with self._settle_lock:  # their messages are redelivered after ack_wait
            self._to_settle.clear()
            self._kicked = False

    async def _shut(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
        for puller in list(self._pullers.values()):  # what they hold goes to other workers now
            with contextlib.suppress(Exception):
                await puller.drop()
        with self._settle_lock:  # acks still waiting for a wake-up (SETTLE_DELAY): sent now
            batch, self._to_settle = self._to_settle, []
        await _settle_all(batch)
        if self._pending:  # flushes and hand-backs under way
            await asyncio.wait(self._pending, timeout=1.0)
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        nc = self._nc
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 2.0)


