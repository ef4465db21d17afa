"""A TCP proxy that delays every byte by a fixed time in each direction: a
database across a network, on one machine (this host has no ``tc netem``).

Bytes keep their order and their chunks: each chunk read is written to the
other side ``delay`` seconds after it was read. Runs on its own event loop in
a process of its own, so that its CPU is not the measured process's.

    python bench/delay_proxy.py --listen 6432 --target 127.0.0.1:5432 --delay-ms 1
"""

from __future__ import annotations

import argparse
import asyncio
import socket


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, chunk = await queue.get()
            if not chunk:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(send())
    try:
        while True:
            chunk = await reader.read(256 * 1024)
            queue.put_nowait((loop.time() + delay, chunk))
            if not chunk:
                break
    except OSError:
        queue.put_nowait((0.0, b""))
    await sender


async def _serve(port: int, host: str, target_port: int, delay: float) -> None:
    async def handle(r1: asyncio.StreamReader, w1: asyncio.StreamWriter) -> None:
        try:
            r2, w2 = await asyncio.open_connection(host, target_port)
        except OSError:
            w1.close()
            return
        for w in (w1, w2):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(_pipe(r1, w2, delay), _pipe(r2, w1, delay), return_exceptions=True)

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--target", required=True, help="HOST:PORT")
    p.add_argument("--delay-ms", type=float, required=True, help="added to each direction")
    a = p.parse_args()
    host, _, port = a.target.rpartition(":")
    asyncio.run(_serve(a.listen, host, int(port), a.delay_ms / 1000))


if __name__ == "__main__":
    main()
