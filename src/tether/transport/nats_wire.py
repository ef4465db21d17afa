"""What a NATS message says, both ways: the bodies a publish sends, the
deliveries a worker reads from them, and the publishing itself (the NATS
transport's helpers, ``nats.py``).

A message carries one job id (``{"job_id": N, "queue": q, "retry": b}``) or,
from a publish of several jobs of one queue, up to ``IDS_PER_MESSAGE`` of them
(``"job_ids": [N, ...]``): receiving, parsing and acking a message is most of
what NATS costs a worker per job, so a bulk enqueue's jobs share messages.
Each id is a delivery of its own; the message is settled once every one of
its deliveries is (``Carrier``): acked when all were, nak'd when any was.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from .base import Delivery
from .nats_names import subject_for

__all__ = ["IDS_PER_MESSAGE", "PUBLISH_CHUNK", "PUBLISH_TIMEOUT", "Carrier", "bodies", "deliveries", "parse",
           "publish_all"]

log = logging.getLogger("tether.nats")

PUBLISH_TIMEOUT = 2.0
#: messages published at once (each awaits its own ack from the stream)
PUBLISH_CHUNK = 256
#: job ids one message carries at most, from a publish of several jobs of one
#: queue (a sweep's messages carry one each: their message id is the job's)
IDS_PER_MESSAGE = 10


class Carrier:
    """A message and how many of its deliveries are not settled yet: the
    message is acked (or nak'd, should any of them be) when none is left."""

    __slots__ = ("how", "left", "msg")

    def __init__(self, msg: Msg, left: int) -> None:
        self.msg, self.left, self.how = msg, left, "ack"


#: the one type a job id may have (``bool`` is an ``int`` too, and is refused)
_IDS = {int}


def parse(msg: Msg) -> tuple[list[int], str, bool] | None:
    """A message's job ids, queue and retry flag; None (logged) for a malformed
    one, which the caller terminates."""
    try:
        body = json.loads(msg.data)
        queue = body["queue"]
        ids = body["job_ids"] if "job_ids" in body else [body["job_id"]]
        if not isinstance(ids, list) or set(map(type, ids)) != _IDS or not isinstance(queue, str):
            raise ValueError("job_id must be an int, job_ids a list of them, and queue a string")
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("NATS: dropping a malformed message on %s (%s): %r", msg.subject, exc, msg.data[:200])
        return None
    return ids, queue, bool(body.get("retry"))


def bodies(msgs: list[tuple[int, str, bool, str | None]]) -> list[tuple[str, bytes, str | None, int]]:
    """Each message to publish: (queue, body, message id, how many jobs it
    carries). A job with a message id of its own (the sweep's) goes alone;
    the others go up to ``IDS_PER_MESSAGE`` to a message, by queue and retry."""
    out: list[tuple[str, bytes, str | None, int]] = []
    groups: dict[tuple[str, bool], list[int]] = {}
    for job_id, queue, retry, msg_id in msgs:
        if msg_id:
            out.append((queue, json.dumps({"job_id": job_id, "queue": queue, "retry": retry}).encode(), msg_id, 1))
        else:
            groups.setdefault((queue, retry), []).append(job_id)
    for (queue, retry), ids in groups.items():
        for i in range(0, len(ids), IDS_PER_MESSAGE):
            chunk = ids[i:i + IDS_PER_MESSAGE]
            # One id keeps the one-id form, which workers of every release read.
            body = ({"job_id": chunk[0], "queue": queue, "retry": retry} if len(chunk) == 1
                    else {"job_ids": chunk, "queue": queue, "retry": retry})
            out.append((queue, json.dumps(body).encode(), None, len(chunk)))
    return out


def deliveries(msg: Msg, settle: Callable[[Msg, str], None]) -> list[Delivery]:
    """The message's deliveries, sharing its ``Carrier``; none for a malformed
    one, which is terminated (``settle(msg, "term")``)."""
    parsed = parse(msg)
    if parsed is None:
        settle(msg, "term")
        return []
    ids, queue, retry = parsed
    carrier = Carrier(msg, len(ids))
    return [Delivery(job_id=i, queue=queue, retry=retry, handle=carrier) for i in ids]




async def publish_all(js: JetStreamContext, prefix: str, msgs: list[tuple[int, str, bool, str | None]],
                      complain: Callable[[str], None]) -> int:
    """Publish (job id, queue, retry, message id or None) as ``bodies`` groups
    them, ``PUBLISH_CHUNK`` messages at a time; returns how many jobs the
    stream took new messages for (a repeat of a message id within the
    duplicate window is already there). A refusal is ``complain``-ed of."""
    sent = 0
    out = bodies(msgs)
    for i in range(0, len(out), PUBLISH_CHUNK):
        chunk = out[i:i + PUBLISH_CHUNK]
        acks = await asyncio.gather(*(
            js.publish(subject_for(prefix, queue), body, timeout=PUBLISH_TIMEOUT,
                       headers={"Nats-Msg-Id": msg_id} if msg_id else None)
            for queue, body, msg_id, _ in chunk
        ), return_exceptions=True)
        failed = [a for a in acks if isinstance(a, BaseException)]
        sent += sum(jobs for a, (_, _, _, jobs) in zip(acks, chunk, strict=True)
                    if not isinstance(a, BaseException) and not a.duplicate)
        if failed:
            complain(f"NATS refused {len(failed)} of {len(chunk)} publish(es) ({failed[0]}); "
                     "the sweep publishes them later")
    return sent
