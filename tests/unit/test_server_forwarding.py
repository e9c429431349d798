"""Front-end forwarding (coordinator/server/forwarding.py): framing and the coordinator's dispatcher.

The processes themselves are tested end to end in tests/e2e/test_frontends.py.
"""

from __future__ import annotations

import asyncio
import marshal
from typing import Any

import grpc
import pytest

from coordinator.server.forwarding import (
    CALL,
    ITEM,
    REPLY,
    Dispatcher,
    ForwardedContext,
    FrameConnection,
)
from coordinator.server.grpc_server import method_table
from coordinator.server.services import service_descriptors
from kip848.v1 import consumer_group_pb2 as cg

FRAMES = [
    (CALL, 1, "/a/B", b"\x00\x01payload", (("client-id", "c"),), "ipv4:127.0.0.1:1"),
    (REPLY, 1, 0, "", b"x" * 70_000),
    (REPLY, 2, 3, "bad", b""),
]


def encode(frame: tuple[Any, ...]) -> bytes:
    data = marshal.dumps(frame)
    return len(data).to_bytes(4, "little") + data


@pytest.mark.parametrize("chunk", [1, 3, 7, 4096, 1 << 20])
def test_frames_survive_any_split_of_the_stream(chunk: int) -> None:
    got: list[tuple[Any, ...]] = []
    conn = FrameConnection(got.append, lambda: None)
    stream = b"".join(encode(f) for f in FRAMES)
    for i in range(0, len(stream), chunk):
        conn.data_received(stream[i : i + chunk])
    assert got == FRAMES


class Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return False


async def test_frames_sent_in_one_loop_turn_go_out_in_one_write() -> None:
    conn = FrameConnection(lambda f: None, lambda: None)
    transport = Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.send(FRAMES[1])
    conn.send(FRAMES[2])
    assert transport.writes == []
    await asyncio.sleep(0)
    assert transport.writes == [encode(FRAMES[1]) + encode(FRAMES[2])]
    conn.connection_lost(None)
    conn.send(FRAMES[0])  # after the peer is gone: dropped, not an error
    await asyncio.sleep(0)
    assert len(transport.writes) == 1


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send(self, frame: tuple[Any, ...]) -> None:
        self.sent.append(frame)


