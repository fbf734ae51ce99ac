"""A TCP proxy that delays what a client sends by ``--delay-s``: a slower link in front of a server.

Every chunk from the client is held ``--delay-s`` after it arrived, in order, then passed on; the
answers come back at once. A request over it therefore takes ``--delay-s`` longer, a probe of the
server as much as a call, so a gateway measures the delay as the link's round trip.

    python delay_proxy.py --port N --target-port M --delay-s 0.05
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time


async def delayed(r: asyncio.StreamReader, w: asyncio.StreamWriter, delay_s: float) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due_s, data = await queue.get()
            if not data:
                return
            await asyncio.sleep(max(0.0, due_s - time.monotonic()))
            w.write(data)
            await w.drain()

    sender = asyncio.create_task(send())
    try:
        while data := await r.read(1 << 16):
            queue.put_nowait((time.monotonic() + delay_s, data))
        queue.put_nowait((0.0, b""))
        await sender
    finally:
        sender.cancel()
        w.close()


async def passed(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    try:
        while data := await r.read(1 << 16):
            w.write(data)
            await w.drain()
    finally:
        w.close()


async def main(args: argparse.Namespace) -> None:
    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", args.target_port)
        with contextlib.suppress(ConnectionError):
            await asyncio.gather(delayed(r, uw, args.delay_s), passed(ur, w),
                                 return_exceptions=True)

    server = await asyncio.start_server(serve, "127.0.0.1", args.port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--target-port", type=int, required=True)
    ap.add_argument("--delay-s", type=float, default=0.05)
    asyncio.run(main(ap.parse_args()))
