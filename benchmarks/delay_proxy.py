"""A TCP proxy that adds a fixed delay to every request, and counts the bytes it carries.

    python benchmarks/delay_proxy.py LISTEN_PORT TARGET_PORT DELAY_MS CONTROL_PORT

Listens on 127.0.0.1:LISTEN_PORT and forwards each connection to 127.0.0.1:TARGET_PORT.
Every chunk a client sends (an HTTP request: clients write a request in one go) is held
DELAY_MS milliseconds before it is forwarded, one after another per connection, as a
request to a distant store waits for the network; answers pass at once. A connection to
127.0.0.1:CONTROL_PORT is answered with one line, ``<bytes to clients> <requests>``, the
totals since the start (a benchmark reads them before and after a run). Used by
``bench_remote.py``, where netem (``tc qdisc ... netem delay``) needs privileges these
machines do not give.
"""
from __future__ import annotations

import asyncio
import sys

totals = {"down": 0, "requests": 0}


async def pipe(reader, writer, delay: float, count: bool) -> None:
    try:
        while True:
            chunk = await reader.read(1 << 16)
            if not chunk:
                break
            if delay:
                await asyncio.sleep(delay)
            if count:
                totals["down"] += len(chunk)
            else:
                totals["requests"] += 1
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main(listen: int, target: int, delay_ms: float, control: int) -> None:
    delay = delay_ms / 1000

    async def forward(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, server_writer, delay, False),
                             pipe(server_reader, client_writer, 0.0, True))

    async def report(reader, writer):
        writer.write(f"{totals['down']} {totals['requests']}\n".encode())
        await writer.drain()
        writer.close()

    proxy = await asyncio.start_server(forward, "127.0.0.1", listen, backlog=512)
    status = await asyncio.start_server(report, "127.0.0.1", control)
    async with proxy, status:
        await asyncio.gather(proxy.serve_forever(), status.serve_forever())


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])))
