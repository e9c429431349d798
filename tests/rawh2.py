"""A bare HTTP/2 client (ngh2) for tests that send what gRPC clients do not: raw ``grpc-timeout``
headers the client never enforces, chosen header-list sizes, compressed frames, PINGs, streams
that never end, calls that are never read. It records what the server sent, per stream and for
the connection, with the time it arrived.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ngh2 import (
    Configuration,
    Connection,
    ConnectionClosed,
    DataReceived,
    GoAwayReceived,
    NGH2Error,
    PingAcknowledged,
    PingReceived,
    ResponseReceived,
    Role,
    SettingsReceived,
    StreamClosed,
    StreamReset,
    TrailersReceived,
)

Header = tuple[bytes, bytes]
SETTINGS, ACK, MAX_CONCURRENT_STREAMS = 0x4, 0x1, 0x3


def grpc_frame(payload: bytes, compressed: bool = False) -> bytes:
    """One length-prefixed gRPC message."""
    return bytes([compressed]) + len(payload).to_bytes(4, "big") + payload


def header_list_size(headers: Iterable[Header]) -> int:
    """RFC 9113's size of a header list (what SETTINGS_MAX_HEADER_LIST_SIZE limits)."""
    return sum(len(name) + len(value) + 32 for name, value in headers)


@dataclass
class Answer:
    """What the server sent on one stream."""

    headers: list[Header] = field(default_factory=list)  # the first HEADERS (or Trailers-Only)
    data: bytes = b""
    trailers: list[Header] = field(default_factory=list)
    reset: int | None = None  # the server's RST_STREAM code
    closed: bool = False
    closed_at: float = 0.0

    @property
    def fields(self) -> dict[bytes, bytes]:
        return {**dict(self.headers), **dict(self.trailers)}

    @property
    def status(self) -> bytes | None:
        return self.fields.get(b"grpc-status")

    @property
    def message(self) -> bytes:
        return self.fields.get(b"grpc-message", b"")

    @property
    def outcome(self) -> tuple[bytes | None, bytes]:
        return self.status, self.message


