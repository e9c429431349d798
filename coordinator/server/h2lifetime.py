"""A connection's lifetime on our gRPC server (``h2grpc.py``), as grpc-core's server keeps it.

What grpc-core does, measured against grpc.aio 1.85 frame by frame
(tests/e2e/test_grpc_conformance.py), with the options of ``grpc_options.py``:

* **Keepalive.** After ``grpc.keepalive_time_ms`` without reading anything, the server PINGs
  the client, if calls are in flight (or ``grpc.keepalive_permit_without_calls``); one PING at a
  time. A PING not acknowledged within ``ping_ack_timeout_ms`` ends the connection: GOAWAY
  ENHANCE_YOUR_CALM "ping_timeout", its calls answered UNAVAILABLE "ping timeout".
* **Ping policy.** A client PING that comes sooner than
  ``grpc.http2.min_ping_interval_without_data_ms`` after the previous one (two hours when no call
  is in flight and ``keepalive_permit_without_calls`` is off) is a strike; past
  ``grpc.http2.max_ping_strikes`` strikes (0: never) GOAWAY ENHANCE_YOUR_CALM "too_many_pings"
  ends the connection, its calls answered UNAVAILABLE "Too many pings". Sending headers, data or
  a window update forgives: the count starts again.
* **Idle.** A connection without calls for ``grpc.max_connection_idle_ms`` gets GOAWAY
  "connection idle" (grpc-core's code, INTERNAL_ERROR) and is closed.
* **Handshake.** A client that has not sent its SETTINGS (the end of its connection preface)
  within the handshake timeout (grpc-core's ``grpc.server_handshake_timeout_ms``: 120 s, or
  TLS's ``ssl.handshake.timeout.ms`` on a TLS listener, as grpc.aio is given) gets GOAWAY
  INTERNAL_ERROR "Did not receive HTTP/2 settings before handshake timeout" and is closed: a
  connection that says nothing is not kept for ever.
* **Age.** At ``grpc.max_connection_age_ms`` (+-10%, so that connections made together do not all
  go together) the server says goodbye gracefully, as grpc-core does: GOAWAY with the highest
  stream id and a PING, then, once the PING is answered, GOAWAY with the last stream it took
  ("max_age", NO_ERROR); the connection closes when its calls are done, or after
  ``grpc.max_connection_age_grace_ms`` with what is left answered UNAVAILABLE
  "max connection age".

Timers are re-armed lazily (a read, a call's end only bump a counter or a time), so the steady
state costs nothing per call.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable
from typing import Protocol

from .grpc_options import INFINITE_MS, GrpcOptions

ENHANCE_YOUR_CALM = 0xB
INTERNAL_ERROR = 0x2
NO_ERROR = 0x0
MAX_STREAM_ID = (1 << 31) - 1
IDLE_PING_INTERVAL_S = 7200.0
"""grpc-core: with no call in flight a client may PING once in two hours (RFC 1122's TCP
keepalive), unless ``keepalive_permit_without_calls``."""
AGE_JITTER = 0.1
HANDSHAKE_TIMEOUT_S = 120.0
"""grpc-core's ``grpc.server_handshake_timeout_ms`` default: the client's SETTINGS by then."""
NO_SETTINGS = b"Did not receive HTTP/2 settings before handshake timeout"


class Managed(Protocol):
    """What the lifetime asks of its connection."""

    reads: int  # bumped on every read
    writes: int  # bumped on every HEADERS, DATA or WINDOW_UPDATE sent

    def active_calls(self) -> int: ...

    def send_ping(self, opaque: bytes) -> None: ...

    def send_goaway(self, code: int, last_stream_id: int | None, debug: bytes) -> None:
        """GOAWAY (``last_stream_id`` None: the last stream taken)."""

    def end(self, details: str) -> None:
        """Answer every call UNAVAILABLE ``details`` and close the connection."""

    def close_when_done(self) -> None:
        """Close the connection once its calls are done (now if there are none)."""


class Lifetime:
    """Keepalive, the ping policy, idle and age limits of one connection."""

    __slots__ = (
        "_age_timer",
        "_conn",
        "_goodbye",
        "_goodbye_timer",
        "_grace_timer",
        "_idle_since",
        "_idle_timer",
        "_keepalive_timer",
        "_goodbye_ping",
        "_keepalive_ping",
        "_last_ping",
        "_loop",
        "_options",
        "_ping_timer",
        "_reads_seen",
        "_settings_timer",
        "_strikes",
        "_writes_seen",
        "draining",
    )

    def __init__(
        self, conn: Managed, options: GrpcOptions, handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S
    ) -> None:
        self._conn = conn
        self._options = options
        self._loop = asyncio.get_running_loop()
        self._settings_timer: asyncio.TimerHandle | None = self._loop.call_later(
            handshake_timeout_s, self._no_settings
        )
        self._keepalive_timer: asyncio.TimerHandle | None = None
        self._ping_timer: asyncio.TimerHandle | None = None  # the outstanding PING's deadline
        self._idle_timer: asyncio.TimerHandle | None = None
        self._age_timer: asyncio.TimerHandle | None = None
        self._grace_timer: asyncio.TimerHandle | None = None
        self._goodbye_timer: asyncio.TimerHandle | None = None
        self._goodbye = b""  # the debug data of a graceful GOAWAY under way
        # the payloads of our PINGs awaiting their acknowledgements (random, as grpc-core's)
        self._keepalive_ping = self._goodbye_ping = b""
        self._reads_seen = 0
        self._writes_seen = 0
        self._strikes = 0
        self._last_ping = float("-inf")
        self._idle_since = self._loop.time()
        self.draining = False  # a graceful GOAWAY was sent: no more calls are taken
        if options.keepalive_time_ms < INFINITE_MS:
            self._keepalive_timer = self._after(options.keepalive_time_ms, self._keepalive)
        if options.max_connection_idle_ms < INFINITE_MS:
            self._idle_timer = self._after(options.max_connection_idle_ms, self._idle)
        if options.max_connection_age_ms < INFINITE_MS:
            jitter = random.uniform(1 - AGE_JITTER, 1 + AGE_JITTER)
            self._age_timer = self._after(options.max_connection_age_ms * jitter, self._aged)

    def _after(self, ms: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return self._loop.call_later(ms / 1000.0, callback)

    def close(self) -> None:
        """The connection is gone: no timer fires any more."""
        for timer in (
            self._settings_timer,
            self._keepalive_timer,
            self._ping_timer,
            self._idle_timer,
            self._age_timer,
            self._grace_timer,
            self._goodbye_timer,
        ):
            if timer is not None:
                timer.cancel()

    # ------------------------------------------------------------------ handshake

    def settings_received(self) -> None:
        """The client's SETTINGS came: its handshake is done."""
        if self._settings_timer is not None:
            self._settings_timer.cancel()
            self._settings_timer = None

    def _no_settings(self) -> None:
        self._settings_timer = None
        self._conn.send_goaway(INTERNAL_ERROR, 0, NO_SETTINGS)
        self._conn.end(NO_SETTINGS.decode())

    # ------------------------------------------------------------------ keepalive

    def _keepalive(self) -> None:
        conn, options = self._conn, self._options
        self._keepalive_timer = None
        if conn.reads != self._reads_seen:  # read something since: wait a whole period again
            self._reads_seen = conn.reads
        elif options.keepalive_permit_without_calls or conn.active_calls():
            self._keepalive_ping = os.urandom(8)
            conn.send_ping(self._keepalive_ping)
            self._ping_timer = self._after(options.ping_ack_timeout_ms, self._ping_timeout)
            return
        self._keepalive_timer = self._after(options.keepalive_time_ms, self._keepalive)

    def _ping_timeout(self) -> None:
        self._ping_timer = None
        self._conn.send_goaway(ENHANCE_YOUR_CALM, None, b"ping_timeout")
        self._conn.end("ping timeout")

    def ping_acknowledged(self, opaque: bytes) -> None:
        if opaque == self._keepalive_ping and self._ping_timer is not None:
            self._ping_timer.cancel()
            self._ping_timer = None
            self._reads_seen = self._conn.reads
            self._keepalive_timer = self._after(self._options.keepalive_time_ms, self._keepalive)
        elif opaque == self._goodbye_ping and self._goodbye_timer is not None:
            self._goodbye_timer.cancel()
            self._final_goaway()

    # ------------------------------------------------------------------ the client's PINGs

    def ping_received(self) -> bool:
        """A PING from the client; True if it was one too many (the connection was ended)."""
        conn, options = self._conn, self._options
        if conn.writes != self._writes_seen:  # the server sent data since: strikes forgiven
            self._writes_seen = conn.writes
            self._strikes = 0
            self._last_ping = float("-inf")
        now = self._loop.time()
        if not options.keepalive_permit_without_calls and not conn.active_calls():
            interval = IDLE_PING_INTERVAL_S
        else:
            interval = options.http2_min_ping_interval_without_data_ms / 1000.0
        allowed_at = self._last_ping + interval
        self._last_ping = now
        if allowed_at <= now:
            return False
        self._strikes += 1
        if options.http2_max_ping_strikes and self._strikes > options.http2_max_ping_strikes:
            conn.send_goaway(ENHANCE_YOUR_CALM, None, b"too_many_pings")
            conn.end("Too many pings")
            return True
        return False

    # ------------------------------------------------------------------ idle and age

    def calls_ended(self) -> None:
        """The connection has no call left."""
        if self._idle_timer is not None:
            self._idle_since = self._loop.time()

    def _idle(self) -> None:
        max_idle_ms = self._options.max_connection_idle_ms
        if self._conn.active_calls():
            self._idle_timer = self._after(max_idle_ms, self._idle)
            return
        left_ms = max_idle_ms - (self._loop.time() - self._idle_since) * 1000.0
        if left_ms > 0:
            self._idle_timer = self._after(left_ms, self._idle)
            return
        self._idle_timer = None
        self._conn.send_goaway(INTERNAL_ERROR, None, b"connection idle")
        self._conn.end("connection idle")

    def _aged(self) -> None:
        self._age_timer = None
        self.goodbye(b"max_age")
        grace = self._options.max_connection_age_grace_ms
        if grace < INFINITE_MS:
            self._grace_timer = self._after(grace, self._grace_over)

    def _grace_over(self) -> None:
        self._grace_timer = None
        self._conn.end("max connection age")

    def goodbye(self, debug: bytes) -> None:
        """A graceful GOAWAY, as grpc-core's: the highest stream id and a PING now, the last
        stream taken once the PING is answered (or after the PING timeout), so that streams
        the client opened meanwhile are still taken; then close once the calls are done."""
        if self.draining:
            return
        self.draining = True
        self._goodbye = debug
        self._conn.send_goaway(NO_ERROR, MAX_STREAM_ID, debug)
        self._goodbye_ping = os.urandom(8)
        self._conn.send_ping(self._goodbye_ping)
        self._goodbye_timer = self._after(self._options.ping_ack_timeout_ms, self._final_goaway)

    def _final_goaway(self) -> None:
        self._goodbye_timer = None
        self._conn.send_goaway(NO_ERROR, None, self._goodbye)
        self._conn.close_when_done()
