"""One client connection of our gRPC server (``h2grpc.py``): bytes in to libnghttp2, its events
to calls, their answers out. A call is a ``_Call``; its handler runs in a task of its own with an
``H2Context`` (``h2context.py``: what our servicers use of ``grpc.aio.ServicerContext``). What
the request's headers say and the refusals' words are ``h2wire.py``'s, the inbound windows
``h2flow.py``'s, keepalive and the connection's lifetime ``h2lifetime.py``'s."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import socket
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from typing import Any, Protocol

import grpc
from ngh2 import (
    Connection,
    ConnectionClosed,
    DataReceived,
    NGH2Error,
    PingAcknowledged,
    PingReceived,
    RequestReceived,
    Role,
    SettingsAcknowledged,
    SettingsReceived,
    StreamClosed,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)

from . import eager
from .admission import DEFAULT_BUDGET, Admission, ReadTurns
from .conn_limits import ConnectionQuotas, Slot, admit
from .fairness import LIMIT_EXCEEDED, NOT_READ
from .grpc_options import GrpcOptions
from .grpc_server import AbortCall
from .h2context import H2Context, deserialize, serialize
from .h2flow import ARRIVING_CALL_BYTES, StreamLimit, Windows
from .h2lifetime import INTERNAL_ERROR, NO_ERROR, Lifetime
from .h2wire import (
    CANCELLED_AT_STOP,
    SERVER_CONFIG,
    TRAILERS_ONLY,
    Refused,
    client_host,
    decompress,
    format_peer,
    is_grpc,
    malformed,
    over_soft_limit,
    read_headers,
    request_wbits,
    status_trailers,
    unread_over,
    with_stream_limit,
)
from .tls import ServerTls, peer_subject

log = logging.getLogger("kip848.server")


class Host(Protocol):
    """What a connection reads and keeps of its server (``h2grpc.H2GrpcServer``): settings and
    limits, the handlers by path, the calls in flight, the admission of calls between groups."""

    options: GrpcOptions
    tls: ServerTls | None
    settings: dict[Any, int]
    max_message_bytes: int
    max_metadata_size: int
    absolute_max_metadata_size: int
    compression_enabled: int
    response_headers: tuple[tuple[bytes, bytes], ...]
    max_concurrent_calls: int
    max_concurrent_streams: int
    max_connection_unread_bytes: int
    handshake_timeout_s: float  # the client's SETTINGS by then (``h2lifetime.py``)
    connections: set[H2Connection]
    quotas: ConnectionQuotas  # the connection limits (``conn_limits.py``)
    group_of: Callable[[str, bytes], Hashable | None] | None
    admission: Admission[Hashable, _Call]
    reads: ReadTurns
    active: int
    stopping: bool

    def handler(
        self, path: str, metadata: Sequence[tuple[str, Any]]
    ) -> grpc.RpcMethodHandler | None: ...

    def call_done(self) -> None: ...


CONNECTION_WINDOW = (1 << 31) - 1
RECEIVE_SLICE = 16 << 10
"""Bytes handed to libnghttp2 at a time: what one slice's header blocks decode to (HPACK can
expand a byte into a 4 KiB table entry) is handled before the next is decoded."""
READ_BUDGET = 64 << 10
"""Bytes of requests the server's connections handle per loop iteration in all
(``admission.ReadTurns``): about 400 unary calls, 10 ms."""
READ_QUANTUM = 1 << 10
"""Bytes a connection with nothing waiting may always handle as it reads them, beyond the
iteration's ``READ_BUDGET``: a few calls."""
HELD_ANSWERS = 1024
"""Calls whose answers the client's windows hold back, past which its next calls wait."""
WRITE_BATCH_BYTES = 64 << 10
"""A stream's answers its client's windows let through wait for one flush up to this much; past
it the writer flushes them before its next message."""


