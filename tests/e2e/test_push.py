"""The push stream (ConsumerGroupWatch) through a real ``kip848 serve``, served by the
coordinator process and forwarded by front ends: raw messages, kip848.client hand-offs in one
round trip at a 10 s heartbeat interval, and streams ending at shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from conftest import ServerProcess, join_request, owned, store_args

from kip848.client import GroupMember, TopicPartition
from kip848.v1 import consumer_group_pb2 as cg
from kip848.v1 import consumer_group_pb2_grpc as cg_grpc

HB_MS = 10_000
CONFIG = ("--set", f"group.consumer.heartbeat.interval.ms={HB_MS}")
WAIT_S = 10.0


pytestmark = pytest.mark.postgresql_too


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
    grpc_processes: tuple[str, ...],
    store_backend: str,
    request: pytest.FixtureRequest,
) -> Iterator[ServerProcess]:
    s = ServerProcess(
        tmp_path_factory.mktemp("push") / "data",
        *grpc_processes,
        *store_args(store_backend, request),
        *CONFIG,
        clock="system",
    )
    try:
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


class Watcher(threading.Thread):
    """Reads one member's stream into ``messages`` (with their arrival times)."""

    def __init__(
        self, server: ServerProcess, group: str, member_id: str, *, own_channel: bool = False
    ) -> None:
        super().__init__(daemon=True)
        self.channel = grpc.insecure_channel(server.address) if own_channel else server.channel
        self.call = cg_grpc.ConsumerGroupServiceStub(self.channel).ConsumerGroupWatch(
            cg.ConsumerGroupWatchRequest(group_id=group, member_id=member_id),
            metadata=(("client-id", "watcher"),),
        )
        self.messages: list[cg.ConsumerGroupWatchResponse] = []
        self.error: grpc.RpcError | None = None
        self.start()

    def run(self) -> None:
        try:
            for msg in self.call:
                self.messages.append(msg)
        except grpc.RpcError as exc:
            self.error = exc

    def wait_for(self, count: int) -> list[cg.ConsumerGroupWatchResponse]:
        deadline = time.monotonic() + WAIT_S
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self.messages) >= count, self.messages
        return self.messages[:count]


def parts(msg_items: object) -> list[tuple[bytes, list[int]]]:
    return [(tp.topic_id, sorted(tp.partitions)) for tp in msg_items]  # type: ignore[attr-defined]


def test_raw_stream_messages(server: ServerProcess) -> None:
    t = server.create_topic("raw", 4)
    a = server.heartbeat(**join_request("raw-g", ["raw"], member_id="A"))
    assert a.error_code == 0
    watch_a = Watcher(server, "raw-g", "A")
    [first] = watch_a.wait_for(1)
    assert (first.error_code, first.member_epoch, first.group_epoch, first.assignment_epoch) == (
        0,
        1,
        1,
        1,
    )
    assert parts(first.target_topic_partitions) == [(t, [0, 1, 2, 3])]
    assert first.target_topic_partitions[0].topic_name == "raw"
    b = server.heartbeat(**join_request("raw-g", ["raw"], member_id="B"))
    assert b.error_code == 0
    [_, shrunk] = watch_a.wait_for(2)
    assert parts(shrunk.target_topic_partitions) == [(t, [0, 1])]
    watch_b = Watcher(server, "raw-g", "B")
    [b_first] = watch_b.wait_for(1)
    assert parts(b_first.target_topic_partitions) == [(t, [2, 3])]
    assert parts(b_first.released_topic_partitions) == []
    told = server.heartbeat(group_id="raw-g", member_id="A", member_epoch=1)
    assert parts(told.assignment.assigned_topic_partitions) == [(t, [0, 1])]
    acked = server.heartbeat(
        group_id="raw-g", member_id="A", member_epoch=1, topic_partitions=owned((t, [0, 1]))
    )
    assert acked.error_code == 0
    [_, released] = watch_b.wait_for(2)
    assert parts(released.released_topic_partitions) == [(t, [2, 3])]
    server.heartbeat(group_id="raw-g", member_id="A", member_epoch=-1)
    [*_, gone] = watch_a.wait_for(3)
    assert (gone.error_code, gone.error_message) == (25, "The member is not in the group.")
    watch_a.join(WAIT_S)
    assert not watch_a.is_alive() and watch_a.error is None  # ended with status OK
    unknown = Watcher(server, "raw-g", "nobody")
    [msg] = unknown.wait_for(1)
    assert msg.error_code == 25
    watch_b.call.cancel()
    watch_b.join(WAIT_S)
    assert watch_b.error is not None and watch_b.error.code() == grpc.StatusCode.CANCELLED


