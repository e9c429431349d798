"""The registry following a broker's metadata (``TopicRegistry.apply_snapshot`` and
``CoordinatorRuntime.apply_topic_snapshot``): ordinary topic records, deletions and
re-creations (new ids) with their offsets, refused inconsistent snapshots, replay."""

from __future__ import annotations

import pytest
from test_runtime_core import make_runtime
from test_runtime_offsets import commit, join, stored_offsets

from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeat, SequentialIds
from coordinator.core.errors import InvalidRequestError
from coordinator.core.topics import NewTopic, SnapshotChanges, TopicRegistry, TopicResult
from coordinator.runtime.store import MemoryRecordStore

A = "vUoHcKbRQRu-E0ATTUX9fA"
B = "AZ8tH7l0eOKkpz2Ft8yVnw"
C = "AZ8tH7l0eOKkpz2Ft8yVoA"
MINTED = "AAAAAAAAAAAAAAAAAAAAAQ"  # SequentialIds' first topic id


def snap(*topics: tuple[str, int, str | None]) -> list[NewTopic]:
    return [NewTopic(name=n, num_partitions=p, topic_id=i) for n, p, i in topics]


def res(name: str, topic_id: str, partitions: int) -> TopicResult:
    return TopicResult(name=name, topic_id=topic_id, num_partitions=partitions)


def test_a_snapshot_creates_updates_deletes_and_recreates_with_ordinary_records() -> None:
    reg = TopicRegistry(SequentialIds())
    first = reg.apply_snapshot(snap(("orders", 3, A), ("audit", 1, B)))
    assert first.response == SnapshotChanges(
        created=[res("audit", B, 1), res("orders", A, 3)], updated=[], deleted=[]
    )
    assert first.records == [r.topic_record("audit", B, 1), r.topic_record("orders", A, 3)]

    # orders grew, audit was re-created (new id), logs appeared, nothing else listed.
    second = reg.apply_snapshot(snap(("orders", 6, A), ("audit", 1, C), ("logs", 2, None)))
    assert second.response == SnapshotChanges(
        created=[res("audit", C, 1), res("logs", MINTED, 2)],
        updated=[res("orders", A, 6)],
        deleted=[res("audit", B, 1)],
    )
    assert second.records == [
        r.topic_record("audit", None),
        r.topic_record("audit", C, 1),
        r.topic_record("logs", MINTED, 2),
        r.topic_record("orders", A, 6),
    ]
    assert second.response.deleted_names == ["audit"]

    # The same snapshot again writes nothing; a topic the broker dropped is deleted.
    assert (
        reg.apply_snapshot(snap(("orders", 6, A), ("audit", 1, C), ("logs", 2, None))).records == []
    )
    third = reg.apply_snapshot(snap(("orders", 6, A), ("logs", 2, None)))
    assert third.records == [r.topic_record("audit", None)]
    assert reg.list_topics() == [res("logs", MINTED, 2), res("orders", A, 6)]

    # Replaying every record rebuilds the same registry.
    again = TopicRegistry(SequentialIds())
    for rec in first.records + second.records + third.records:
        again.replay(rec)
    assert again.list_topics() == reg.list_topics()


def test_new_replica_racks_are_an_update_and_the_same_racks_write_nothing() -> None:
    reg = TopicRegistry(SequentialIds())
    racks = {0: frozenset({"a"}), 1: frozenset({"b", "c"})}
    first = reg.apply_snapshot([NewTopic(name="t", num_partitions=2, topic_id=A)])
    assert first.records == [r.topic_record("t", A, 2)]
    moved = reg.apply_snapshot(
        [NewTopic(name="t", num_partitions=2, topic_id=A, partition_racks=racks)]
    )
    assert moved.records == [r.topic_record("t", A, 2, racks)]
    assert moved.response == SnapshotChanges(
        created=[],
        updated=[TopicResult(name="t", topic_id=A, num_partitions=2, partition_racks=racks)],
        deleted=[],
    )
    same = {0: frozenset({"a"}), 1: frozenset({"c", "b"})}  # equal, built anew
    assert (
        reg.apply_snapshot(
            [NewTopic(name="t", num_partitions=2, topic_id=A, partition_racks=same)]
        ).records
        == []
    )
    # Racks gone (the broker no longer says): an update too.
    assert reg.apply_snapshot([NewTopic(name="t", num_partitions=2, topic_id=A)]).records == [
        r.topic_record("t", A, 2)
    ]


