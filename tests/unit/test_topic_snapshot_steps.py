"""A refresh from an upstream broker on a node's loop (``CoordinatorRuntime.apply_topic_snapshot``,
``follow_topic_snapshot``): planned off the loop against the registry's immutable topics image
(``plan_snapshot``), applied on it a bounded number of topic changes a step
(``TopicRegistry.apply_plan``, ``SNAPSHOT_STEP``), each part durable before the next. Counted,
not timed (bench/loop_steps.py *snapshot* times it)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from builders import LoopSteps, commit, make_runtime
from test_runtime_offsets import stored_offsets

from coordinator.core import codec
from coordinator.core.topics import NewTopic, SnapshotChanges, TopicResult
from coordinator.routing import CLUSTER_LOG
from coordinator.runtime import runtime as runtime_module
from coordinator.runtime.store import MemoryRecordStore

N = 100_000


class CountedSnapshot(list[NewTopic]):
    """A snapshot that counts the topics read from it on the loop's thread."""

    def __init__(self, topics: list[NewTopic]) -> None:
        super().__init__(topics)
        self.loop_thread = threading.get_ident()
        self.read_on_loop = 0

    def _count(self, n: int) -> None:
        if threading.get_ident() == self.loop_thread:
            self.read_on_loop += n

    def __iter__(self) -> Iterator[NewTopic]:
        self._count(len(self))
        return super().__iter__()

    def __getitem__(self, i: Any) -> Any:
        item = super().__getitem__(i)
        self._count(len(item) if isinstance(i, slice) else 1)
        return item


def cluster_records(store: MemoryRecordStore) -> list[Any]:
    """The cluster log's records, in their order."""
    return [codec.decode(e.key, e.value) for e in store.journal(CLUSTER_LOG)]


def topics(*specs: tuple[str, int, str | None]) -> list[NewTopic]:
    return [NewTopic(name=n, num_partitions=p, topic_id=i) for n, p, i in specs]


async def test_an_unchanged_snapshot_of_100000_topics_is_read_off_the_loop() -> None:
    """The registry follows 100,000 topics (created by a first refresh, in parts); a refresh
    that changes nothing reads none of the snapshot's topics on the loop (a thread plans it
    against the registry's image), runs no command and writes nothing, in one loop step
    after the plan. Before, the registry's command read the snapshot on the loop, several
    times over (and passed over the registry: 190-260 ms of the loop at this size)."""
    store = MemoryRecordStore(partitions=1)
    rt = make_runtime(store)
    await rt.start()
    wanted = [NewTopic(name=f"t-{i:06d}", num_partitions=3) for i in range(N)]
    created = await rt.apply_topic_snapshot(wanted)
    assert len(created.created) == N and len(rt.registry.topics) == N
    batches = len(store.batch_sizes)
    snapshot = CountedSnapshot(wanted)
    executed: list[int] = []
    run = rt.driver._run  # every command runs through it

    def counted(index: int, *args: Any, **kw: Any) -> Any:
        executed.append(index)
        return run(index, *args, **kw)

    rt.driver._run = counted  # type: ignore[method-assign]
    changes = await rt.apply_topic_snapshot(snapshot)
    assert changes == SnapshotChanges(created=[], updated=[], deleted=[])
    assert snapshot.read_on_loop == 0
    assert executed == [] and store.batch_sizes[batches:] == []
    await rt.close()


