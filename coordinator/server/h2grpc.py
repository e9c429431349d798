"""gRPC over HTTP/2 on libnghttp2: the coordinator's own gRPC listener (``--grpc-transport h2``).

Why: grpc.aio spends about 120 µs of event-loop CPU on each unary call, most of a steady
heartbeat's cost, and it takes calls from grpc-core strictly one at a time in arrival order:
a burst of 5,000 joins holds every other group's heartbeat back for over half a second
(docs/benchmarks.md, "Join storms"). Here HTTP/2 (framing, HPACK, flow control, protocol
checks) is libnghttp2's, through ``ngh2``'s sans-I/O ``Connection``; what is left in Python
is the gRPC layer, about 10 µs a call, and calls are taken up connection by connection as
their bytes arrive, like the Kafka listener's, and started fairly between connections, a
bounded number per loop iteration (``admission.py``), so a burst on some connections does not
hold back a call on another.

The server stands in for ``grpc.aio.Server`` where the coordinator uses one: handlers come
through ``add_generic_rpc_handlers`` (the same ``grpc.RpcMethodHandler`` objects: our raw
handlers, health, reflection), ``add_insecure_port`` binds (``tls``: TLS on every
connection), ``start``/``stop(grace)``. The servicers get a context with what they use of
``grpc.aio.ServicerContext``: ``invocation_metadata()``, ``peer()``, ``abort()``, ``write()``
(server streaming), ``time_remaining()``. It takes grpc-core's options by their names
(``grpc_options.py``), the same that configure grpc.aio.

What a gRPC client sees is what grpc-core's server answers (the gRPC over HTTP/2 spec; checked
against grpc.aio frame by frame in tests/e2e/test_grpc_conformance.py, the differences left in
docs/operations.md):

* status and message in trailers (``grpc-status``, percent-encoded ``grpc-message``), or a
  Trailers-Only answer when no message was sent; an unknown method is UNIMPLEMENTED;
* ``grpc-timeout`` is a deadline: when it passes the call is answered DEADLINE_EXCEEDED at once
  and its handler cancelled (whether or not it had started), so its slot is free again;
* a request message larger than ``max_message_bytes`` is refused with RESOURCE_EXHAUSTED as
  soon as its length prefix arrives (never buffered), a larger answer likewise;
* ``gzip`` and ``deflate`` requests are decompressed (at most ``max_message_bytes`` out of each
  message), answers are not compressed; the ordinary response headers offer
  ``grpc-accept-encoding: identity, deflate, gzip``; an encoding grpc-core does not know is
  INTERNAL, one it knows but was disabled UNIMPLEMENTED, as grpc-core answers them;
* request metadata over the header-list size announced in SETTINGS_MAX_HEADER_LIST_SIZE
  (``absolute_max_metadata_size``) gets that call RESOURCE_EXHAUSTED with grpc-core's message
  (between ``max_metadata_size`` and it, a share rising to all, grpc-core's soft limit); the
  connection and its other calls go on; a non-gRPC request gets HTTP 415;
* past ``max_concurrent_calls`` calls at once a new call is refused with RESOURCE_EXHAUSTED
  "Concurrent RPC limit exceeded!", before any work (grpc.aio's ``maximum_concurrent_rpcs``);
* a client's RST_STREAM, or its connection closing, cancels the call's handler;
* keepalive, the ping policy, idle and age limits as grpc-core's (``h2lifetime.py``);
* ``stop(grace)``: no new connections, grpc-core's graceful GOAWAY ("Server shutdown") on every
  connection (streams the client opens after the second are refused, so it retries them
  elsewhere), in-flight calls get ``grace`` seconds, then are cancelled and answered
  UNAVAILABLE "Cancelling all calls".

Memory a client can make a connection hold is bounded: a stream's window (announced as
``grpc.http2.lookahead_bytes``) is given back only as its handler consumes what came
(``H2Connection._window``); a message larger than half a window that its handler waits for is
let past, one message limit per connection at a time; a connection holding more than a message
limit and 256 windows of requests no handler has read refuses the call whose request is still
arriving (RESOURCE_EXHAUSTED). A client that does not read its answers is not read either
(``pause_writing``); server-streaming writers wait while the stream's queued bytes or the
socket's write buffer are over their high-water marks.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import logging
import random
import socket
import time
import zlib
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from ngh2 import (
    Configuration,
    Connection,
    ConnectionClosed,
    DataReceived,
    NGH2Error,
    PingAcknowledged,
    PingReceived,
    RequestReceived,
    Role,
    Setting,
    StreamClosed,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)

from .admission import Admission
from .grpc_options import INFINITE_MS, GrpcOptions
from .grpc_server import AbortCall
from .h2lifetime import NO_ERROR, Lifetime
from .tls import ServerTls, peer_subject

log = logging.getLogger("kip848.server")

_OK = b"0"
_TRAILERS_ONLY = ((b":status", b"200"), (b"content-type", b"application/grpc"))
ENCODINGS = ("identity", "deflate", "gzip")
"""grpc-core's compression algorithms, in the order of their bits in
``grpc.compression_enabled_algorithms_bitset``."""
_WBITS = {"deflate": zlib.MAX_WBITS, "gzip": zlib.MAX_WBITS | 16}  # zlib, gzip framing
CANCELLED_AT_STOP = "Cancelling all calls"  # grpc-core's words for calls past the stop's grace
CONNECTION_WINDOW = (1 << 31) - 1
ARRIVING_WINDOWS = 256
HEADER_LIST_CAP = 1 << 20
"""Past this a header list ends its connection (libnghttp2 keeps no more of it); below it, one
over the announced limit ends only its call. libnghttp2 also caps one field at 64 KiB."""
MAX_CONTINUATIONS = 64  # CONTINUATION frames after a HEADERS frame: 1 MiB in 16 KiB frames
RECEIVE_SLICE = 16 << 10
"""Bytes handed to libnghttp2 at a time: what one slice's header blocks decode to (HPACK can
expand a byte into a 4 KiB table entry) is handled before the next is decoded."""
_RESERVED = frozenset(
    {
        "content-type",
        "te",
        "grpc-timeout",
        "grpc-encoding",
        "grpc-accept-encoding",
        "grpc-message-type",
        "grpc-previous-rpc-attempts",
    }
)
_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
STREAM_HIGH_WATER_BYTES = 1 << 20
"""A server-streaming writer waits while more than this is queued on its stream."""
LISTEN_BACKLOG = 4096
_CONFIG = Configuration(
    # nghttp2's defences against floods stay on; a connection may carry many calls at once.
    peer_max_concurrent_streams=1 << 16,
    auto_window_update=False,  # windows are given back as handlers consume (_window)
    max_inbound_header_list_size=HEADER_LIST_CAP,
    max_inbound_header_count=HEADER_LIST_CAP // 32,  # every field counts 32 bytes more
    max_continuations=MAX_CONTINUATIONS,
)


def _percent_encode(text: str) -> bytes:
    """``grpc-message``: UTF-8, bytes outside printable ASCII (and ``%``) as ``%XX``."""
    out = bytearray()
    for byte in text.encode("utf-8"):
        if 0x20 <= byte <= 0x7E and byte != 0x25:
            out.append(byte)
        else:
            out += b"%%%02X" % byte
    return bytes(out)


def parse_timeout(value: bytes) -> float | None:
    """``grpc-timeout`` (``<1-8 digits><H|M|S|m|u|n>``) in seconds; None if malformed."""
    digits, unit = value[:-1], value[-1:]
    if not digits.isdigit() or len(digits) > 8 or unit not in _TIMEOUT_UNITS:
        return None
    return int(digits) * _TIMEOUT_UNITS[unit]


def format_peer(address: Any) -> str:
    """grpc's peer string: ``ipv4:HOST:PORT`` or ``ipv6:[HOST]:PORT``."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        if host.startswith("::ffff:") and "." in host:  # IPv4 on a dual-stack socket
            host = host[7:]
        if ":" in host:
            return f"ipv6:[{host}]:{port}"
        return f"ipv4:{host}:{port}"
    return f"unix:{address}" if address else ""


