"""ListTopics (``CoordinatorRuntime.list_topics``, what the gRPC ListTopics and the Kafka
listener's Metadata of every topic read) at the scale of a large registry: answered from a
snapshot of the committed copy's topics image, built ``LIST_STEP`` topics a step of the loop
and kept for the next call until the topics change (docs/ha.md "Sizing")."""

from __future__ import annotations

import asyncio

import pytest
from builders import LoopSteps, make_runtime

from coordinator.core.topics import NewTopic, TopicResult
from coordinator.runtime import runtime as runtime_module


def listed(rt: object) -> list[TopicResult]:
    """The answer as the committed copy's registry lists it, sorted by name (the reference)."""
    return rt.committed.registry.list_topics()  # type: ignore[attr-defined]


async def test_a_listing_is_built_a_few_topics_a_step_from_one_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five topics, two a step: the answer takes three steps of the loop, in which a
    heartbeat would be served; a topic created meanwhile is not in it (a snapshot: the
    topics as the call found them), and is in the next answer. A second call with nothing
    changed is answered at once, the same topics (built once). Before, the whole registry was
    listed in one step, every call."""
    monkeypatch.setattr(runtime_module, "LIST_STEP", 2, raising=False)
    rt = make_runtime()
    await rt.start()
    try:
        await rt.create_topics(
            [NewTopic(name=n, num_partitions=i + 1) for i, n in enumerate("ecadb")]
        )
        before = listed(rt)
        assert [t.name for t in before] == [*"abcde"]
        built: list[int] = []
        result = TopicResult

        def counted(**fields: object) -> TopicResult:
            built.append(steps.now)
            return result(**fields)  # type: ignore[arg-type]

        monkeypatch.setattr(runtime_module, "TopicResult", counted)
        with LoopSteps() as steps:
            listing = asyncio.ensure_future(rt.list_topics())
            await asyncio.sleep(0)
            await asyncio.sleep(0)  # the listing is under way: a topic is created
            created = await rt.create_topics([NewTopic(name="aa", num_partitions=1)])
            answer = await listing
        assert created[0].name == "aa" and created[0].error_code == 0
        assert answer == before
        assert len(built) == 5 and len(set(built)) == 3  # two, two, one a step
        built.clear()
        after = listed(rt)
        assert [t.name for t in after] == ["a", "aa", "b", "c", "d", "e"]
        assert await rt.list_topics() == after
        assert len(built) == 6  # built again: the topics changed
        built.clear()
        again = await rt.list_topics()
        assert again == after and built == []  # nothing changed: not built again
        again.clear()  # a caller's copy: the next answer is whole
        assert await rt.list_topics() == after
    finally:
        await rt.close()
