"""Bursts of concurrent calls (#13 item 5): a real server answers every call of a 2,000-call
burst — queued, never dropped with CANCELLED (grpc-core's pending-call limit, raised in
``new_grpc_server``); past ``--max-concurrent-calls`` the extra calls are refused explicitly
with RESOURCE_EXHAUSTED, and a refused call was not processed."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import grpc
import pytest
from conftest import ServerProcess

from kip848.v1 import common_pb2, consumer_group_pb2, consumer_group_pb2_grpc

pytestmark = pytest.mark.postgresql_too

BURST = 2_000
GROUPS = 50
CHANNELS = 4


def join(i: int) -> consumer_group_pb2.ConsumerGroupHeartbeatRequest:
    return consumer_group_pb2.ConsumerGroupHeartbeatRequest(
        group_id=f"g{i % GROUPS}",
        member_id=f"m{i}",
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=common_pb2.TopicNames(names=["t"]),
        topic_partitions=common_pb2.TopicPartitionsList(),
    )


async def burst(address: str) -> list[tuple[str, int | str]]:
    """BURST joins sent at once over CHANNELS connections: (status, error code or details)."""
    channels = [grpc.aio.insecure_channel(address) for _ in range(CHANNELS)]
    stubs = [consumer_group_pb2_grpc.ConsumerGroupServiceStub(c) for c in channels]

    async def one(i: int) -> tuple[str, int | str]:
        try:
            resp = await stubs[i % CHANNELS].ConsumerGroupHeartbeat(join(i), timeout=120)
        except grpc.aio.AioRpcError as exc:
            return exc.code().name, exc.details() or ""
        return "OK", resp.error_code

    try:
        return await asyncio.gather(*(one(i) for i in range(BURST)))
    finally:
        for c in channels:
            await c.close()


def members(server: ServerProcess) -> set[str]:
    desc = server.describe(*(f"g{g}" for g in range(GROUPS)))
    return {m.member_id for g in desc.groups for m in g.members}


def test_a_burst_is_queued_and_every_call_answered(start_server, tmp_path: Path) -> None:
    server: ServerProcess = start_server(tmp_path / "data")
    server.create_topic("t", 8)
    outcomes = asyncio.run(burst(server.address))
    assert Counter(outcomes) == {("OK", 0): BURST}
    assert members(server) == {f"m{i}" for i in range(BURST)}


def test_past_the_limit_calls_are_refused_explicitly_and_not_processed(tmp_path: Path) -> None:
    # 20: the 50 groups' first joins alone wait together for their groups' first targets, so
    # the burst passes the limit however slowly a loaded machine sends it.
    server = ServerProcess(tmp_path / "data", "--max-concurrent-calls", "20")
    try:
        server.create_topic("t", 8)
        outcomes = asyncio.run(burst(server.address))
        counts = Counter(outcomes)
        refused = ("RESOURCE_EXHAUSTED", "Concurrent RPC limit exceeded!")
        assert set(counts) == {("OK", 0), refused}, counts
        assert counts[refused] > 0 and counts[("OK", 0)] >= 20
        # Exactly the answered joins happened: a refused call was not processed.
        ok = {f"m{i}" for i, outcome in enumerate(outcomes) if outcome == ("OK", 0)}
        assert members(server) == ok
    finally:
        assert server.stop() == 0, server.stderr_text()
