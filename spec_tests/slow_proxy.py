"""A TCP proxy whose delay a test sets while it runs, for the remote-pack tests that need a
slow server at a chosen moment (test_packs_remote_timeout.py).

    python slow_proxy.py LISTEN_PORT TARGET_PORT DELAY_FILE

Listens on 127.0.0.1:LISTEN_PORT and forwards each connection to 127.0.0.1:TARGET_PORT
(nginx). Every chunk a client sends (an HTTP request: clients write a request in one go)
is held until it has waited the number of seconds DELAY_FILE says (none while the file is
missing or empty), read again every ``LOOK`` seconds, then forwarded; answers pass at once.
So a pack is opened through the proxy at full speed, its samples are then asked for from a
server that does not answer, over real sockets, and writing 0 into the file lets every
held request through at once. A client that closes its end closes the proxy's
connection to the target. Standard library only: the test starts it as a subprocess and
ends it.
"""
from __future__ import annotations

import asyncio
import sys

LOOK = 0.01     # seconds between two reads of DELAY_FILE while a request is held


def delay_now(path: str) -> float:
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return 0.0
    return float(text) if text else 0.0


async def pipe(reader, writer, delay_file) -> None:
    try:
        while True:
            chunk = await reader.read(1 << 16)
            if not chunk:
                break
            if delay_file is not None:
                held = asyncio.get_running_loop().time()
                while asyncio.get_running_loop().time() - held < delay_now(delay_file):
                    await asyncio.sleep(LOOK)
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main(listen: int, target: int, delay_file: str) -> None:
    async def forward(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, server_writer, delay_file),
                             pipe(server_reader, client_writer, None))

    proxy = await asyncio.start_server(forward, "127.0.0.1", listen, backlog=512)
    async with proxy:
        await proxy.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))
