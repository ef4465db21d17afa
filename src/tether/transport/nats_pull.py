"""A queue's standing pull on its durable JetStream consumer (the NATS
transport's consuming side, on the link loop).

nats-py's ``PullSubscription.fetch`` sends a pull request per call, waits for
its answer, and takes each message through ``next_msg`` (a task, a uuid and a
``wait_for`` per message): a transport round paid a NATS round trip and most of
the worker's CPU per job. Here each queue keeps pull requests of its own
outstanding: messages arrive on a plain subscription (one callback each, into
a buffer) ahead of the claimer's next round, which then takes them at once.

- ``top_up(n)``, once the buffer and the requests still outstanding cover
  less than ``n``, asks the server for up to ``2n``. Every request has a reply subject
  of its own (``<inbox>.<seq>``): a status (404 no messages, 408 expired, 409
  ...) names the request it ends. A message keeps its stream subject, so it
  counts against the oldest request (the server serves them in order). A
  request is forgotten at its expiry in any case: a miscount costs at most a
  request sent late or one too many;
- ``take(limit)`` hands over up to ``limit`` deliveries, on any thread: the
  worker's loop takes its round's messages without a trip through the link
  loop while the buffer has them (``take_now``), and only wakes the link loop
  to ask for the next ones (``want``: what its last round took). A message
  may carry several job ids (a bulk publish's): a round takes whole messages
  while they fit; one bigger than the round's whole room is split, and the
  ids it has no room for go back to the stream at once as a message of their
  own (``hand_back``), for whichever worker asks next. Requests are sized in
  messages from the ids a message has carried lately (``per_msg``);
- ``expire(hold)`` naks messages that waited in the buffer longer than
  ``hold`` (a worker whose slots stay busy), so that JetStream gives them to
  another worker now rather than after ``ack_wait``;
- ``drop()`` (at close) naks the whole buffer the same way.

A message the buffer holds when the process dies is redelivered after
``ack_wait``; its job is in the database meanwhile, where the sweep and the
reaper find it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import deque
from collections.abc import Callable, Sequence

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from .base import Delivery
from .nats_settle import _settle
from .nats_wire import Carrier, deliveries

__all__ = ["PULL_EXPIRES", "Puller", "take_now", "top_up_all"]

#: how long one pull request stays open on the server (seconds)
PULL_EXPIRES = 5.0
#: a request is forgotten this long after its expiry even without its 408
_GRACE = 1.0
_STATUS = "Status"
_HEARTBEAT = "100"


#: how fast ``per_msg`` follows the ids the latest messages carried
_PER_MSG_WEIGHT = 0.2

#: a buffered message, or the deliveries read from one that a round put back whole
Buffered = Msg | list[Delivery]


class Puller:
    def __init__(self, nc: Client, stream: str, durable: str, arrived: asyncio.Event,
                 settle: Callable[[Msg, str], None], hand_back: Callable[[list[Delivery]], None]) -> None:
        self.nc = nc
        self.api = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self.inbox = nc.new_inbox()
        #: (arrival time, message), oldest first
        self.buffer: deque[tuple[float, Buffered]] = deque()
        #: terminates a malformed message; takes back ids a split message had no room for
        self.settle, self.hand_back = settle, hand_back
        #: job ids per message lately (1 unless bulk publishes send several)
        self.per_msg = 1.0
        #: outstanding requests by reply token: [messages still due, forget-at time]
        self.requests: dict[str, list[float]] = {}
        self.arrived = arrived
        self.sub: Subscription | None = None
        #: what the claimer's last round asked for: the next top-up's size
        self.want = 0
        self._seq = 0

    async def start(self) -> None:
        self.sub = await self.nc.subscribe(f"{self.inbox}.*", cb=self._on_msg)

    async def _on_msg(self, msg: Msg) -> None:
        token = msg.subject[len(self.inbox) + 1:]
        headers = msg.headers
        status = headers.get(_STATUS) if headers else None
        if status:
            if status != _HEARTBEAT:
                # 404 (nothing now), 408 (expired), 409 (too many requests, ...):
                # the request is over, and a waiting fetch may want to ask again
                self.requests.pop(token, None)
                self.arrived.set()
            return
        # A message keeps its stream subject, not the request's: count it against
        # the oldest request (the server serves a consumer's requests in order)
        oldest = next(iter(self.requests.items()), None)
        if oldest is not None:
            oldest[1][0] -= 1
            if oldest[1][0] <= 0:
                del self.requests[oldest[0]]
        self.buffer.append((time.monotonic(), msg))
        self.arrived.set()

    def outstanding(self) -> int:
        """Messages asked for and not yet delivered (requests past their expiry
        left out, and forgotten: on the link loop)."""
        now = time.monotonic()
        gone = [t for t, (_, until) in self.requests.items() if until <= now]
        for t in gone:
            del self.requests[t]
        return self._due(now)

    def _due(self, now: float) -> int:
        """``outstanding`` without forgetting anything: any thread may ask."""
        return int(sum(due for due, until in list(self.requests.values()) if until > now))

    def in_messages(self, count: int) -> int:
        """About how many messages carry this many deliveries lately."""
        return max(1, math.ceil(count / self.per_msg)) if count > 0 else 0

    def short(self) -> bool:
        """Any thread: would ``top_up`` ask for more now? (read only: the worker's
        loop wakes the link loop for a top-up only when one is due)"""
        return len(self.buffer) + self._due(time.monotonic()) < self.in_messages(self.want)

    async def top_up(self, want: int, expires: float = PULL_EXPIRES) -> None:
        """Once the buffer and the requests outstanding cover less than ``want``
        deliveries, ask for up to twice that: a request every other round, not every round."""
        need = self.in_messages(want)
        have = len(self.buffer) + self.outstanding()
        if have >= need:
            return
        missing = 2 * need - have
        self._seq += 1
        token = str(self._seq)
        self.requests[token] = [float(missing), time.monotonic() + expires + _GRACE]
        body = json.dumps({"batch": missing, "expires": int(expires * 1e9)}).encode()
        await self.nc.publish(self.api, body, reply=f"{self.inbox}.{token}")

    def take(self, limit: int) -> list[Delivery]:
        """Any thread (a deque's popleft is atomic): up to ``limit`` deliveries
        from the buffered messages, whole messages while they fit."""
        out: list[Delivery] = []
        buffer = self.buffer
        while len(out) < limit:
            try:
                arrived, item = buffer.popleft()
            except IndexError:
                break
            if isinstance(item, list):
                got = item
            else:
                got = deliveries(item, self.settle)
                if got:
                    self.per_msg += (len(got) - self.per_msg) * _PER_MSG_WEIGHT
            room = limit - len(out)
            if len(got) <= room:
                out += got
            elif out:  # the next round's: this one has some already
                buffer.appendleft((arrived, got))
                break
            else:  # bigger than the whole room: the rest to another worker now
                out += got[:room]
                self.hand_back(got[room:])
        return out

    async def expire(self, hold: float) -> int:
        """Nak what waited here longer than ``hold``; returns how many."""
        cutoff = time.monotonic() - hold
        stale = 0
        while self.buffer and self.buffer[0][0] <= cutoff:
            try:  # the worker's thread may take it meanwhile (take): then it is not stale
                _, item = self.buffer.popleft()
            except IndexError:
                break
            await _settle(_message(item), "nak")
            stale += 1
        return stale

    async def drop(self) -> None:
        """Nak every buffered message and stop receiving more."""
        self.requests.clear()
        while self.buffer:
            await _settle(_message(self.buffer.popleft()[1]), "nak")
        sub, self.sub = self.sub, None
        if sub is not None and not self.nc.is_closed:
            with contextlib.suppress(Exception):  # the link is going anyway
                await sub.unsubscribe()


def _message(item: Buffered) -> Msg:
    """The message a buffered item is (a message put back whole: none of its deliveries went out)."""
    if isinstance(item, list):
        carrier = item[0].handle
        assert isinstance(carrier, Carrier)
        return carrier.msg
    return item


def take_now(pullers: dict[str, Puller], queues: Sequence[str], limit: int) -> list[Delivery]:
    """On the worker's thread: up to ``limit`` deliveries the queues' buffers
    hold now, each queue in turn; each puller remembers ``limit`` for its next top-up."""
    out: list[Delivery] = []
    for queue, puller in list(pullers.items()):  # (the link loop may replace the dict's entries)
        if queue in queues:
            puller.want = limit
            if len(out) < limit:
                out += puller.take(limit - len(out))
    return out


async def top_up_all(pullers: dict[str, Puller]) -> None:
    """On the link loop: each puller asks for its ``want`` again."""
    for puller in list(pullers.values()):
        if puller.want:
            await puller.top_up(puller.want)