class Servicer:
    """Stands in for ConsumerGroupService: one method per outcome."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any, str]] = []

    async def ConsumerGroupHeartbeat(
        self, request: cg.ConsumerGroupHeartbeatRequest, context: ForwardedContext
    ):
        self.seen.append((request.group_id, tuple(context.invocation_metadata()), context.peer()))
        if request.group_id == "abort":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "The coordinator is shutting down.")
        if request.group_id == "boom":
            raise RuntimeError("a bug")
        await asyncio.sleep(0)  # a real handler may wait for its batch to be durable
        return cg.ConsumerGroupHeartbeatResponse(
            member_id="m", member_epoch=request.member_epoch + 1
        )

    async def ConsumerGroupDescribe(self, request: Any, context: ForwardedContext):
        raise AssertionError("not called")

    async def ConsumerGroupWatch(
        self, request: cg.ConsumerGroupWatchRequest, context: ForwardedContext
    ):
        self.seen.append((request.member_id, tuple(context.invocation_metadata()), context.peer()))
        for epoch in (1, 2):
            yield cg.ConsumerGroupWatchResponse(member_epoch=epoch)
        if request.member_id == "abort":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "The coordinator is shutting down.")
        if request.member_id == "boom":
            raise RuntimeError("a bug")
        if request.member_id == "forever":
            try:
                await asyncio.sleep(3600)
            finally:
                self.seen.append(("closed", (), ""))


def call(path: str, payload: bytes, call_id: int = 7) -> tuple[Any, ...]:
    return (CALL, call_id, path, payload, (("client-id", "cli"),), "ipv4:10.0.0.1:5000")


async def test_dispatcher_answers_every_outcome_with_status_and_bytes() -> None:
    servicer = Servicer()
    descriptor = service_descriptors()[0]
    assert descriptor.full_name == "kip848.v1.ConsumerGroupService"
    dispatcher = Dispatcher(method_table([(descriptor, servicer)]))
    conn = Recorder()
    path = "/kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat"
    ok = cg.ConsumerGroupHeartbeatRequest(group_id="g", member_epoch=4).SerializeToString()
    dispatcher.call(conn, call(path, ok, 1))  # type: ignore[arg-type]
    dispatcher.call(conn, call(path, b"\xff\xff\xff", 2))  # type: ignore[arg-type]
    dispatcher.call(conn, call("/kip848.v1.ConsumerGroupService/Nope", b"", 3))  # type: ignore[arg-type]
    dispatcher.call(
        conn, call(path, cg.ConsumerGroupHeartbeatRequest(group_id="abort").SerializeToString(), 4)
    )  # type: ignore[arg-type]
    dispatcher.call(
        conn, call(path, cg.ConsumerGroupHeartbeatRequest(group_id="boom").SerializeToString(), 5)
    )  # type: ignore[arg-type]
    await dispatcher.drain()
    by_id = {frame[1]: frame for frame in conn.sent}
    assert sorted(by_id) == [1, 2, 3, 4, 5] and len(conn.sent) == 5
    expected = cg.ConsumerGroupHeartbeatResponse(member_id="m", member_epoch=5).SerializeToString()
    assert by_id[1] == (REPLY, 1, 0, "", expected)
    kind, _, status, details, payload = by_id[2]
    assert (kind, status, payload) == (REPLY, grpc.StatusCode.INVALID_ARGUMENT.value[0], b"")
    assert details.startswith("Undecodable request: Error parsing message")
    assert by_id[3] == (
        REPLY,
        3,
        grpc.StatusCode.UNIMPLEMENTED.value[0],
        "Method not found: /kip848.v1.ConsumerGroupService/Nope",
        b"",
    )
    assert by_id[4] == (
        REPLY,
        4,
        grpc.StatusCode.UNAVAILABLE.value[0],
        "The coordinator is shutting down.",
        b"",
    )
    assert by_id[5] == (REPLY, 5, grpc.StatusCode.UNKNOWN.value[0], "Unexpected server error.", b"")
    # The servicer saw the caller's metadata and address, as through grpc.aio.
    assert servicer.seen[0] == ("g", (("client-id", "cli"),), "ipv4:10.0.0.1:5000")
    assert [g for g, _m, _p in servicer.seen] == ["g", "abort", "boom"]


def test_method_table_covers_every_unary_method_of_every_service() -> None:
    class Anything:
        def __getattr__(self, name: str) -> Any:
            return name

    descriptors = service_descriptors()
    table = method_table([(d, Anything()) for d in descriptors])
    expected = {f"/{d.full_name}/{m.name}" for d in descriptors for m in d.methods}
    assert set(table) == expected
    parse, method = table["/kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat"]
    assert method == "ConsumerGroupHeartbeat"
    assert parse(cg.ConsumerGroupHeartbeatRequest(group_id="x").SerializeToString()).group_id == "x"


def test_raw_handlers_serve_every_method_by_path_and_refuse_client_streaming_ones() -> None:
    from grpc_reflection.v1alpha import reflection_pb2

    from coordinator.server.grpc_server import add_raw_handlers

    class Server:
        def __init__(self) -> None:
            self.generic: list[Any] = []

        def add_generic_rpc_handlers(self, handlers: Any) -> None:
            self.generic.extend(handlers)

    server = Server()
    descriptors = service_descriptors()
    add_raw_handlers(server, descriptors, lambda path: path)  # type: ignore[arg-type]
    assert len(server.generic) == 1  # one generic handler, nothing registered per method

    class Details:
        def __init__(self, method: str) -> None:
            self.method = method

    handler = server.generic[0].service(Details("/kip848.v1.OffsetService/OffsetCommit"))
    assert handler.unary_unary == "/kip848.v1.OffsetService/OffsetCommit"
    assert (handler.request_deserializer, handler.response_serializer) == (
        None,
        None,
    )  # bytes in, bytes out
    assert server.generic[0].service(Details("/kip848.v1.OffsetService/Nope")) is None
    # The push stream is server-streaming: served as such.
    watch = server.generic[0].service(Details("/kip848.v1.ConsumerGroupService/ConsumerGroupWatch"))
    assert (watch.unary_unary, watch.unary_stream) == (
        None,
        "/kip848.v1.ConsumerGroupService/ConsumerGroupWatch",
    )
    reflection = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]
    with pytest.raises(
        ValueError,
        match=r"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo is a client-streaming",
    ):
        add_raw_handlers(Server(), [reflection], lambda path: path)  # type: ignore[arg-type]


async def test_dispatcher_forwards_a_stream_item_by_item_and_stops_it_on_cancel() -> None:
    servicer = Servicer()
    descriptor = service_descriptors()[0]
    dispatcher = Dispatcher(method_table([(descriptor, servicer)]))
    conn = Recorder()
    path = "/kip848.v1.ConsumerGroupService/ConsumerGroupWatch"

    def watch(member_id: str, call_id: int) -> None:
        request = cg.ConsumerGroupWatchRequest(group_id="g", member_id=member_id)
        dispatcher.call(conn, call(path, request.SerializeToString(), call_id))  # type: ignore[arg-type]

    for call_id, member_id in enumerate(("ok", "abort", "boom", "forever"), start=1):
        watch(member_id, call_id)
    dispatcher.call(conn, call(path, b"\xff\xff", 5))  # type: ignore[arg-type]
    for _ in range(10):
        await asyncio.sleep(0)
    dispatcher.cancel(conn, 4)  # type: ignore[arg-type]  # the front end's client went away
    dispatcher.cancel(conn, 99)  # type: ignore[arg-type]  # unknown call: nothing happens
    await dispatcher.drain()
    items = [cg.ConsumerGroupWatchResponse(member_epoch=e).SerializeToString() for e in (1, 2)]
    by_id: dict[int, list[tuple[Any, ...]]] = {}
    for frame in conn.sent:
        by_id.setdefault(frame[1], []).append(frame)
    assert by_id[1] == [(ITEM, 1, items[0]), (ITEM, 1, items[1]), (REPLY, 1, 0, "", b"")]
    assert by_id[2] == [
        (ITEM, 2, items[0]),
        (ITEM, 2, items[1]),
        (REPLY, 2, grpc.StatusCode.UNAVAILABLE.value[0], "The coordinator is shutting down.", b""),
    ]
    assert by_id[3] == [
        (ITEM, 3, items[0]),
        (ITEM, 3, items[1]),
        (REPLY, 3, grpc.StatusCode.UNKNOWN.value[0], "Unexpected server error.", b""),
    ]
    # Cancelled: its items went out, no reply (nobody to answer), the generator was closed.
    assert by_id[4] == [(ITEM, 4, items[0]), (ITEM, 4, items[1])]
    assert ("closed", (), "") in servicer.seen
    [(kind, _id, status, details, payload)] = by_id[5]
    assert (kind, status, payload) == (REPLY, grpc.StatusCode.INVALID_ARGUMENT.value[0], b"")