class RawConnection:
    """One HTTP/2 connection to 127.0.0.1:``port``; :meth:`until` reads and records what comes."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, h2: Connection
    ) -> None:
        self.reader, self.writer, self.h2 = reader, writer, h2
        self.started = time.monotonic()
        self.answers: dict[int, Answer] = {}
        self.settings: dict[int, int] = {}
        self.goaways: list[tuple[float, int, int, bytes]] = []  # (at, last stream, code, debug)
        self.pings: list[float] = []  # when the server's PINGs arrived (acknowledged by ngh2)
        self.ping_acks: list[bytes] = []
        self.eof = False
        self.eof_at = 0.0
        self._hidden: bytearray | None = None  # what came before the server's SETTINGS, if hidden

    @classmethod
    async def open(
        cls,
        port: int,
        *,
        auto_window_update: bool = True,
        obey_stream_limit: bool = True,
        read_settings: bool = True,
    ) -> RawConnection:
        """Connected, its SETTINGS sent, the server's SETTINGS read (nghttp2 opens at most 100
        streams until it knows the server's limit). ``obey_stream_limit`` False: the server's
        SETTINGS_MAX_CONCURRENT_STREAMS is recorded in ``settings`` (and acknowledged) but not
        shown to nghttp2, which then opens every stream asked for, as a client over the limit
        does. ``read_settings`` False: what is sent next goes with the client's preface, before
        the server's SETTINGS are read (and acknowledged)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        config = Configuration(auto_window_update=auto_window_update)
        if not obey_stream_limit:
            config = Configuration(
                auto_window_update=auto_window_update, peer_max_concurrent_streams=1 << 20
            )
        h2 = Connection(Role.CLIENT, config)
        h2.initiate_connection()
        conn = cls(reader, writer, h2)
        conn._hidden = None if obey_stream_limit else bytearray()
        if read_settings:
            conn.flush()
            await conn.until(lambda: bool(conn.settings), 10)
        return conn

    def now(self) -> float:
        return time.monotonic() - self.started

    def flush(self) -> None:
        try:
            out = self.h2.data_to_send()
        except NGH2Error:
            return
        if out and not self.writer.is_closing():
            self.writer.write(out)

    def request(
        self,
        path: str,
        body: bytes | None = b"",
        *,
        headers: Iterable[Header] = (),
        end: bool = True,
        trailers: Iterable[Header] | None = None,
        flush: bool = True,
    ) -> int:
        """A gRPC request: :meth:`base_headers` plus ``headers``, then ``body`` (raw bytes: frame
        messages with :func:`grpc_frame`; ``None``: headers only), ending the stream unless
        ``end`` is False, with ``trailers`` if given (HTTP/2 allows them; gRPC clients send
        none)."""
        base = self.base_headers(path)
        ends_here = end and trailers is None
        stream_id = self.h2.send_request([*base, *headers], end_stream=body is None and ends_here)
        if body is not None:
            self.h2.send_data(stream_id, body, end_stream=ends_here)
        if trailers is not None:
            self.h2.send_trailers(stream_id, list(trailers))
        self.answers[stream_id] = Answer()
        if flush:
            self.flush()
        return stream_id

    @staticmethod
    def base_headers(path: str) -> list[Header]:
        """What every request of :meth:`request` starts with."""
        return [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path.encode()),
            (b":authority", b"x"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]

    def send(self, stream_id: int, data: bytes, *, end: bool = False) -> None:
        self.h2.send_data(stream_id, data, end_stream=end)
        self.flush()

    def ping(self, opaque: bytes = b"raw-ping") -> None:
        self.h2.ping(opaque)
        self.flush()

    def answered(self, *stream_ids: int) -> bool:
        ids = stream_ids or tuple(self.answers)
        return all(self.answers[s].closed for s in ids)

    async def until(self, done: Callable[[], bool], seconds: float) -> bool:
        """Read and record until ``done()`` or the connection ends or ``seconds`` pass;
        returns ``done()``."""
        deadline = time.monotonic() + seconds
        while not done() and not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                chunk = await asyncio.wait_for(self.reader.read(1 << 16), left)
            except TimeoutError:
                break
            except ConnectionError:
                chunk = b""
            if not chunk:
                self.eof, self.eof_at = True, self.now()
                break
            if self._hidden is not None:
                chunk = self._without_stream_limit(chunk)
            try:
                self.h2.receive_data(chunk)
            except NGH2Error:
                self.eof, self.eof_at = True, self.now()
                break
            self._record(self.h2.events())
            self.flush()
        return done()

    def _without_stream_limit(self, chunk: bytes) -> bytes:
        """The server's first frames with SETTINGS_MAX_CONCURRENT_STREAMS taken out of its
        SETTINGS (recorded in ``settings``); once that SETTINGS has passed, everything as is."""
        assert self._hidden is not None
        self._hidden += chunk
        out = bytearray()
        buf = self._hidden
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            frame, payload = bytes(buf[:9]), bytes(buf[9 : 9 + length])
            del buf[: 9 + length]
            if frame[3] != SETTINGS or frame[4] & ACK:
                out += frame + payload
                continue
            kept = b""
            for at in range(0, length, 6):
                entry = payload[at : at + 6]
                if int.from_bytes(entry[:2], "big") == MAX_CONCURRENT_STREAMS:
                    self.settings[MAX_CONCURRENT_STREAMS] = int.from_bytes(entry[2:], "big")
                else:
                    kept += entry
            out += len(kept).to_bytes(3, "big") + frame[3:] + kept + buf
            self._hidden = None
            break
        return bytes(out)

    def _record(self, events: Iterable[object]) -> None:
        now = self.now()
        for e in events:
            if isinstance(e, ResponseReceived):
                answer = self.answers.setdefault(e.stream_id, Answer())
                answer.headers = list(e.headers)
            elif isinstance(e, TrailersReceived):
                self.answers.setdefault(e.stream_id, Answer()).trailers = list(e.headers)
            elif isinstance(e, DataReceived):
                answer = self.answers.setdefault(e.stream_id, Answer())
                answer.data += e.data
            elif isinstance(e, StreamReset):
                self.answers.setdefault(e.stream_id, Answer()).reset = e.error_code
            elif isinstance(e, StreamClosed):
                answer = self.answers.setdefault(e.stream_id, Answer())
                answer.closed, answer.closed_at = True, now
            elif isinstance(e, SettingsReceived):
                self.settings.update(e.settings)
            elif isinstance(e, GoAwayReceived):
                self.goaways.append((now, e.last_stream_id, e.error_code, e.debug_data))
            elif isinstance(e, PingReceived):
                self.pings.append(now)
            elif isinstance(e, PingAcknowledged):
                self.ping_acks.append(e.opaque_data)
            elif isinstance(e, ConnectionClosed):
                pass

    def close(self) -> None:
        self.writer.close()