class _Call:
    __slots__ = (
        "conn",
        "stream_id",
        "path",
        "handler",
        "metadata",
        "deadline",
        "timer",
        "body",
        "message",
        "requests",
        "task",
        "headers_sent",
        "client_done",
        "finished",
        "wbits",
        "received",
        "acked",
        "delivered",
        "reserved",
        "reserved_end",
        "queued",
        "group",
        "started",
        "waiting",
        "held",
        "running",
    )

    def __init__(
        self,
        conn: H2Connection,
        stream_id: int,
        path: str,
        handler: grpc.RpcMethodHandler,
        metadata: tuple[tuple[str, Any], ...],
    ) -> None:
        self.conn = conn
        self.stream_id = stream_id
        self.path = path
        self.handler = handler
        self.metadata = metadata
        self.deadline: float | None = None  # loop time
        self.timer: asyncio.TimerHandle | None = None
        self.body = bytearray()
        self.message: bytes | None = None  # a unary request's one message
        # a client stream's messages with their framed sizes, None at its end
        self.requests: asyncio.Queue[tuple[bytes, int] | None] | None = None
        self.task: asyncio.Task[None] | None = None
        self.headers_sent = False
        self.client_done = False
        self.finished = False
        self.wbits: int | None = None  # the request's messages are compressed (zlib framing)
        # Flow control (h2flow.Windows), in bytes of the stream's DATA: received,
        # acknowledged (given back to the client's window), delivered to the handler; the size
        # and the end of a message under way that was let past the window (0: none); messages
        # queued for the handler.
        self.received = 0
        self.acked = 0
        self.delivered = 0
        self.reserved = 0
        self.reserved_end = 0
        self.group: Hashable | None | object = NOT_READ  # the group its request names
        self.started = False  # handed to admission (its handler runs, or waits its turn)
        self.waiting = False  # waits its turn in admission
        self.held = 0  # what it counts as unread until it starts (``Windows.arriving``)
        self.running = False  # its handler was started: it holds a slot
        self.queued = 0


