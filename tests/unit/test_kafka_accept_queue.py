"""The Kafka listener's accept queue holds a burst of connections while the loop is busy.

Kafka's consumers keep one connection each, so a fleet restarting at once connects thousands
of sockets within a second. asyncio's default accept queue (100) would drop the connection
attempts beyond it while the event loop is busy; the clients retry a second or more later."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from coordinator.server.kafka.listener import KafkaListener

BURST = 300


def connect_all(port: int, out: list[int]) -> None:
    """Start BURST connections at once; count those established within 0.5 s."""
    socks = []
    for _ in range(BURST):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    deadline = time.monotonic() + 0.5
    pending = set(socks)
    while pending and time.monotonic() < deadline:
        for s in list(pending):
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 and _connected(s):
                pending.discard(s)
        time.sleep(0.01)
    out.append(BURST - len(pending))
    for s in socks:
        s.close()


def _connected(s: socket.socket) -> bool:
    try:
        s.getpeername()
    except OSError:
        return False
    return True


async def test_a_burst_of_connections_waits_in_the_accept_queue_while_the_loop_is_busy() -> None:
    listener = KafkaListener(service=None)  # type: ignore[arg-type] - nothing is served
    port = await listener.listen("127.0.0.1", 0)
    try:
        established: list[int] = []
        burst = threading.Thread(target=connect_all, args=(port, established))
        burst.start()
        time.sleep(0.7)  # noqa: ASYNC251 - the loop is busy (blocked) while the burst connects
        burst.join(5)
        assert established == [BURST]
    finally:
        await asyncio.wait_for(listener.close(), 10)
