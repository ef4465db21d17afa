"""nats-py's own cost per job message, without tether: the floor under
tether's NATS transport.

Publishes N messages shaped as tether's (``{"job_id", "queue", "retry"}``) to
a scratch work-queue stream, then consumes them as a worker's rounds do:
pull requests of ``--batch`` messages on a plain subscription, each message's
JSON read and the message acked (``--no-ack``: not acked). Prints one
``BENCH-RESULT {json}`` line with the process CPU per message over the
consuming part only (publishing is left out), and deletes the stream.

A job delivered by NATS costs the worker at least this much more than one
claimed from the database, whatever tether does around it: receiving and
parsing one message, and publishing one ack.

    python nats_floor.py nats://127.0.0.1:4222 --n 20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import time

import nats
from nats.aio.msg import Msg
from nats.js import api


async def floor(url: str, n: int, batch: int, ack: bool) -> dict[str, float]:
    nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=1)
    js = nc.jetstream()
    stream = f"floor_{secrets.token_hex(4)}"
    await js.add_stream(api.StreamConfig(name=stream, subjects=[f"{stream}.>"],
                                         retention=api.RetentionPolicy.WORK_QUEUE))
    try:
        for start in range(0, n, 500):
            await asyncio.gather(*(js.publish(f"{stream}.jobs.q", json.dumps(
                {"job_id": k, "queue": "q", "retry": False}).encode()) for k in range(start, min(n, start + 500))))
        await js.add_consumer(stream, api.ConsumerConfig(durable_name="c", ack_policy=api.AckPolicy.EXPLICIT,
                                                         max_ack_pending=-1, ack_wait=60))
        inbox, got, want, arrived = nc.new_inbox(), 0, 0, asyncio.Event()

        async def on_msg(msg: Msg) -> None:
            nonlocal got
            if msg.headers and msg.headers.get("Status"):
                return  # 404/408: a request ended
            json.loads(msg.data)
            if ack:
                await msg.ack()
            got += 1
            if got >= want:
                arrived.set()

        await nc.subscribe(f"{inbox}.*", cb=on_msg)
        cpu0, t0 = time.process_time(), time.perf_counter()
        seq = 0
        while got < n:
            seq += 1
            want = min(n, got + batch)
            arrived.clear()
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.c",
                             json.dumps({"batch": batch, "expires": int(5e9)}).encode(), reply=f"{inbox}.{seq}")
            await asyncio.wait_for(arrived.wait(), 30)
        await nc.flush()
        cpu, seconds = time.process_time() - cpu0, time.perf_counter() - t0
    finally:
        await js.delete_stream(stream)
        await nc.close()
    return {"n": n, "batch": batch, "ack": ack, "cpu_per_msg_us": 1e6 * cpu / n, "msgs_per_s": n / seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--batch", type=int, default=20, help="messages per pull request (a round's worth)")
    p.add_argument("--no-ack", action="store_true")
    args = p.parse_args()
    result = asyncio.run(floor(args.url, args.n, args.batch, not args.no_ack))
    print("BENCH-RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