class H2Connection(asyncio.Protocol):
    """One client connection: bytes in to nghttp2, its events to calls, its bytes out."""

    def __init__(self, server: Host, slot: Slot | None = None) -> None:
        self.server = server
        self.counted = slot  # its count against the connection limits (conn_limits.py)
        self.h2 = Connection(Role.SERVER, SERVER_CONFIG)
        self.calls: dict[int, _Call] = {}
        self.peer = ""
        self.client_host = ""  # the peer as ACL hosts are matched (every call's Caller)
        self.tls_subject: str | None = None  # the verified client certificate's subject
        self.transport: asyncio.Transport | None = None
        self.last_stream_id = 0
        self._flush_scheduled = False
        self._resets: list[int] = []  # streams answered before their request ended
        self._whole: list[_Call] = []  # unary calls whose message came whole in this slice
        self._paused = False  # the client does not read its answers
        self._backlog: bytearray | None = None  # read, for its next turns (READ_BUDGET)
        self._writable = asyncio.Event()
        self._writable.set()
        self.closed = False
        self.reads = 0  # reads so far (the lifetime's keepalive looks for new ones)
        self.writes = 0  # HEADERS, DATA, WINDOW_UPDATE sent (the ping policy forgives then)
        options = server.options
        self.windows = Windows(self, options.http2_lookahead_bytes, server.max_message_bytes)
        self._closing = False  # close once the calls are done
        # calls whose turn came while the client's windows held our answers back (``run``)
        self._deferred: deque[_Call] = deque()
        self._held: set[int] = set()  # streams answered whose answers wait for the windows
        self._resuming = False
        self.lifetime: Lifetime | None = None
        limit = server.max_concurrent_streams
        self.streams = StreamLimit(limit) if limit else None

    # ----------------------------------------------------------------- transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.counted = admit(self.counted, self.server.quotas, transport)
        if self.counted is None:  # over a connection limit: closed, nothing read
            self.closed = True
            return
        peername = transport.get_extra_info("peername")
        self.peer, self.client_host = format_peer(peername), client_host(peername)
        if self.server.tls is not None:
            self.tls_subject = peer_subject(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.connections.add(self)
        self.h2.initiate_connection(self.server.settings)
        if self.streams is not None and self.transport is not None:  # announce it (h2flow.py)
            self.transport.write(with_stream_limit(self.h2.data_to_send(), self.streams.limit))
        # Streams' windows bound what a connection holds; the connection's never does.
        self.h2.set_local_window_size(CONNECTION_WINDOW)
        self.lifetime = Lifetime(self, self.server.options, self.server.handshake_timeout_s)
        if self.server.stopping:
            self.h2.send_goaway(NO_ERROR, last_stream_id=0)
        self.flush()

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        if self._backlog is not None:  # read before the pause took effect: after the rest
            self._backlog += data
            return
        now = self.server.reads.take(len(data), READ_QUANTUM)
        if now == len(data):
            if self._receive(memoryview(data)):
                self._received()
            return
        self._backlog = bytearray(data)  # the rest in a later turn (admission.ReadTurns)
        self._reading()
        self._take(now)

    def read_turn(self) -> None:
        """This connection's turn at what it read and did not handle yet."""
        backlog = self._backlog
        if backlog is not None and not self.closed:
            self._take(self.server.reads.take(len(backlog)))

    def _take(self, now: int) -> None:
        """Handle the first ``now`` bytes of the backlog; the rest waits its turn."""
        backlog = self._backlog
        assert backlog is not None
        if now:
            with memoryview(backlog) as view:
                done = self._receive(view[:now])
            if not done:
                self._backlog = None
                return
            del backlog[:now]
        if backlog:
            self.server.reads.wait(self)
        else:
            self._backlog = None
            self._reading()
        if now:
            self._received()

    def _received(self) -> None:
        self.flush()
        h2 = self.h2
        if not h2.want_read and not h2.want_write and self.transport is not None:
            self.transport.close()

    def _reading(self) -> None:
        """Read while the client takes its answers and nothing read waits for its turn."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._paused or self._backlog is not None:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def _receive(self, data: memoryview) -> bool:
        """Input through libnghttp2 (``RECEIVE_SLICE`` at a time); False if the connection
        failed or was ended (it is closed)."""
        for start in range(0, len(data), RECEIVE_SLICE):
            if not self._receive_slice(data[start : start + RECEIVE_SLICE]):
                return False
        return True

    def _receive_slice(self, data: memoryview) -> bool:
        """One slice of input through libnghttp2 and its events to the calls; False if the
        connection failed or was ended (it is closed)."""
        h2 = self.h2
        try:
            h2.receive_data(data)
        except NGH2Error as exc:  # not HTTP/2, or a protocol violation: the connection ends
            log.debug("HTTP/2 error from %s: %s", self.peer, exc)
            self._drop_all()
            self.flush()  # nghttp2's GOAWAY, if it still has one to send
            if self.transport is not None:
                self.transport.close()
            return False
        events: list[Any] = h2.events()  # dispatched on the exact type: no narrowing
        for event in events:
            kind = type(event)
            if kind is DataReceived:
                self._data(event.stream_id, event.data, event.end_stream)
            elif kind is RequestReceived:
                self._request(event.stream_id, event.headers, event.end_stream)
            elif kind is TrailersReceived:  # they end the request (their fields are ignored)
                self._data(event.stream_id, b"", True)
            elif kind is StreamReset or kind is StreamClosed:
                self._closed(event.stream_id)
                if self.streams is not None:
                    self.streams.open.discard(event.stream_id)
            elif kind is SettingsAcknowledged and self.streams is not None:
                self.streams.acknowledged = True
            elif kind is SettingsReceived and self.lifetime is not None:
                self.lifetime.settings_received()
            elif kind is WindowUpdated:
                self._writable.set()
            elif kind is PingReceived:
                assert self.lifetime is not None
                if self.lifetime.ping_received():
                    return False
            elif kind is PingAcknowledged:
                assert self.lifetime is not None
                self.lifetime.ping_acknowledged(event.opaque_data)
            elif kind is ConnectionClosed:
                self._drop_all()
        if self._whole:  # a unary call runs once its message is whole, as grpc-core's do,
            whole, self._whole = self._whole, []  # its END_STREAM read with it or not
            for call in whole:
                if not call.finished and not call.started:
                    self._start(call)
        transport = self.transport
        return not self.closed and transport is not None and not transport.is_closing()

    def pause_writing(self) -> None:
        """The client does not read its answers: neither do we read its requests until it does
        (its calls wait in its own socket, not in our memory)."""
        self._paused = True
        self._writable.clear()
        self._reading()

    def resume_writing(self) -> None:
        self._paused = False
        self._writable.set()
        self._reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.counted is not None:
            self.counted.release()
        self._writable.set()
        self._drop_all()
        if self.lifetime is not None:
            self.lifetime.close()
        self.server.connections.discard(self)

    def flush(self) -> None:
        """Everything nghttp2 has to send, now."""
        self._flush_scheduled = False
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        h2 = self.h2
        try:
            out = h2.data_to_send()
        except NGH2Error:  # the connection failed (a protocol error): nothing more to send
            transport.close()
            return
        if self._resets:
            # nghttp2 sends RST_STREAM ahead of queued HEADERS: reset only once the answer's
            # frames are out, or the client sees the reset instead of the status.
            resets, self._resets = self._resets, []
            for stream_id in resets:
                try:
                    h2.reset_stream(stream_id, NO_ERROR)
                except NGH2Error:
                    pass
            out += h2.data_to_send()
        if out:
            transport.write(out)
        if self._held:  # the ones gone out
            self._held = {stream_id for stream_id in self._held if h2.queued_body_size(stream_id)}
        if self._deferred and not self._resuming and not self._holding_answers():
            self._resuming = True
            asyncio.get_running_loop().call_soon(self._resume)

    def _holding_answers(self) -> bool:
        """The client's flow-control windows hold back more than a message limit of answers, or
        the answers of more than ``HELD_ANSWERS`` calls (1.5 KB each however small)."""
        held = self._held
        return (
            len(held) > HELD_ANSWERS or self.h2.queued_body_size() > self.server.max_message_bytes
        )

    def _resume(self) -> None:
        """Our answers went: the calls that waited for it start, in order, a turn's worth per
        loop iteration, while the answers go."""
        self._resuming = False
        deferred = self._deferred
        for _ in range(DEFAULT_BUDGET):
            if not deferred or self._holding_answers():
                return  # the next flush resumes them
            call = deferred.popleft()
            if not call.finished:
                self._run_now(call)
        if deferred:
            self._resuming = True
            asyncio.get_running_loop().call_soon(self._resume)

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    # ----------------------------------------------------------------- what the lifetime asks

    def active_calls(self) -> int:
        return len(self.calls)

    def send_ping(self, opaque: bytes) -> None:
        try:
            self.h2.ping(opaque)
        except NGH2Error:
            return
        self._schedule_flush()

    def send_goaway(self, code: int, last_stream_id: int | None, debug: bytes) -> None:
        try:
            self.h2.send_goaway(
                code,
                last_stream_id=self.last_stream_id if last_stream_id is None else last_stream_id,
                debug_data=debug,
            )
        except NGH2Error:
            return
        self._schedule_flush()

    def end(self, details: str) -> None:
        """Every call answered UNAVAILABLE ``details``, then the connection closed."""
        for call in list(self.calls.values()):
            self.abort(call, grpc.StatusCode.UNAVAILABLE, details)
        self.close()

    def close_when_done(self) -> None:
        self._closing = True
        if not self.calls:
            self.close()

    def _request(self, stream_id: int, headers: Sequence[tuple[bytes, bytes]], end: bool) -> None:
        server = self.server
        self.last_stream_id = max(self.last_stream_id, stream_id)
        if self.streams is not None and (refused_with := self.streams.admit(stream_id)):
            try:  # over grpc.max_concurrent_streams: that stream alone, before all else
                self.h2.reset_stream(stream_id, refused_with)
            except NGH2Error:
                pass
            return
        request = read_headers(headers, server.absolute_max_metadata_size)
        if malformed(request):  # as grpc-core: reset, no status
            try:
                self.h2.reset_stream(stream_id, INTERNAL_ERROR)
            except NGH2Error:
                pass
            return
        refused = request.too_large
        if not refused and request.size > server.max_metadata_size:
            refused = over_soft_limit(
                request.size, headers, server.max_metadata_size, server.absolute_max_metadata_size
            )
        if refused:
            self._refuse(stream_id, end, grpc.StatusCode.RESOURCE_EXHAUSTED, refused)
            return
        if request.unparsable:  # grpc-core refuses it as it parses the headers, before all else
            self._refuse(stream_id, end, grpc.StatusCode.INTERNAL, request.unparsable)
            return
        if not is_grpc(request.content_type):  # not gRPC: HTTP 415, the spec's answer
            self._send(
                lambda: self.h2.send_response(stream_id, ((b":status", b"415"),), end_stream=True),
                stream_id,
                end,
            )
            return
        if server.stopping:
            self._refuse(stream_id, end, grpc.StatusCode.UNAVAILABLE, "Server is shutting down")
            return
        try:
            wbits = request_wbits(request.encoding, server.compression_enabled)
        except Refused as exc:
            self._refuse(stream_id, end, exc.code, exc.details)
            return
        handler = server.handler(request.path, request.metadata)
        if handler is None:
            self._refuse(stream_id, end, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            return
        unread = self.windows.undelivered + request.size + ARRIVING_CALL_BYTES
        if unread > server.max_connection_unread_bytes:  # calls still arriving hold too much
            over = unread_over(unread, server.max_connection_unread_bytes)
            self._refuse(stream_id, end, grpc.StatusCode.RESOURCE_EXHAUSTED, over)
            return
        call = _Call(self, stream_id, request.path, handler, tuple(request.metadata))
        call.wbits = wbits
        self.calls[stream_id] = call
        self.windows.arriving(call, request.size)  # it takes a slot once it starts
        if request.timeout is not None and request.timeout != math.inf:  # inf: no deadline
            loop = asyncio.get_running_loop()
            call.deadline = loop.time() + request.timeout
            call.timer = loop.call_at(call.deadline, self._expire, call)
        if handler.request_streaming:
            call.requests = asyncio.Queue()
            self._start(call)
        if end:
            self._end_of_requests(call)

    def _data(self, stream_id: int, data: bytes, end: bool) -> None:
        call = self.calls.get(stream_id)
        if call is None or call.finished:
            if data:  # nobody will read it: given back at once
                self.acknowledge(stream_id, len(data))
            return
        if data:
            self.windows.received(call, len(data))
            call.body += data
            if not self._messages(call):
                return
            unread, limit = self.windows.undelivered, self.server.max_connection_unread_bytes
            if unread > limit and (call.body or not end):  # still arriving: too much held
                self.finish(call, grpc.StatusCode.RESOURCE_EXHAUSTED, unread_over(unread, limit))
                return
            self.windows.window(call)
        if end:
            self._end_of_requests(call)

    def _messages(self, call: _Call) -> bool:
        """Complete messages out of the call's body; False if the call was refused."""
        body = call.body
        limit = self.server.max_message_bytes
        pos = 0
        too_big_for_the_window = False
        while len(body) - pos >= 5:
            size = int.from_bytes(body[pos + 1 : pos + 5], "big")
            if size > limit:
                self.finish(
                    call,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"SERVER: Received message larger than max ({size} vs. {limit})",
                )
                return False
            compressed = body[pos]
            if compressed and call.wbits is None:
                self.finish(
                    call, grpc.StatusCode.INTERNAL, "Compression bit set but no encoding configured"
                )
                return False
            if len(body) - pos - 5 < size:
                too_big_for_the_window = self.windows.too_big(size + 5)
                break
            message = bytes(body[pos + 5 : pos + 5 + size])
            pos += 5 + size
            self.windows.message_complete(call)
            if compressed:
                assert call.wbits is not None
                try:
                    message = decompress(call.wbits, message, limit)
                except Refused as exc:
                    self.finish(call, exc.code, exc.details)
                    return False
            if call.requests is not None:
                call.queued += 1
                call.requests.put_nowait((message, 5 + size))
            elif call.message is None:
                call.message = message
                self._whole.append(call)
            else:
                self.abort(
                    call, grpc.StatusCode.INTERNAL, "More than one request message in a unary call"
                )
                return False
        if pos:
            del body[:pos]
        if too_big_for_the_window and not call.reserved:
            self.windows.let_past(call)
        return True

    def acknowledge(self, stream_id: int, amount: int) -> None:
        """Give ``amount`` bytes of the stream's window back (``h2flow.Windows``)."""
        try:
            self.h2.acknowledge_received_data(amount, stream_id)
        except (NGH2Error, ValueError):  # the connection is gone
            return
        self.writes += 1
        self._schedule_flush()

    def _end_of_requests(self, call: _Call) -> None:
        call.client_done = True
        if call.body:
            self.abort(call, grpc.StatusCode.INTERNAL, "Incomplete request message")
            return
        if call.requests is not None:
            call.requests.put_nowait(None)
            return
        if call.message is None:
            self.finish(call, grpc.StatusCode.INTERNAL, "Missing request message")
        # else it starts at the end of the slice (``_whole``): not if reset in the same bytes

    def _start(self, call: _Call) -> None:
        """Its request is whole (a client stream: open): it waits its turn (``admission.py``),
        still counted as unread by its connection (bounded), taking no slot yet."""
        if call.started:
            return
        call.started = True
        group_of = self.server.group_of
        key = None
        if group_of is not None and call.message is not None:
            key = call.group = group_of(call.path, call.message)
        call.waiting = True
        self.server.admission.start(self if key is None else key, call)

    def run(self, call: _Call) -> None:
        """Start the call's handler, in its turn (``admission.py``); one finished meanwhile
        (deadline, reset, disconnect) is not started. It takes a slot of
        ``max_concurrent_calls`` now or is refused, before any work: calls waiting their turn
        take none (one client's flood of calls waiting could refuse every group's), nor do
        streams that send nothing. A unary request is consumed now."""
        call.waiting = False
        if call.finished:
            return
        if self._deferred or self._holding_answers():
            # a client that does not take its answers (it keeps its windows shut while reading
            # its socket) gets no more until it does: they would pile up without bound
            self._deferred.append(call)  # still counted unread: its connection's bound holds
            return
        self._run_now(call)

    def _run_now(self, call: _Call) -> None:
        server = self.server
        self.windows.arrived(call)
        if server.max_concurrent_calls and server.active >= server.max_concurrent_calls:
            self.finish(call, grpc.StatusCode.RESOURCE_EXHAUSTED, LIMIT_EXCEEDED)
            return
        call.running = True
        server.active += 1
        if call.requests is None:
            self.windows.delivered(call, call.received - call.delivered)
        call.task = eager.start(self._run(call))  # a task only if it must wait

    def _closed(self, stream_id: int) -> None:
        """The stream is gone (the client reset it, or it ended): stop its handler."""
        call = self.calls.get(stream_id)
        if call is None:
            return
        if not call.finished:
            call.finished = True
            self._release(call)
            if call.task is not None:
                call.task.cancel()
        call.client_done = True
        self._gone(stream_id)

    def _gone(self, stream_id: int) -> None:
        """The call is no longer the connection's."""
        calls = self.calls
        calls.pop(stream_id, None)
        if not calls:
            if self.lifetime is not None:
                self.lifetime.calls_ended()
            if self._closing:
                asyncio.get_running_loop().call_soon(self.close)

    def _drop_all(self) -> None:
        for stream_id in list(self.calls):
            self._closed(stream_id)

    def _expire(self, call: _Call) -> None:
        """The deadline passed: DEADLINE_EXCEEDED now, then the handler is cancelled. Answered
        here, not by the handler's task: a task cancelled before its first step never runs
        (uvloop may run this timer before it), and would leave the call unanswered and its
        slot taken."""
        call.timer = None
        self.abort(call, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")

    def abort(self, call: _Call, code: grpc.StatusCode, details: str) -> None:
        """Answer the call now and cancel its handler (which may not have started)."""
        if call.finished:
            return
        self.finish(call, code, details)
        if call.task is not None:
            call.task.cancel()

    # ----------------------------------------------------------------- running calls

    async def _run(self, call: _Call) -> None:
        handler: Any = call.handler  # its behaviour attributes are typed for grpc's contexts
        context = H2Context(call)
        try:
            if call.requests is not None:
                requests = self._request_stream(call)
                if handler.stream_unary is not None:
                    response = await handler.stream_unary(requests, context)
                    await self.write_message(call, serialize(handler, response))
                else:
                    await self._stream(call, handler.stream_stream(requests, context))
            else:
                assert call.message is not None
                request = deserialize(handler, call.message)
                if handler.unary_unary is not None:
                    response = await handler.unary_unary(request, context)
                    self.send_message(call, serialize(handler, response))
                else:
                    await self._stream(call, handler.unary_stream(request, context))
        except AbortCall as exc:
            self.finish(call, exc.code, exc.details)
        except asyncio.CancelledError:
            if not call.finished:  # the server stops: past its grace
                self.finish(call, grpc.StatusCode.UNAVAILABLE, CANCELLED_AT_STOP)
        except Exception:
            log.exception("Unexpected error in %s", call.path)
            self.finish(call, grpc.StatusCode.UNKNOWN, "Unexpected server error.")
        else:
            self.finish(call, grpc.StatusCode.OK, "")

    async def _request_stream(self, call: _Call) -> AsyncIterator[Any]:
        """A client stream's messages as its handler takes them (each given back then)."""
        queue = call.requests
        assert queue is not None
        while True:
            item = await queue.get()
            if item is None:
                return
            message, framed = item
            call.queued -= 1
            self.windows.delivered(call, framed)
            yield deserialize(call.handler, message)

    async def _stream(self, call: _Call, result: Any) -> None:
        """A server-streaming handler (asyncio servicers only): an async generator of answers,
        or a coroutine that writes them with ``context.write`` (health's Watch)."""
        if inspect.isasyncgen(result):
            async for item in result:
                await self.write_message(call, serialize(call.handler, item))
        else:
            await result

    def send_message(self, call: _Call, payload: bytes) -> None:
        if call.finished:
            return
        limit = self.server.max_message_bytes
        if len(payload) > limit:
            self.finish(
                call,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"SERVER: Sent message larger than max ({len(payload)} vs. {limit})",
            )
            return
        h2 = self.h2
        stream_id = call.stream_id
        try:
            if not call.headers_sent:
                call.headers_sent = True
                h2.send_response(stream_id, self.server.response_headers)
            h2.send_data(stream_id, b"\0" + len(payload).to_bytes(4, "big") + payload)
        except NGH2Error:
            self._closed(stream_id)
            return
        self.writes += 1
        self._schedule_flush()

    async def write_message(self, call: _Call, payload: bytes) -> None:
        """One message of a stream; done once it has gone through the client's flow-control
        windows and the socket takes more, as grpc-core's write is: a client that does not read
        holds one message of each stream beyond its windows, not a queue (a latest-state
        stream, the push's, skips the states that came meanwhile)."""
        if call.finished:
            raise asyncio.CancelledError  # the client is gone: stop producing
        self.send_message(call, payload)
        while self._backed_up(call):
            self.flush()  # what the windows allow goes out now
            if not self._backed_up(call):
                return
            self._writable.clear()
            await self._writable.wait()  # a WINDOW_UPDATE, or the socket drained

    def _backed_up(self, call: _Call) -> bool:
        """The writer must wait: the socket is over its high-water mark, or the stream's queued
        answers are past what the windows let through (or past ``WRITE_BATCH_BYTES``: flushed
        first)."""
        if call.finished or self.closed:
            return False
        if self._paused:
            return True
        h2 = self.h2
        queued = h2.queued_body_size(call.stream_id)
        if not queued:
            return False
        try:
            window = h2.stream_remote_window_size(call.stream_id)
        except NGH2Error:  # the stream is gone: its handler is being cancelled
            return False
        return queued > min(window, h2.remote_window_size, WRITE_BATCH_BYTES)

    def finish(self, call: _Call, code: grpc.StatusCode, details: str) -> None:
        """Trailers with the status (Trailers-Only if nothing was sent); the call is done."""
        if call.finished:
            return
        call.finished = True
        self._release(call)
        trailers = status_trailers(code, details)
        h2 = self.h2
        stream_id = call.stream_id
        try:
            if call.headers_sent:
                h2.send_trailers(stream_id, trailers)
            else:  # Trailers-Only
                h2.send_response(stream_id, (*TRAILERS_ONLY, *trailers), end_stream=True)
            if not call.client_done:  # answered before the request ended: stop the upload
                self._resets.append(stream_id)
            queued = h2.queued_body_size(stream_id)
            if queued and queued > min(
                h2.remote_window_size, h2.stream_remote_window_size(stream_id)
            ):
                self._held.add(stream_id)  # its windows hold its answer back
        except NGH2Error:
            pass  # the stream was reset meanwhile
        self.writes += 1
        self._gone(stream_id)
        self._schedule_flush()

    def _release(self, call: _Call) -> None:
        """The call is over: its slot, its deadline, what it holds of the window."""
        if call.running:
            self.server.active -= 1
        self.windows.arrived(call)
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
        self.windows.released(call)
        if call.waiting:  # its turn will not come: forgotten (``Admission.dropped``)
            call.waiting = False
            self.server.admission.dropped()
        self.server.call_done()

    def _refuse(self, stream_id: int, end: bool, code: grpc.StatusCode, details: str) -> None:
        trailers = (*TRAILERS_ONLY, *status_trailers(code, details))
        self._send(
            lambda: self.h2.send_response(stream_id, trailers, end_stream=True), stream_id, end
        )

    def _send(self, send: Callable[[], None], stream_id: int, end: bool) -> None:
        try:
            send()
        except NGH2Error:
            return
        self.writes += 1
        if not end:
            self._resets.append(stream_id)

    def close(self) -> None:
        self._drop_all()
        self.flush()
        if self.transport is not None:
            self.transport.close()


def run_call(_key: Hashable, call: _Call) -> None:
    """Admission's callback (``admission.py``): start the call's handler, in its turn."""
    call.conn.run(call)
