"""Inbound flow control of a connection of our gRPC server (``h2conn.py``): what a client may
send, and what a connection may hold of it.

Windows are given back (WINDOW_UPDATE) as handlers consume what the client sent, never for
bytes nobody has read: a unary request when its handler starts, a client stream's message when
its handler takes it. So a stream holds at most its window (``grpc.http2.lookahead_bytes``,
announced as SETTINGS_INITIAL_WINDOW_SIZE) of unread requests; the connection's own window is
never the limit (a stream that does not read cannot starve another). A message larger than
half a window that its handler waits for could never arrive that way: it is *let past*, its
bytes given back as they arrive, while the connection's messages let past fit in one message
limit (the others wait their turn, in order: one always fits, so none waits for ever). And a
connection that holds more than a message limit and 256 windows of requests no handler has
read refuses the call whose request is still arriving (a slow loris cannot hold more).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

REFUSED_STREAM = 0x7
ENHANCE_YOUR_CALM = 0xB
ARRIVING_WINDOWS = 256
"""A connection may hold this many windows of unread requests besides one message limit."""
ARRIVING_CALL_BYTES = 1024
"""What a call not started yet (``h2conn.run``) counts against those unread requests besides its
header list: the state of its stream and call (one that sends nothing cannot be held for free)."""


class _Call(Protocol):
    """What the windows read and keep of a call (``h2conn._Call``): bytes of its request
    received, given back (acked), taken by its handler (delivered), and of a message let past."""

    stream_id: int
    body: bytearray
    message: bytes | None
    requests: asyncio.Queue[tuple[bytes, int] | None] | None
    queued: int
    finished: bool
    received: int
    acked: int
    delivered: int
    reserved: int
    reserved_end: int
    held: int


class Acknowledging(Protocol):
    def acknowledge(self, stream_id: int, amount: int) -> None:
        """Give ``amount`` bytes of the stream's window back to the client."""


class Windows:
    """The inbound windows of one connection (see the module)."""

    __slots__ = ("_budget", "_conn", "_let_past_bytes", "_waiting", "reserved", "undelivered")

    def __init__(self, conn: Acknowledging, lookahead_bytes: int, max_message_bytes: int) -> None:
        self._conn = conn
        self._let_past_bytes = lookahead_bytes // 2
        self._budget = max_message_bytes + 5  # one framed message limit let past at a time
        self.reserved = 0  # bytes of messages under way let past their windows
        self.undelivered = 0  # bytes of requests received that no handler has taken yet
        self._waiting: dict[int, _Call] = {}  # calls waiting to be let past, in order

    def received(self, call: _Call, amount: int) -> None:
        call.received += amount
        self.undelivered += amount

    def arriving(self, call: _Call, header_bytes: int) -> None:
        """A call's headers came, its request has not: it counts its header list and its state
        as unread requests of the connection until it starts or ends (:meth:`arrived`)."""
        call.held = header_bytes + ARRIVING_CALL_BYTES
        self.undelivered += call.held

    def arrived(self, call: _Call) -> None:
        self.undelivered -= call.held
        call.held = 0

    def message_complete(self, call: _Call) -> None:
        """A message of the call is whole: it no longer waits to be let past."""
        if self._waiting:
            self._waiting.pop(call.stream_id, None)

    def too_big(self, framed: int) -> bool:
        """A message of ``framed`` bytes under way must be let past to arrive."""
        return framed > self._let_past_bytes

    def window(self, call: _Call) -> None:
        """Give back what the handler consumed, or what a message let past brought."""
        target = min(call.received, max(call.delivered, call.reserved_end))
        if target > call.acked:
            self._conn.acknowledge(call.stream_id, target - call.acked)
            call.acked = target

    @staticmethod
    def reading(call: _Call) -> bool:
        """The handler waits for the message under way."""
        if call.requests is None:
            return call.message is None
        return call.queued == 0

    def let_past(self, call: _Call) -> None:
        """The call's message under way (its length known) is larger than half a window: let
        it past once it fits, in order, in the connection's one-message budget."""
        if call.reserved or not self.reading(call) or call.stream_id in self._waiting:
            return
        self._waiting[call.stream_id] = call
        self._admit_waiting()

    def _admit_waiting(self) -> None:
        for stream_id, call in list(self._waiting.items()):
            body = call.body
            if call.finished or len(body) < 5 or not self.reading(call):
                del self._waiting[stream_id]
                continue
            size = 5 + int.from_bytes(body[1:5], "big")
            if self.reserved + size > self._budget:
                return
            del self._waiting[stream_id]
            call.reserved = size
            call.reserved_end = call.delivered + size
            self.reserved += size
            self.window(call)

    def delivered(self, call: _Call, framed: int) -> None:
        """The handler took ``framed`` bytes of request: give them back; a message let past is
        through, and a client stream's next message may need letting past in turn."""
        if call.finished:
            return
        call.delivered += framed
        self.undelivered -= framed
        if call.reserved and call.delivered >= call.reserved_end:
            self._unreserve(call)
        self.window(call)
        body = call.body
        if (
            call.requests is not None
            and len(body) >= 5
            and self.too_big(5 + int.from_bytes(body[1:5], "big"))
        ):
            self.let_past(call)

    def released(self, call: _Call) -> None:
        """The call is over: what it received that nobody will read is given back."""
        if call.received > call.acked:
            self._conn.acknowledge(call.stream_id, call.received - call.acked)
            call.acked = call.received
        self.undelivered -= call.received - call.delivered
        call.delivered = call.received
        if call.reserved or self._waiting:
            self._unreserve(call)

    def _unreserve(self, call: _Call) -> None:
        """The call no longer needs (or waits for) its message let past."""
        self._waiting.pop(call.stream_id, None)
        if call.reserved:
            self.reserved -= call.reserved
            call.reserved = 0
            if self._waiting:
                self._admit_waiting()


class StreamLimit:
    """``grpc.max_concurrent_streams`` on one connection, as grpc-core's server keeps it (its
    HTTP/2 parser): a new stream while the limit's worth are open is reset REFUSED_STREAM (the
    client may retry it), that stream alone, the connection goes on; before the client has
    acknowledged the SETTINGS that announced the limit, the streams past the limit's number in
    all are reset ENHANCE_YOUR_CALM. Open: from the request's HEADERS until the stream closes."""

    __slots__ = ("_before_ack", "acknowledged", "limit", "open")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: set[int] = set()
        self.acknowledged = False  # the client acknowledged our SETTINGS
        self._before_ack = 0  # streams taken before that

    def admit(self, stream_id: int) -> int | None:
        """The RST_STREAM code refusing a new stream, or None: it is taken (and open)."""
        if self.acknowledged:
            if len(self.open) >= self.limit:
                return REFUSED_STREAM
        elif self._before_ack >= self.limit:
            return ENHANCE_YOUR_CALM
        else:
            self._before_ack += 1
        self.open.add(stream_id)
        return None
