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
- ``take(limit)`` hands over what the buffer holds, on any thread: the
  worker's loop takes its round's messages without a trip through the link
  loop while the buffer has them (``take_now``), and only wakes the link loop
  to ask for the next ones (``want``: what its last round took);
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
import time
from collections import deque
from collections.abc import Sequence

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from .nats_settle import _settle

__all__ = ["PULL_EXPIRES", "Puller", "take_now", "top_up_all"]

#: how long one pull request stays open on the server (seconds)
PULL_EXPIRES = 5.0
#: a request is forgotten this long after its expiry even without its 408
_GRACE = 1.0
_STATUS = "Status"
_HEARTBEAT = "100"


class Puller:
    def __init__(self, nc: Client, stream: str, durable: str, arrived: asyncio.Event) -> None:
        self.nc = nc
        self.api = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self.inbox = nc.new_inbox()
        #: (arrival time, message), oldest first
        self.buffer: deque[tuple[float, Msg]] = deque()
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
        """Messages asked for and not yet delivered (requests past their expiry left out)."""
        now = time.monotonic()
        gone = [t for t, (_, until) in self.requests.items() if until <= now]
        for t in gone:
            del self.requests[t]
        return int(sum(due for due, _ in self.requests.values()))

    async def top_up(self, want: int, expires: float = PULL_EXPIRES) -> None:
        """Once the buffer and the requests outstanding cover less than ``want``,
        ask for up to twice that: a request every other round, not every round."""
        have = len(self.buffer) + self.outstanding()
        if have >= want:
            return
        missing = 2 * want - have
        self._seq += 1
        token = str(self._seq)
        self.requests[token] = [float(missing), time.monotonic() + expires + _GRACE]
        body = json.dumps({"batch": missing, "expires": int(expires * 1e9)}).encode()
        await self.nc.publish(self.api, body, reply=f"{self.inbox}.{token}")

    def take(self, limit: int) -> list[Msg]:
        """Any thread (a deque's popleft is atomic): up to ``limit`` buffered messages."""
        out: list[Msg] = []
        buffer = self.buffer
        while len(out) < limit:
            try:
                out.append(buffer.popleft()[1])
            except IndexError:
                break
        return out

    async def expire(self, hold: float) -> int:
        """Nak what waited here longer than ``hold``; returns how many."""
        cutoff = time.monotonic() - hold
        stale = 0
        while self.buffer and self.buffer[0][0] <= cutoff:
            try:  # the worker's thread may take it meanwhile (take): then it is not stale
                _, msg = self.buffer.popleft()
            except IndexError:
                break
            await _settle(msg, "nak")
            stale += 1
        return stale

    async def drop(self) -> None:
        """Nak every buffered message and stop receiving more."""
        self.requests.clear()
        while self.buffer:
            await _settle(self.buffer.popleft()[1], "nak")
        sub, self.sub = self.sub, None
        if sub is not None and not self.nc.is_closed:
            with contextlib.suppress(Exception):  # the link is going anyway
                await sub.unsubscribe()


def take_now(pullers: dict[str, Puller], queues: Sequence[str], limit: int) -> list[Msg]:
    """On the worker's thread: up to ``limit`` messages the queues' buffers hold
    now, each queue in turn; each puller remembers ``limit`` for its next top-up."""
    msgs: list[Msg] = []
    for queue, puller in list(pullers.items()):  # (the link loop may replace the dict's entries)
        if queue in queues:
            puller.want = limit
            if len(msgs) < limit:
                msgs += puller.take(limit - len(msgs))
    return msgs


async def top_up_all(pullers: dict[str, Puller]) -> None:
    """On the link loop: each puller asks for its ``want`` again."""
    for puller in list(pullers.values()):
        if puller.want:
            await puller.top_up(puller.want)