@dataclass(frozen=True, slots=True)
class _CallDetails:
    """What a generic handler is asked with (``grpc.HandlerCallDetails``)."""

    method: str
    invocation_metadata: Sequence[tuple[str, Any]]


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
        # Flow control (H2Connection._window), in bytes of the stream's DATA: received,
        # acknowledged (given back to the client's window), delivered to the handler; the size
        # and the end of a message under way that was let past the window (0: none); messages
        # queued for the handler.
        self.received = 0
        self.acked = 0
        self.delivered = 0
        self.reserved = 0
        self.reserved_end = 0
        self.queued = 0


class H2Context:
    """The part of ``grpc.aio.ServicerContext`` our servicers, health and reflection use."""

    __slots__ = ("_call",)

    def __init__(self, call: _Call) -> None:
        self._call = call

    def invocation_metadata(self) -> Sequence[tuple[str, Any]]:
        return self._call.metadata

    def peer(self) -> str:
        return self._call.conn.peer

    def peer_subject(self) -> str | None:
        """The verified client certificate's subject (TLS with a client certificate)."""
        return self._call.conn.tls_subject

    def auth_context(self) -> dict[str, list[bytes]]:
        """What grpc.aio's ``auth_context()`` answers of the connection's TLS."""
        conn = self._call.conn
        if conn.server.tls is None:
            return {}
        out = {"transport_security_type": [b"ssl"]}
        if conn.tls_subject is not None:
            out["x509_subject"] = [conn.tls_subject.encode()]
        return out

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise AbortCall(code, details)

    async def write(self, message: Any) -> None:
        call = self._call
        await call.conn.write_message(call, _serialize(call.handler, message))

    def time_remaining(self) -> float | None:
        deadline = self._call.deadline
        if deadline is None:
            return None
        return max(0.0, deadline - asyncio.get_running_loop().time())