async def test_a_changed_snapshot_applied_in_steps_writes_what_one_step_wrote(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Deletions, a re-creation (new id), an update, creations with the broker's ids and with
    minted ones, a topic kept: applied two changes a step, the registry, the changes answered,
    the offsets removed and the cluster log's records (their order) are those of the same
    refresh applied in one step; each part is a write of its own (its topic records, and the
    offsets of the topics it deletes), each in a loop step of its own. Before, the whole
    refresh was one command: one write, one step."""
    A, B, C, D = (
        "AAAAAAAAAAAAAAAAAAAAQQ",
        "BBBBBBBBBBBBBBBBBBBBQQ",
        "CCCCCCCCCCCCCCCCCCCCQQ",
        "DDDDDDDDDDDDDDDDDDDDQQ",
    )
    E, F = "EEEEEEEEEEEEEEEEEEEEQQ", "FFFFFFFFFFFFFFFFFFFFQQ"
    first = topics(("a", 1, A), ("b", 2, B), ("c", 1, C), ("d", 1, D), ("e", 1, E))
    second = topics(("a", 1, A), ("c", 1, F), ("d", 4, D), ("f", 2, None), ("g", 1, None))

    async def refresh(step: int) -> tuple[Any, ...]:
        monkeypatch.setattr(runtime_module, "SNAPSHOT_STEP", step, raising=False)
        store = MemoryRecordStore(partitions=1)
        rt = make_runtime(store)
        await rt.start()
        await rt.apply_topic_snapshot(first)
        await rt.offset_commit(commit("g1", {("b", 0): 5, ("c", 0): 6, ("a", 0): 7}))
        batches = len(store.batch_sizes)
        parts: list[int] = []
        apply_plan = rt.registry.apply_plan

        def part(*args: Any) -> Any:
            parts.append(steps.now)
            return apply_plan(*args)

        rt.registry.apply_plan = part  # type: ignore[method-assign]
        with LoopSteps() as steps:
            changes = await rt.apply_topic_snapshot(second, keep=["e"])
        state = (
            changes,
            rt.snapshot()["topics"],
            stored_offsets(store),
            cluster_records(store),
        )
        sizes = store.batch_sizes[batches:]
        await rt.close()
        return state, sizes, len(set(parts))

    whole, whole_sizes, whole_steps = await refresh(1000)
    stepped, sizes, loop_steps = await refresh(2)
    assert stepped == whole
    changes, listed, offsets, _records = stepped
    assert changes == SnapshotChanges(
        created=[
            TopicResult(name="c", topic_id=F, num_partitions=1),
            TopicResult(name="f", topic_id="AAAAAAAAAAAAAAAAAAAAAQ", num_partitions=2),
            TopicResult(name="g", topic_id="AAAAAAAAAAAAAAAAAAAAAg", num_partitions=1),
        ],
        updated=[TopicResult(name="d", topic_id=D, num_partitions=4)],
        deleted=[
            TopicResult(name="b", topic_id=B, num_partitions=2),
            TopicResult(name="c", topic_id=C, num_partitions=1),
        ],
    )
    assert listed == [
        ("a", A, 1),
        ("c", F, 1),
        ("d", D, 4),
        ("e", E, 1),
        ("f", "AAAAAAAAAAAAAAAAAAAAAQ", 2),
        ("g", "AAAAAAAAAAAAAAAAAAAAAg", 1),
    ]
    assert offsets == {("g1", "a", 0): 7}
    # Tombstones b, c (and the offsets of b and c), then c anew, d; f, g.
    assert (whole_sizes, whole_steps) == ([6 + 2], 1)
    assert (sizes, loop_steps) == ([2 + 2, 2, 2], 3)


async def test_a_change_during_a_stepped_refresh_is_kept_and_the_rest_planned_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the first part of a refresh and the next, a command of this node creates h
    (as the broker has it) and x (which the broker lacks). The refresh plans the rest again
    against the registry with them: h is left as it is, x deleted, i created; the registry
    ends equal to the broker's topics, and the cluster log holds every change in the order
    it was applied: the first part (f, g), the command's (h, x), the rest (x's tombstone,
    i). Before, the refresh was one command: nothing came between."""
    monkeypatch.setattr(runtime_module, "SNAPSHOT_STEP", 2, raising=False)
    store = MemoryRecordStore(partitions=1)
    rt = make_runtime(store)
    await rt.start()
    H = "HHHHHHHHHHHHHHHHHHHHQQ"
    wanted = topics(("f", 1, None), ("g", 1, None), ("h", 1, H), ("i", 1, None))
    apply_part = rt._apply_plan_part
    parts = 0

    async def part(*args: Any) -> Any:
        nonlocal parts
        out = await apply_part(*args)
        parts += 1
        if parts == 1:
            created = await rt.create_topics(topics(("h", 1, H), ("x", 1, None)))
            assert [t.error_code for t in created] == [0, 0]
        return out

    rt._apply_plan_part = part  # type: ignore[method-assign]
    changes = await rt.apply_topic_snapshot(wanted)
    assert [t.name for t in changes.created] == ["f", "g", "i"]
    assert [t.name for t in changes.deleted] == ["x"]
    assert [name for name, _id, _n in rt.snapshot()["topics"]] == ["f", "g", "h", "i"]
    assert [(rec.key.name, rec.value is not None) for rec in cluster_records(store)] == [
        ("f", True),
        ("g", True),
        ("h", True),
        ("x", True),
        ("x", False),
        ("i", True),
    ]
    await asyncio.sleep(0)
    await rt.close()


async def test_a_change_while_a_refresh_is_planned_is_planned_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command creates x while the refresh is planned (off the loop) against the registry
    as it was, where the snapshot changes nothing: the refresh plans again against the
    registry with x and deletes it, as the broker has no x. Before, a refresh that found
    nothing to change returned even though the registry had changed meanwhile: x stayed."""
    store = MemoryRecordStore(partitions=1)
    rt = make_runtime(store)
    await rt.start()
    wanted = topics(("f", 1, None), ("g", 2, None))
    await rt.apply_topic_snapshot(wanted)
    plan = rt._plan_snapshot
    planned = 0

    async def planning(*args: Any) -> Any:
        nonlocal planned
        out = await plan(*args)
        planned += 1
        if planned == 1:
            created = await rt.create_topics(topics(("x", 1, None)))
            assert [t.error_code for t in created] == [0]
        return out

    rt._plan_snapshot = planning  # type: ignore[method-assign]
    changes = await rt.apply_topic_snapshot(wanted)
    assert (planned, [t.name for t in changes.deleted], changes.created) == (2, ["x"], [])
    assert [name for name, _id, _n in rt.snapshot()["topics"]] == ["f", "g"]
    await rt.close()
