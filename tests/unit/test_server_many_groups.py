"""A request naming thousands of groups (DescribeGroups, ConsumerGroupDescribe, DescribeConfigs
of groups: up to ``group.coordinator.request.max.groups``, 10,000 by default) is answered a
step of :data:`~coordinator.server.rpc.EACH_STEP` groups at a time, the loop serving every
other client in between: at 10,000 groups its answer took 0.4-1.1 s of the loop in one step,
which every heartbeat of every group waited behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from builders import make_runtime

from coordinator.core.errors import ErrorCode
from coordinator.server.api import Caller, ConfigResource, DescribeConfigs
from coordinator.server.rpc import EACH_STEP
from coordinator.server.service import CoordinatorService

GROUPS = 4 * EACH_STEP + 1
KAFKA = Caller(api_version=6)


@pytest.fixture
async def service() -> AsyncIterator[CoordinatorService]:
    rt = make_runtime()
    await rt.start()
    try:
        yield CoordinatorService(rt)
    finally:
        await rt.close()


async def loop_turns_during(call: Awaitable[Any]) -> tuple[int, Any]:
    """How many times another task ran (one loop turn each) while ``call`` was answered."""
    turns = 0
    done = False

    async def other() -> None:
        nonlocal turns
        while not done:
            await asyncio.sleep(0)
            turns += 1

    ticker = asyncio.ensure_future(other())
    await asyncio.sleep(0)  # the other task is waiting for its next turn
    before = turns
    try:
        answer = await call
    finally:
        done = True
        await ticker
    return turns - before, answer


ids = [f"g{i}" for i in range(GROUPS)]
CASES: dict[str, Callable[[CoordinatorService], Awaitable[Any]]] = {
    "DescribeGroups": lambda s: s.describe_groups(ids, KAFKA),
    "ConsumerGroupDescribe": lambda s: s.consumer_group_describe(ids, KAFKA),
    "DescribeConfigs": lambda s: s.describe_configs(
        DescribeConfigs(resources=[ConfigResource(resource_type=32, resource_name=g) for g in ids]),
        KAFKA,
    ),
}


@pytest.mark.parametrize("api", list(CASES))
async def test_thousands_of_groups_are_answered_a_step_at_a_time(
    service: CoordinatorService, api: str
) -> None:
    turns, reply = await loop_turns_during(CASES[api](service))
    answers = reply.value if hasattr(reply, "value") else reply
    assert len(answers) == GROUPS
    assert turns >= GROUPS // EACH_STEP  # before: 0, the whole answer in one step
    if api == "DescribeGroups":
        assert {a.error_code for a in answers} == {ErrorCode.GROUP_ID_NOT_FOUND}
