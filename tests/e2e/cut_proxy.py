"""A TCP proxy in a process of its own, for ``cluster_support.CutProxy``: a node given
PostgreSQL through it can be cut off from PostgreSQL alone (a test's own threads would be held
up by its work, and the node's heartbeats with them).

    python tests/e2e/cut_proxy.py HOST PORT

Prints the port it listens on (127.0.0.1), then reads commands on stdin: ``cut`` (every
connection reset, new ones closed at once) and ``heal``; each answered ``ok``. Ends at EOF.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def main(host: str, port: int) -> None:
    cut = False
    open_writers: set[asyncio.StreamWriter] = set()

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            open_writers.discard(writer)
            writer.close()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if cut:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        open_writers.update((writer, up_writer))
        with contextlib.suppress(asyncio.CancelledError):  # at the end
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    while line := (await stdin.readline()).strip():
        if line == b"cut":
            cut = True
            for w in list(open_writers):
                with contextlib.suppress(OSError):
                    w.transport.abort()  # a reset, as a network that drops the connection
            open_writers.clear()
        elif line == b"heal":
            cut = False
        print("ok", flush=True)
    server.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