async def test_sdk_members_hand_off_in_one_round_trip(server: ServerProcess) -> None:
    """Heartbeats every 10 s, yet partitions move in milliseconds: the coordinator pushes
    (bounded at 3 s here, for a machine loaded by other tests)."""
    server.create_topic("sdk", 6)
    log: list[tuple[float, str, str, list[int]]] = []

    def member(name: str) -> GroupMember:
        def record(kind: str):
            async def cb(partitions: frozenset[TopicPartition]) -> None:
                log.append((time.monotonic(), name, kind, sorted(p.partition for p in partitions)))

            return cb

        return GroupMember(
            server.address,
            "sdk-g",
            topics=["sdk"],
            on_assigned=record("assigned"),
            on_revoked=record("revoked"),
        )

    a, b = member("a"), member("b")
    async with asyncio.timeout(30):
        await a.start()
        await a.wait_until(lambda: len(a.assignment) == 6)
        started = time.monotonic()
        await b.start()
        await b.wait_until(lambda: len(b.assignment) == 3 and len(a.assignment) == 3)
        split = time.monotonic() - started
        await a.close()
        closed = time.monotonic()
        await b.wait_until(lambda: len(b.assignment) == 6)
        took_over = time.monotonic() - closed
        # The assignment includes new partitions while on_assigned runs (as Kafka's
        # assignment()): wait for B's callbacks to have returned before reading the log.
        await b.wait_until(
            lambda: sum(len(p) for _t, w, k, p in log if (w, k) == ("b", "assigned")) == 6
        )
    assert split < 3.0 and took_over < 3.0, (split, took_over, log)  # vs a 10 s interval
    assert b.pushes > 0 and b.push_supported is True
    # A's on_revoked returned before B's on_assigned was invoked, each time.
    revoked = [(t, p) for t, who, kind, p in log if who == "a" and kind == "revoked"]
    assigned = [(t, p) for t, who, kind, p in log if who == "b" and kind == "assigned"]
    assert [p for _t, p in revoked] == [p for _t, p in assigned]
    assert all(r[0] <= s[0] for r, s in zip(revoked, assigned, strict=True))
    await b.close()


async def test_a_member_without_push_falls_back_to_heartbeats(server: ServerProcess) -> None:
    server.create_topic("nopush", 2)
    a = GroupMember(server.address, "nopush-g", topics=["nopush"], push=False)
    async with asyncio.timeout(30):
        await a.start()
        await a.wait_stable()
    assert a.pushes == 0 and a.push_supported is None
    await a.close()


def test_streams_end_with_unavailable_when_the_server_stops(
    tmp_path: Path,
    grpc_processes: tuple[str, ...],
    store_backend: str,
    request: pytest.FixtureRequest,
) -> None:
    s = ServerProcess(
        tmp_path / "data", *grpc_processes, *store_args(store_backend, request), clock="manual"
    )
    s.create_topic("t", 1)
    assert s.heartbeat(**join_request("g", ["t"], member_id="A")).error_code == 0
    # Three connections: with front ends, the kernel spreads them over the processes.
    watchers = [Watcher(s, "g", "A", own_channel=True) for _ in range(3)]
    for w in watchers:
        w.wait_for(1)
    started = time.monotonic()
    assert s.stop() == 0, s.stderr_text()
    assert time.monotonic() - started < 5  # not held until the shutdown grace
    for w in watchers:
        w.join(WAIT_S)
        assert w.error is not None
        assert w.error.code() == grpc.StatusCode.UNAVAILABLE, w.error
        w.channel.close()
