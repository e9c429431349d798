"""Fair under overload (``coordinator/server/fairness.py``): the group a call is for, read from
its encoded request; the concurrency limit per group with a process-wide reserve for the others;
and the handler wrapper that applies it before any work."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from coordinator.server.fairness import (
    LIMIT_EXCEEDED,
    CallLimit,
    GroupKeys,
    limited,
    process_limit,
)
from coordinator.server.grpc_server import AbortCall
from coordinator.server.services import service_descriptors
from kip848.v1 import admin_pb2, classic_group_pb2, consumer_group_pb2, offsets_pb2

KEYS = GroupKeys(service_descriptors())
HEARTBEAT = "/kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat"


def test_the_group_of_every_kind_of_request() -> None:
    long_name = "g" * 300  # its length takes two bytes: not the quick path
    cases = {
        HEARTBEAT: (consumer_group_pb2.ConsumerGroupHeartbeatRequest(group_id="hb"), "hb"),
        "/kip848.v1.ConsumerGroupService/ConsumerGroupDescribe": (
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["first", "second"]),
            "first",
        ),
        "/kip848.v1.ClassicGroupService/JoinGroup": (
            classic_group_pb2.JoinGroupRequest(group_id=long_name, member_id="m"),
            long_name,
        ),
        "/kip848.v1.OffsetService/OffsetCommit": (
            offsets_pb2.OffsetCommitRequest(group_id="oc", generation_id_or_member_epoch=3),
            "oc",
        ),
        "/kip848.v1.OffsetService/OffsetFetch": (
            offsets_pb2.OffsetFetchRequest(
                groups=[offsets_pb2.OffsetFetchRequest.Group(group_id="of")]
            ),
            "of",
        ),
        "/kip848.v1.AdminService/ListTopics": (admin_pb2.ListTopicsRequest(), None),
    }
    assert {
        path: KEYS.key(path, message.SerializeToString()) for path, (message, _) in cases.items()
    } == {path: group for path, (_, group) in cases.items()}


def test_a_group_named_after_other_fields_and_malformed_requests() -> None:
    later = consumer_group_pb2.ConsumerGroupHeartbeatRequest(member_id="m", member_epoch=7)
    encoded = later.SerializeToString() + b"\x0a\x02gx"  # group_id after the other fields
    assert KEYS.key(HEARTBEAT, encoded) == "gx"
    for garbage in (b"", b"\x0a", b"\x0a\xff", b"\x0a\x02\xff\xfe", b"\x0f\x01", b"\xff" * 12):
        assert KEYS.key(HEARTBEAT, garbage) is None, garbage
    assert KEYS.key("/no.Such/Method", b"\x0a\x01g") is None


def test_one_group_may_run_the_limit_the_process_a_tenth_more_for_the_others() -> None:
    limit = CallLimit(100)
    assert process_limit(100) == 110
    assert [limit.acquire("storm") for _ in range(101)] == [True] * 100 + [False]
    assert [limit.acquire(f"g{i}") for i in range(10)] == [True] * 10  # the reserve
    assert limit.acquire("late") is False  # the process is full
    limit.release("storm")
    assert limit.acquire("late") is True
    assert (limit.running("storm"), limit.running("late"), limit.total) == (99, 1, 110)
    for _ in range(99):
        limit.release("storm")
    assert (limit.running("storm"), limit.total) == (0, 11)


def test_no_limit() -> None:
    limit = CallLimit(0)
    assert all(limit.acquire("g") for _ in range(1000))
    limit.release("g")
    assert limit.total == 0


class Context:
    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise AbortCall(code, details)


def test_the_handler_refuses_before_any_work_and_frees_its_place() -> None:
    """Past its group's limit a call is RESOURCE_EXHAUSTED without its handler running; a call
    that ends (answer, error, or a stream's end) gives its place back."""
    limit = CallLimit(2)
    ran: list[bytes] = []
    release = asyncio.Event()

    async def unary(request: bytes, context: Any) -> bytes:
        ran.append(request)
        await release.wait()
        return request

    async def stream(request: bytes, context: Any) -> Any:
        yield request

    request = consumer_group_pb2.ConsumerGroupHeartbeatRequest(group_id="g").SerializeToString()
    handler = limited(HEARTBEAT, unary, KEYS, limit)
    watch = limited("/kip848.v1.ConsumerGroupService/ConsumerGroupWatch", stream, KEYS, limit)

    async def scenario() -> None:
        first = [asyncio.ensure_future(handler(request, Context())) for _ in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(AbortCall) as refused:
            await handler(request, Context())
        assert (refused.value.code, refused.value.details) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            LIMIT_EXCEEDED,
        )
        assert len(ran) == 2
        with pytest.raises(AbortCall):
            [item async for item in watch(request, Context())]
        release.set()
        assert await asyncio.gather(*first) == [request, request]
        assert [item async for item in watch(request, Context())] == [request]
        assert limit.total == 0

    asyncio.run(scenario())
