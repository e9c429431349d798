"""A connection's lifetime (``coordinator/server/h2lifetime.py``) against a recording stand-in
for the connection, with timers of a few milliseconds: keepalive PINGs and their timeout, the
ping policy's strikes and forgiveness, idle and age limits, and the graceful GOAWAY. (The same
behaviours on real connections, against grpc.aio: tests/e2e/test_grpc_conformance.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from coordinator.server.grpc_options import GrpcOptions
from coordinator.server.h2lifetime import ENHANCE_YOUR_CALM, INTERNAL_ERROR, NO_ERROR, Lifetime


async def until(done: Callable[[], bool], seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.005)):
        if done():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("timed out")


class Conn:
    """What a lifetime asks of its connection, recorded."""

    def __init__(self, calls: int = 0) -> None:
        self.reads = self.writes = 0
        self.calls = calls
        self.pings: list[bytes] = []
        self.goaways: list[tuple[int, int | None, bytes]] = []
        self.ended = ""
        self.closing = False

    def active_calls(self) -> int:
        return self.calls

    def send_ping(self, opaque: bytes) -> None:
        self.pings.append(opaque)

    def send_goaway(self, code: int, last_stream_id: int | None, debug: bytes) -> None:
        self.goaways.append((code, last_stream_id, debug))

    def end(self, details: str) -> None:
        self.ended = details

    def close_when_done(self) -> None:
        self.closing = True


async def test_keepalive_pings_only_with_calls_and_ends_a_silent_peer() -> None:
    options = GrpcOptions(keepalive_time_ms=20, keepalive_timeout_ms=1_000)
    idle, busy, silent = Conn(), Conn(calls=1), Conn(calls=1)
    lifetimes = [Lifetime(c, options) for c in (idle, busy, silent)]
    acknowledged: set[bytes] = set()

    def answer() -> bool:  # the busy peer acknowledges every PING as it comes
        if busy.pings and busy.pings[-1] not in acknowledged:
            acknowledged.add(busy.pings[-1])
            lifetimes[1].ping_acknowledged(busy.pings[-1])
        return bool(silent.ended)

    await until(answer)
    assert idle.pings == [] and idle.goaways == []
    assert len(busy.pings) >= 2 and len(set(busy.pings)) == len(busy.pings)  # random payloads
    assert not busy.ended
    assert len(silent.pings) == 1
    assert (silent.goaways, silent.ended) == (
        [(ENHANCE_YOUR_CALM, None, b"ping_timeout")],
        "ping timeout",
    )
    for lifetime in lifetimes:
        lifetime.close()


async def test_reading_puts_the_keepalive_ping_off() -> None:
    conn = Conn(calls=1)
    lifetime = Lifetime(conn, GrpcOptions(keepalive_time_ms=200))
    for _ in range(10):
        conn.reads += 1
        await asyncio.sleep(0.04)
    assert conn.pings == []
    await until(lambda: bool(conn.pings))
    lifetime.close()


def test_ping_strikes_and_forgiveness() -> None:
    async def run() -> None:
        quiet, talking, busy = Conn(), Conn(), Conn(calls=1)
        lifetimes = {c: Lifetime(c, GrpcOptions()) for c in (quiet, talking, busy)}
        # no call in flight: one PING in two hours is allowed; the fourth comes past 2 strikes
        assert [lifetimes[quiet].ping_received() for _ in range(4)] == [False] * 3 + [True]
        assert (quiet.goaways, quiet.ended) == (
            [(ENHANCE_YOUR_CALM, None, b"too_many_pings")],
            "Too many pings",
        )
        # data sent between PINGs forgives them
        for _ in range(10):
            talking.writes += 1
            assert lifetimes[talking].ping_received() is False
        assert talking.goaways == []
        # a call in flight: five minutes between PINGs, the same strikes
        assert [lifetimes[busy].ping_received() for _ in range(4)] == [False] * 3 + [True]
        for lifetime in lifetimes.values():
            lifetime.close()

    asyncio.run(run())


async def test_a_connection_idle_that_long_is_told_so() -> None:
    conn = Conn(calls=1)
    lifetime = Lifetime(conn, GrpcOptions(max_connection_idle_ms=30))
    await asyncio.sleep(0.06)
    assert conn.goaways == []  # a call in flight: not idle
    conn.calls = 0
    lifetime.calls_ended()
    await asyncio.sleep(0.015)
    assert conn.goaways == []
    await asyncio.sleep(0.06)
    assert (conn.goaways, conn.ended) == (
        [(INTERNAL_ERROR, None, b"connection idle")],
        "connection idle",
    )
    lifetime.close()


async def test_age_says_goodbye_gracefully_and_a_keepalive_ping_keeps_its_own_answer() -> None:
    """At its age: GOAWAY with the highest stream id and a PING; its acknowledgement brings the
    final GOAWAY. A keepalive PING outstanding meanwhile is matched by its own payload."""
    conn = Conn(calls=1)
    options = GrpcOptions(
        keepalive_time_ms=10,
        keepalive_timeout_ms=5_000,
        max_connection_age_ms=100,
        max_connection_age_grace_ms=100,
    )
    lifetime = Lifetime(conn, options)
    await until(lambda: bool(conn.pings))
    keepalive = conn.pings[0]
    await until(lambda: bool(conn.goaways))
    assert conn.goaways == [(NO_ERROR, (1 << 31) - 1, b"max_age")]
    goodbye = conn.pings[-1]
    assert goodbye != keepalive
    lifetime.ping_acknowledged(keepalive)  # not taken for the goodbye's
    assert len(conn.goaways) == 1
    lifetime.ping_acknowledged(goodbye)
    assert conn.goaways[-1] == (NO_ERROR, None, b"max_age") and conn.closing
    await until(lambda: bool(conn.ended))
    assert conn.ended == "max connection age"  # past the grace
    lifetime.close()