def _serialize(handler: grpc.RpcMethodHandler, message: Any) -> bytes:
    serializer = handler.response_serializer
    return message if serializer is None else serializer(message)


def _deserialize(handler: grpc.RpcMethodHandler, data: bytes) -> Any:
    deserializer = handler.request_deserializer
    return data if deserializer is None else deserializer(data)


class H2Connection(asyncio.Protocol):
    """One client connection: bytes in to nghttp2, its events to calls, its bytes out."""

    def __init__(self, server: H2GrpcServer) -> None:
        self.server = server
        self.h2 = Connection(Role.SERVER, _CONFIG)
        self.calls: dict[int, _Call] = {}
        self.peer = ""
        self.tls_subject: str | None = None  # the verified client certificate's subject
        self.transport: asyncio.Transport | None = None
        self.last_stream_id = 0
        self._flush_scheduled = False
        self._resets: list[int] = []  # streams answered before their request ended
        self._paused = False
        self._writable = asyncio.Event()
        self._writable.set()
        self.closed = False
        self.reads = 0  # reads so far (the lifetime's keepalive looks for new ones)
        self.writes = 0  # HEADERS, DATA, WINDOW_UPDATE sent (the ping policy forgives then)
        self.reserved = 0  # bytes of messages being read let past their window (_window)
        self.undelivered = 0  # bytes of requests received that no handler has taken yet
        self._waiting: dict[int, _Call] = {}  # calls waiting to be let past, in order
        self._closing = False  # close once the calls are done
        self.lifetime: Lifetime | None = None

    # ----------------------------------------------------------------- transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = format_peer(transport.get_extra_info("peername"))
        if self.server.tls is not None:
            self.tls_subject = peer_subject(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.connections.add(self)
        self.h2.initiate_connection(self.server.settings)
        # Streams' windows bound what a connection holds; the connection's never does.
        self.h2.set_local_window_size(CONNECTION_WINDOW)
        self.lifetime = Lifetime(self, self.server.options)
        if self.server.stopping:
            self.h2.send_goaway(NO_ERROR, last_stream_id=0)
        self.flush()

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        view = memoryview(data)
        for start in range(0, len(data), RECEIVE_SLICE):
            if not self._receive(view[start : start + RECEIVE_SLICE]):
                return
        self.flush()
        h2 = self.h2
        if not h2.want_read and not h2.want_write and self.transport is not None:
            self.transport.close()

    def _receive(self, data: memoryview) -> bool:
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
        transport = self.transport
        return not self.closed and transport is not None and not transport.is_closing()

    def pause_writing(self) -> None:
        """The client does not read its answers: neither do we read its requests until it does
        (its calls wait in its own socket, not in our memory)."""
        self._paused = True
        self._writable.clear()
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        self._writable.set()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
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
        path = ""
        content_type = b""
        timeout: bytes | None = None
        encoding: bytes | None = None
        metadata: list[tuple[str, Any]] = []
        bad_metadata = ""
        size = 0
        refused = ""
        hard = server.absolute_max_metadata_size
        for index, (name, value) in enumerate(headers):
            size += len(name) + len(value) + 32  # RFC 9113's size of a header list
            if size > hard and not refused:  # grpc-core's words, at the field that passed it
                refused = server.metadata_refusal(size, headers, index)
            if name[:1] == b":":
                if name == b":path":
                    path = value.decode("utf-8", "replace")
                continue
            key = name.decode("latin-1")
            if key == "content-type":
                content_type = value
            elif key == "grpc-timeout":
                timeout = value
            elif key == "grpc-encoding":
                encoding = value
            elif key.endswith("-bin"):
                try:
                    metadata.append((key, _b64decode(value)))
                except ValueError:
                    bad_metadata = key
            elif key not in _RESERVED:
                metadata.append((key, value.decode("latin-1")))
        if not refused and size > server.max_metadata_size:
            refused = server.soft_metadata_refusal(size, headers)
        if refused:
            self._refuse(stream_id, end, grpc.StatusCode.RESOURCE_EXHAUSTED, refused)
            return
        if not content_type.startswith(b"application/grpc"):
            self._send(
                lambda: self.h2.send_response(stream_id, ((b":status", b"415"),), end_stream=True),
                stream_id,
                end,
            )
            return
        if server.stopping:
            self._refuse(stream_id, end, grpc.StatusCode.UNAVAILABLE, "Server is shutting down")
            return
        wbits = None
        if encoding is not None and encoding != b"identity":
            algorithm = encoding.decode("latin-1")
            if algorithm not in _WBITS:
                self._refuse(
                    stream_id,
                    end,
                    grpc.StatusCode.INTERNAL,
                    "Error parsing 'grpc-encoding' metadata",
                )
                return
            if not server.compression_enabled & (1 << ENCODINGS.index(algorithm)):
                self._refuse(
                    stream_id,
                    end,
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"Compression algorithm '{algorithm}' is disabled.",
                )
                return
            wbits = _WBITS[algorithm]
        if bad_metadata:
            self._refuse(
                stream_id, end, grpc.StatusCode.INTERNAL, f"Invalid base64 in {bad_metadata}"
            )
            return
        handler = server.handler(path, metadata)
        if handler is None:
            self._refuse(stream_id, end, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            return
        if server.max_concurrent_calls and server.active >= server.max_concurrent_calls:
            self._refuse(
                stream_id, end, grpc.StatusCode.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!"
            )
            return
        call = _Call(self, stream_id, path, handler, tuple(metadata))
        call.wbits = wbits
        self.calls[stream_id] = call
        server.active += 1
        if timeout is not None:
            seconds = parse_timeout(timeout)
            if seconds is None:
                self.finish(call, grpc.StatusCode.INTERNAL, "Invalid grpc-timeout header")
                return
            loop = asyncio.get_running_loop()
            call.deadline = loop.time() + seconds
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
                self._acknowledge(stream_id, len(data))
            return
        if data:
            call.received += len(data)
            self.undelivered += len(data)
            call.body += data
            if not self._messages(call):
                return
            unread = self.undelivered
            if unread > self.server.max_connection_unread_bytes and (call.body or not end):
                self.finish(  # its request is still arriving: the connection holds too much
                    call,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "Request data this connection sent and no call has read is over the limit "
                    f"({unread} vs. {self.server.max_connection_unread_bytes})",
                )
                return
            self._window(call)
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
                    f"Received message larger than max ({size} vs. {limit})",
                )
                return False
            compressed = body[pos]
            if compressed and call.wbits is None:
                self.finish(
                    call, grpc.StatusCode.INTERNAL, "Compression bit set but no encoding configured"
                )
                return False
            if len(body) - pos - 5 < size:
                too_big_for_the_window = size + 5 > self.server.let_past_bytes
                break
            message = bytes(body[pos + 5 : pos + 5 + size])
            pos += 5 + size
            if self._waiting:
                self._waiting.pop(call.stream_id, None)  # it came through its window after all
            if compressed:
                decompressed = self._decompress(call, message)
                if decompressed is None:
                    return False
                message = decompressed
            if call.requests is not None:
                call.queued += 1
                call.requests.put_nowait((message, 5 + size))
            elif call.message is None:
                call.message = message
            else:
                self.finish(
                    call, grpc.StatusCode.INTERNAL, "More than one request message in a unary call"
                )
                return False
        if pos:
            del body[:pos]
        if too_big_for_the_window and not call.reserved:
            self._let_past(call)
        return True

    # ----------------------------------------------------------------- flow control
    #
    # Windows are given back (WINDOW_UPDATE) as the handler consumes what the client sent, never
    # for bytes nobody has read: a unary request when its handler starts, a client stream's
    # message when its handler takes it. So a stream holds at most its window (the
    # ``grpc.http2.lookahead_bytes`` announced) of unread requests. A message larger than half
    # a window that its handler waits for could never arrive that way: it is let past, its
    # bytes given back as they arrive, if the connection's messages let past fit in one message
    # limit (others wait their turn, in order), so a connection holds at most
    # max_concurrent_streams x lookahead_bytes + max_message_bytes of requests not delivered.

    def _acknowledge(self, stream_id: int, amount: int) -> None:
        try:
            self.h2.acknowledge_received_data(amount, stream_id)
        except (NGH2Error, ValueError):  # the connection is gone
            return
        self.writes += 1
        self._schedule_flush()

    def _window(self, call: _Call) -> None:
        """Give back what the handler consumed, or what a message let past brought."""
        target = min(call.received, max(call.delivered, call.reserved_end))
        if target > call.acked:
            self._acknowledge(call.stream_id, target - call.acked)
            call.acked = target

    def _reading(self, call: _Call) -> bool:
        """The handler waits for the message under way."""
        if call.requests is None:
            return call.message is None
        return call.queued == 0

    def _let_past(self, call: _Call) -> None:
        """The call's message under way (its length known) is larger than half a window: let
        it past once it fits, in order, in the connection's one-message budget."""
        if call.reserved or not self._reading(call) or call.stream_id in self._waiting:
            return
        self._waiting[call.stream_id] = call
        self._admit_waiting()

    def _admit_waiting(self) -> None:
        budget = self.server.max_message_bytes + 5
        for stream_id, call in list(self._waiting.items()):
            body = call.body
            if call.finished or len(body) < 5 or not self._reading(call):
                del self._waiting[stream_id]
                continue
            size = 5 + int.from_bytes(body[1:5], "big")
            if self.reserved + size > budget:
                return
            del self._waiting[stream_id]
            call.reserved = size
            call.reserved_end = call.delivered + size
            self.reserved += size
            self._window(call)

    def _delivered(self, call: _Call, framed: int) -> None:
        """The handler took ``framed`` bytes of request: give them back; a message let past is
        through."""
        if call.finished:
            return
        call.delivered += framed
        self.undelivered -= framed
        if call.reserved and call.delivered >= call.reserved_end:
            self._unreserve(call)
        self._window(call)
        body = call.body
        if (
            call.requests is not None
            and len(body) >= 5
            and 5 + int.from_bytes(body[1:5], "big") > self.server.let_past_bytes
        ):
            self._let_past(call)  # the next message is under way and too big for the window

    def _unreserve(self, call: _Call) -> None:
        """The call no longer needs (or waits for) its message let past."""
        self._waiting.pop(call.stream_id, None)
        if call.reserved:
            self.reserved -= call.reserved
            call.reserved = 0
            if self._waiting:
                self._admit_waiting()

    def _decompress(self, call: _Call, data: bytes) -> bytes | None:
        """One gzip/deflate message, at most ``max_message_bytes`` of it; None if the call was
        refused (grpc-core's statuses and messages)."""
        assert call.wbits is not None
        limit = self.server.max_message_bytes
        inflater = zlib.decompressobj(call.wbits)
        try:
            message = inflater.decompress(data, limit + 1)
        except zlib.error:
            message = None
        if message is not None and len(message) > limit:
            self.finish(
                call, grpc.StatusCode.RESOURCE_EXHAUSTED, "Decompressed message larger than max"
            )
            return None
        if message is None or not inflater.eof or inflater.unused_data:
            self.finish(call, grpc.StatusCode.INTERNAL, "Decompression failed due to zlib error")
            return None
        return message

    def _end_of_requests(self, call: _Call) -> None:
        call.client_done = True
        if call.body:
            self.finish(call, grpc.StatusCode.INTERNAL, "Incomplete request message")
            return
        if call.requests is not None:
            call.requests.put_nowait(None)
            return
        if call.message is None:
            self.finish(call, grpc.StatusCode.INTERNAL, "Missing request message")
            return
        self._start(call)

    def _start(self, call: _Call) -> None:
        group_of = self.server.group_of
        key = None
        if group_of is not None and call.message is not None:
            key = group_of(call.path, call.message)
        self.server.admission.start(self if key is None else key, call)

    def run(self, call: _Call) -> None:
        """Start the call's handler, in its turn (``admission.py``); one finished meanwhile
        (deadline, reset, disconnect) is not started. A unary request is consumed now."""
        if not call.finished:
            if call.requests is None:
                self._delivered(call, call.received - call.delivered)
            call.task = asyncio.get_running_loop().create_task(self._run(call))

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
                    await self.write_message(call, _serialize(handler, response))
                else:
                    await self._stream(call, handler.stream_stream(requests, context))
            else:
                assert call.message is not None
                request = _deserialize(handler, call.message)
                if handler.unary_unary is not None:
                    response = await handler.unary_unary(request, context)
                    self.send_message(call, _serialize(handler, response))
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
            self._delivered(call, framed)
            yield _deserialize(call.handler, message)

    async def _stream(self, call: _Call, result: Any) -> None:
        """A server-streaming handler (asyncio servicers only): an async generator of answers,
        or a coroutine that writes them with ``context.write`` (health's Watch)."""
        if inspect.isasyncgen(result):
            async for item in result:
                await self.write_message(call, _serialize(call.handler, item))
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
                f"Sent message larger than max ({len(payload)} vs. {limit})",
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
        """One message of a stream, once the stream and the socket take more."""
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
        return (
            not call.finished
            and not self.closed
            and (self._paused or self.h2.queued_body_size(call.stream_id) > STREAM_HIGH_WATER_BYTES)
        )

    def finish(self, call: _Call, code: grpc.StatusCode, details: str) -> None:
        """Trailers with the status (Trailers-Only if nothing was sent); the call is done."""
        if call.finished:
            return
        call.finished = True
        self._release(call)
        status = _OK if code is grpc.StatusCode.OK else str(code.value[0]).encode()
        trailers = ((b"grpc-status", status), (b"grpc-message", _percent_encode(details)))
        h2 = self.h2
        stream_id = call.stream_id
        try:
            if call.headers_sent:
                h2.send_trailers(stream_id, trailers)
            else:  # Trailers-Only
                h2.send_response(stream_id, (*_TRAILERS_ONLY, *trailers), end_stream=True)
            if not call.client_done:  # answered before the request ended: stop the upload
                self._resets.append(stream_id)
        except NGH2Error:
            pass  # the stream was reset meanwhile
        self.writes += 1
        self._gone(stream_id)
        self._schedule_flush()

    def _release(self, call: _Call) -> None:
        """The call is over: its slot, its deadline, what it holds of the window."""
        self.server.active -= 1
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
        if call.received > call.acked:  # nobody will read it: given back
            self._acknowledge(call.stream_id, call.received - call.acked)
            call.acked = call.received
        self.undelivered -= call.received - call.delivered
        call.delivered = call.received
        if call.reserved or self._waiting:
            self._unreserve(call)
        self.server.call_done()

    def _refuse(self, stream_id: int, end: bool, code: grpc.StatusCode, details: str) -> None:
        trailers = (
            *_TRAILERS_ONLY,
            (b"grpc-status", str(code.value[0]).encode()),
            (b"grpc-message", _percent_encode(details)),
        )
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


_GRPC_CORE_KEY_ORDER = {
    key: rank
    for rank, key in enumerate(
        (
            b":path",
            b":authority",
            b":method",
            b":status",
            b":scheme",
            b"content-type",
            b"te",
            b"grpc-encoding",
            b"grpc-internal-encoding-request",
            b"grpc-accept-encoding",
            b"grpc-status",
            b"grpc-timeout",
            b"grpc-previous-rpc-attempts",
            b"grpc-retry-pushback-ms",
            b"user-agent",
            b"grpc-message",
            b"host",
        )
    )
}
"""The keys grpc-core's metadata batch knows, in its order; the others follow as they came."""


def _run(_key: Hashable, call: _Call) -> None:
    call.conn.run(call)


def _field_sizes(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """``name:SIZEB`` for each field, in grpc-core's order (its list in metadata refusals)."""
    ordered = sorted(
        headers, key=lambda f: _GRPC_CORE_KEY_ORDER.get(f[0], len(_GRPC_CORE_KEY_ORDER))
    )
    return " ".join(f"{n.decode('latin-1')}:{len(n) + len(v) + 32}B" for n, v in ordered)


def _b64decode(value: bytes) -> bytes:
    return base64.b64decode(value + b"=" * (-len(value) % 4), validate=True)


class H2GrpcServer:
    """A gRPC server for unary, server-streaming and bidirectional calls (see the module's
    docstring); the methods the coordinator calls on a ``grpc.aio.Server``."""

    def __init__(
        self,
        max_message_bytes: int,
        *,
        reuseport: bool = False,
        max_concurrent_calls: int = 0,
        options: GrpcOptions | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        options = options or GrpcOptions()
        self.options = options
        self.max_message_bytes = max_message_bytes
        self.tls = tls
        """TLS on every connection (``tls.py``; ALPN ``h2``); None: plaintext (h2c)."""
        self.max_concurrent_calls = max_concurrent_calls
        self.reuseport = reuseport
        # grpc-core's soft and hard limits (the hard one is announced)
        self.absolute_max_metadata_size = options.absolute_max_metadata_size
        self.max_metadata_size = min(options.max_metadata_size, self.absolute_max_metadata_size)
        self.compression_enabled = options.compression_enabled_algorithms_bitset | 1  # identity
        self.response_headers = (
            *_TRAILERS_ONLY,
            (
                b"grpc-accept-encoding",
                ", ".join(
                    n for i, n in enumerate(ENCODINGS) if self.compression_enabled & (1 << i)
                ).encode(),
            ),
        )
        self.let_past_bytes = options.http2_lookahead_bytes // 2
        # what a connection may hold of requests no handler has read before a call whose request
        # is still arriving is refused: one message limit and the windows of 256 requests
        self.max_connection_unread_bytes = (
            max_message_bytes + ARRIVING_WINDOWS * options.http2_lookahead_bytes
        )
        self.settings = {
            Setting.INITIAL_WINDOW_SIZE: options.http2_lookahead_bytes,
            Setting.MAX_HEADER_LIST_SIZE: self.absolute_max_metadata_size,
        }
        if options.max_concurrent_streams != INFINITE_MS:  # grpc-core announces none by default
            self.settings[Setting.MAX_CONCURRENT_STREAMS] = options.max_concurrent_streams
        self.connections: set[H2Connection] = set()
        # calls start fairly between groups (group_of: the group a call's request names,
        # fairness.GroupKeys.key), those naming none between connections
        self.group_of: Callable[[str, bytes], Hashable | None] | None = None
        self.admission: Admission[Hashable, _Call] = Admission(_run)
        self.active = 0
        self.stopping = False
        self._generic: list[grpc.GenericRpcHandler] = []
        self._by_path: dict[str, grpc.RpcMethodHandler | None] = {}
        self._sockets: list[socket.socket] = []
        self._servers: list[Any] = []  # asyncio.AbstractServer, or tls.TlsServer
        self._idle: asyncio.Event | None = None

    def metadata_refusal(
        self, size: int, headers: Sequence[tuple[bytes, bytes]], index: int
    ) -> str:
        """Why a call is refused whose header list passes the hard limit at field ``index``
        (``size`` bytes so far), in grpc-core's words: a value longer than the limit by itself,
        or the size so far and the fields that made it."""
        hard = self.absolute_max_metadata_size
        name, value = headers[index]
        if len(value) > hard:
            return (
                f"received metadata size exceeds hard limit (value length {len(value)} vs. {hard})"
            )
        return f"received metadata size exceeds hard limit ({size} vs. {hard});  " + _field_sizes(
            headers[: index + 1]
        )

    def soft_metadata_refusal(self, size: int, headers: Sequence[tuple[bytes, bytes]]) -> str:
        """Between grpc-core's soft and hard limits a share of calls, rising linearly from none
        at the soft limit to all at the hard one, is refused: why, or "" if this one is not."""
        soft = self.max_metadata_size
        if random.random() >= (size - soft) / (self.absolute_max_metadata_size - soft):
            return ""
        return f"received metadata size exceeds soft limit ({size} vs. {soft});  " + _field_sizes(
            headers
        )

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._generic.extend(handlers)
        self._by_path.clear()

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        """Nothing: generated ``add_*_to_server`` functions pass the same handlers to
        ``add_generic_rpc_handlers`` as well."""

    def handler(
        self, path: str, metadata: Sequence[tuple[str, Any]]
    ) -> grpc.RpcMethodHandler | None:
        try:
            return self._by_path[path]
        except KeyError:
            pass
        found = None
        details = _CallDetails(path, tuple(metadata))
        for generic in self._generic:
            found = generic.service(details)  # type: ignore[arg-type]
            if found is not None:
                break
        self._by_path[path] = found  # every handler we serve is chosen by its path alone
        return found

    def add_insecure_port(self, address: str) -> int:
        """Bind ``HOST:PORT`` (every address the host resolves to; port 0: one free port for
        all of them) and return the port. ``OSError`` if it cannot.

        Sockets are bound as grpc-core binds them: IPv6 with IPv4 mapped (``::ffff:A``,
        ``0.0.0.0`` as the dual-stack ``::``), so that with ``SO_REUSEPORT`` they share the
        port with the front ends' grpc-core sockets (the kernel prefers a plain IPv4 listener
        and would send every IPv4 connection to it)."""
        host, _, port_text = address.rpartition(":")
        port = int(port_text)
        infos = socket.getaddrinfo(
            host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        targets: list[tuple[int, str]] = []
        for resolved, _kind, _proto, _name, sockaddr in infos:
            target = (int(resolved), str(sockaddr[0]))
            if target[0] == socket.AF_INET and socket.has_ipv6:
                mapped = "::" if target[1] == "0.0.0.0" else f"::ffff:{target[1]}"
                target = (int(socket.AF_INET6), mapped)
            if target not in targets:
                targets.append(target)
        bound: list[socket.socket] = []
        try:
            for family, host_address in targets:
                sock = socket.socket(family, socket.SOCK_STREAM)
                bound.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if self.reuseport:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                sock.bind((host_address, port))
                port = sock.getsockname()[1]  # port 0: the rest take the same one
                sock.listen(LISTEN_BACKLOG)  # the port is ours from now on
                sock.setblocking(False)
        except OSError:
            for sock in bound:
                sock.close()
            raise
        self._sockets.extend(bound)
        return port

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self._sockets:
            server: Any
            if self.tls is not None:
                server = self.tls.serve([sock], lambda: H2Connection(self))
            else:
                server = await loop.create_server(
                    lambda: H2Connection(self), sock=sock, backlog=LISTEN_BACKLOG
                )
            self._servers.append(server)

    def call_done(self) -> None:
        if self._idle is not None and self.active <= 0:
            self._idle.set()

    async def stop(self, grace: float | None) -> None:
        """Stop accepting, GOAWAY everywhere, ``grace`` seconds for the calls in flight
        (None: none), then cancel what is left (UNAVAILABLE) and close every connection."""
        self.stopping = True
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            if conn.lifetime is not None:
                conn.lifetime.goodbye(b"Server shutdown")
        if grace and self.active > 0:
            self._idle = asyncio.Event()
            deadline = time.monotonic() + grace
            while self.active > 0 and time.monotonic() < deadline:
                self._idle.clear()
                try:
                    await asyncio.wait_for(self._idle.wait(), deadline - time.monotonic())
                except TimeoutError:
                    break
        self.admission.clear()  # nothing starts any more
        tasks = [
            call.task
            for conn in self.connections
            for call in conn.calls.values()
            if call.task is not None and not call.task.done()
        ]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for conn in list(self.connections):
            # A call never started (waiting for its turn), or whose task was cancelled before
            # its first step, was not answered by its handler: answered here.
            for call in list(conn.calls.values()):
                conn.finish(call, grpc.StatusCode.UNAVAILABLE, CANCELLED_AT_STOP)
            conn.close()
        for server in self._servers:
            await server.wait_closed()