def test_kept_topics_are_left_alone_and_names_come_from_the_broker_as_they_are() -> None:
    reg = TopicRegistry(SequentialIds())
    reg.apply_snapshot(snap(("a", 1, A), ("b", 2, B)))
    # b is listed with an error this time: neither deleted nor changed.
    out = reg.apply_snapshot(snap(("a", 1, A), ("odd name!", 1, C)), keep=["b"])
    assert out.records == [r.topic_record("odd name!", C, 1)]
    assert [t.name for t in reg.list_topics()] == ["a", "b", "odd name!"]


@pytest.mark.parametrize(
    "topics,keep,message",
    [
        (snap(("a", 1, A), ("a", 2, B)), (), "Topic a appears twice in the snapshot."),
        (snap(("a", 1, A)), ("a",), "Topic a appears twice in the snapshot."),
        (snap(("a", 0, A)), (), "Topic a has 0 partitions in the snapshot."),
        (
            snap(("a", 1, A), ("b", 1, A)),
            (),
            f"Topic id {A} of b is reserved or used twice in the snapshot.",
        ),
        (snap(("z", 1, A)), ("held",), f"Topic id {A} of z is still held by topic held."),
    ],
)
def test_an_inconsistent_snapshot_is_refused_whole(
    topics: list[NewTopic], keep: tuple[str, ...], message: str
) -> None:
    reg = TopicRegistry(SequentialIds())
    reg.apply_snapshot(snap(("held", 1, A)))
    before = reg.list_topics()
    with pytest.raises(InvalidRequestError) as exc:
        reg.apply_snapshot(topics, keep)
    assert exc.value.message == message
    assert reg.list_topics() == before


async def test_the_runtime_follows_a_recreated_topic_and_drops_its_offsets() -> None:
    store = MemoryRecordStore(partitions=2)
    rt = make_runtime(store)
    await rt.start()
    await rt.apply_topic_snapshot(snap(("t", 2, A), ("keep", 1, B)))
    first = await rt.heartbeat(join("g", ("t",), "m1"))
    assert first.assignment is not None and first.assignment.assigned == {A: frozenset({0, 1})}
    await rt.offset_commit(commit("g", {("t", 0): 5, ("keep", 0): 7}, first.member_epoch, "m1"))
    await rt.offset_commit(commit("h", {("t", 1): 9}))
    batches = len(store.batch_sizes)

    changes = await rt.apply_topic_snapshot(snap(("t", 3, C), ("keep", 1, B)))
    assert changes == SnapshotChanges(
        created=[res("t", C, 3)], updated=[], deleted=[res("t", A, 2)]
    )
    # The topic records and both groups' offset tombstones: one durable batch.
    assert store.batch_sizes[batches:] == [2 + 2]
    assert stored_offsets(store) == {("g", "keep", 0): 7}
    assert rt.topic_name(C) == "t" and rt.topic_name(A) == ""

    # The member gives up the old topic's partitions, then gets the new topic id's.
    def beat(epoch: int, owned: dict[str, frozenset[int]]) -> ConsumerGroupHeartbeat:
        return ConsumerGroupHeartbeat(
            group_id="g", member_id="m1", member_epoch=epoch, topic_partitions=owned
        )

    revoke = await rt.heartbeat(beat(first.member_epoch, {A: frozenset({0, 1})}))
    assert revoke.member_epoch == first.member_epoch and revoke.assignment is not None
    assert (revoke.assignment.assigned, revoke.assignment.pending) == (
        {},
        {C: frozenset({0, 1, 2})},
    )
    moved = await rt.heartbeat(beat(revoke.member_epoch, {}))
    assert moved.member_epoch == first.member_epoch + 1 and moved.assignment is not None
    assert (moved.assignment.assigned, moved.assignment.pending) == ({C: frozenset({0, 1, 2})}, {})
    await rt.close()

    reopened = make_runtime(store.reopen())
    await reopened.start()
    assert await reopened.list_topics() == [res("keep", B, 1), res("t", C, 3)]
    await reopened.close()
