"""Transactional offsets in the pure core (coordinator/core/transactions.py; Kafka's
OffsetMetadataManager and its tests): pending until the transaction ends, invisible to a plain
OffsetFetch, UNSTABLE_OFFSET_COMMIT to one that requires stable offsets, committed or dropped as
records, never over a later plain commit; the producer and the member validated; deletion,
expiry and topic deletion take the pending offsets along; replaying the records (a restart in
between) gives the same state."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core import records as r
from coordinator.core.commands import Pending, Result
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    ConcurrentTransactionsError,
    ErrorCode,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InvalidProducerEpochError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)
from coordinator.core.events import Event
from coordinator.core.offsets import (
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetFetchGroup,
    OffsetFetchTopic,
    PartitionResult,
    TxnOffsetCommit,
)
from coordinator.core.records import TransactionState as S
from coordinator.core.transactions import AddOffsetsToTxn, EndTxn, ProducerInitialized
from coordinator.harness import Harness

G = "grp"
T = "app-txn-1"
PID = 4000


@pytest.fixture
def h() -> Harness:
    h = Harness(config=GroupCoordinatorConfig(offsets_retention_minutes=10))
    h.create_topic("in", 2)
    h.create_topic("other", 1)
    return h


def txn_commit(
    h: Harness,
    offsets: dict[tuple[str, int], int],
    *,
    epoch: int = 0,
    pid: int = PID,
    generation: int = -1,
    member: str = "",
    group: str = G,
) -> Result[Any]:
    by_topic: dict[str, list[OffsetCommitPartition]] = {}
    for (topic, p), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(
            OffsetCommitPartition(partition_index=p, committed_offset=offset)
        )
    req = TxnOffsetCommit(
        transactional_id=T,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=generation,
        member_id=member,
        topics=tuple(OffsetCommitTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )
    return h.run(lambda s: s.txn_offset_commit(req, h.now_ms))


def end(
    h: Harness, state: S | None, commit: bool, *, epoch: int = 0, pid: int = PID
) -> Result[Any]:
    cmd = EndTxn(producer_id=pid, producer_epoch=epoch, commit=commit, state=state)
    return h.run(lambda s: s.end_transaction(cmd, h.now_ms))


def initialized(epoch: int) -> ProducerInitialized:
    return ProducerInitialized(transactional_id=T, producer_id=PID, producer_epoch=epoch)


def fetch(h: Harness, *partitions: int, stable: bool = False, topic: str = "in") -> list[Any]:
    got = h.shard.offset_fetch(
        OffsetFetchGroup(
            group_id=G,
            topics=(OffsetFetchTopic(name=topic, partition_indexes=partitions),),
            require_stable=stable,
        )
    )
    return [(p.committed_offset, p.error_code) for t in got.topics for p in t.partitions]


def txn(epoch: int = 0, state: S = S.ONGOING, at: int = 0) -> r.GroupTransactionValue:
    return r.GroupTransactionValue(
        transactional_id=T, producer_epoch=epoch, state=state, updated_ms=at
    )


def pending(offset: int, epoch: int = 0, at: int = 0) -> r.TxnOffsetCommitValue:
    return r.TxnOffsetCommitValue(
        offset=offset, leader_epoch=-1, metadata="", commit_timestamp_ms=at, producer_epoch=epoch
    )


def committed(offset: int, at: int = 0) -> r.OffsetCommitValue:
    return r.OffsetCommitValue(offset=offset, leader_epoch=-1, metadata="", commit_timestamp_ms=at)


def replays(h: Harness) -> None:
    assert h.replayed().snapshot() == h.shard.snapshot()
    fresh = Harness(config=h.config)
    for record in h.shard.records_of_state():
        fresh.shard.replay(record)
    assert fresh.shard.snapshot()["pending_offsets"] == h.shard.snapshot()["pending_offsets"]


def test_pending_until_commit_then_committed(h: Harness) -> None:
    h.commit(G, "", -1, {("in", 0): 3})  # committed before the transaction
    res = txn_commit(h, {("in", 0): 10, ("in", 1): 20})
    assert res.records == [
        r.group_transaction_record(G, PID, txn()),
        r.txn_offset_commit_record(G, "in", 0, PID, pending(10)),
        r.txn_offset_commit_record(G, "in", 1, PID, pending(20)),
    ]
    assert [p for t in res.response.topics for p in t.partitions] == [
        PartitionResult(partition_index=0),
        PartitionResult(partition_index=1),
    ]
    # Invisible to a plain fetch; UNSTABLE_OFFSET_COMMIT to one that requires stable offsets.
    assert fetch(h, 0, 1) == [(3, ErrorCode.NONE), (-1, ErrorCode.NONE)]
    assert fetch(h, 0, 1, stable=True) == [
        (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
        (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
    ]
    replays(h)
    h.now_ms = 50
    prepared = end(h, S.PREPARE_COMMIT, True)
    assert prepared.records == [
        r.group_transaction_record(G, PID, txn(state=S.PREPARE_COMMIT, at=50))
    ]
    assert prepared.response.groups == (G,)
    assert fetch(h, 0, stable=True) == [(-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)]
    replays(h)
    done = end(h, None, True)
    assert done.records == [
        r.offset_commit_record(G, "in", 0, committed(10)),
        r.offset_commit_record(G, "in", 1, committed(20)),
        r.txn_offset_commit_record(G, "in", 0, PID, None),
        r.txn_offset_commit_record(G, "in", 1, PID, None),
        r.group_transaction_record(G, PID, None),
    ]
    assert [e.event for e in done.events] == [Event.TRANSACTION_ENDED]
    assert done.events[0].fields["outcome"] == "committed (2 offsets)"
    assert fetch(h, 0, 1, stable=True) == [(10, ErrorCode.NONE), (20, ErrorCode.NONE)]
    replays(h)
    # The same end again (a retried EndTxn): nothing left to do.
    assert end(h, None, True).records == []


def test_an_abort_leaves_the_offsets_where_they_were(h: Harness) -> None:
    h.commit(G, "", -1, {("in", 0): 3})
    txn_commit(h, {("in", 0): 10})
    end(h, S.PREPARE_ABORT, False)
    done = end(h, None, False)
    assert done.records == [
        r.txn_offset_commit_record(G, "in", 0, PID, None),
        r.group_transaction_record(G, PID, None),
    ]
    assert fetch(h, 0, stable=True) == [(3, ErrorCode.NONE)]
    replays(h)


def test_a_later_plain_commit_wins_over_the_transaction(h: Harness) -> None:
    """Kafka keeps the most recent offset: a plain commit (a reset, say) after the
    transactional one is not overwritten when the transaction commits; an earlier one is."""
    txn_commit(h, {("in", 0): 10, ("in", 1): 20})
    h.commit(G, "", -1, {("in", 0): 99})
    replays(h)  # records_of_state keeps it superseded
    done = end(h, None, True)
    assert done.records[:1] == [r.offset_commit_record(G, "in", 1, committed(20))]
    assert fetch(h, 0, 1) == [(99, ErrorCode.NONE), (20, ErrorCode.NONE)]
    # Pending again after the plain commit: the transaction's offset is the newer one.
    txn_commit(h, {("in", 0): 100})
    end(h, None, True)
    assert fetch(h, 0) == [(100, ErrorCode.NONE)]
    replays(h)


def test_an_end_once_forwarded_is_not_replaced_by_the_other(h: Harness) -> None:
    """Once a commit was forwarded (PREPARE_COMMIT) the transaction coordinator may have
    committed — Kafka's moves PrepareCommit and CompleteCommit to nothing but a commit, and
    answers an abort INVALID_TXN_STATE — so an abort forwarded after it does not overwrite the
    record: only the answer to it decides (NONE: the commit never arrived, aborted). Likewise
    an abort once forwarded. What a restart or an InitProducerId sends again is the first end."""
    txn_commit(h, {("in", 0): 10})
    end(h, S.PREPARE_COMMIT, True)
    again = end(h, S.PREPARE_ABORT, False)
    assert again.records == [] and again.response.groups == (G,)
    assert h.shard.transactions()[0].state is S.PREPARE_COMMIT
    replays(h)
    # The abort answered NONE: the commit never reached the transaction coordinator.
    done = end(h, None, False)
    assert done.records == [
        r.txn_offset_commit_record(G, "in", 0, PID, None),
        r.group_transaction_record(G, PID, None),
    ]
    assert fetch(h, 0, stable=True) == [(-1, ErrorCode.NONE)]
    txn_commit(h, {("in", 0): 20})
    end(h, S.PREPARE_ABORT, False)
    assert end(h, S.PREPARE_COMMIT, True).records == []
    assert h.shard.transactions()[0].state is S.PREPARE_ABORT
    replays(h)


def test_the_most_recent_offset_wins_between_two_producers(h: Harness) -> None:
    """Kafka keeps the most recent offset by the position of its record in the log, the
    materialized one keeping its pending record's: two producers' transactions pending on one
    partition, the first written (10, producer A) committed first, then the later one (20,
    B) — B's is kept, being the newer; materializing A's does not make it newer than B's
    (its pending record is written again after it, so that the order stays in the log).
    Written the other way round, the later one (A's 30) stays."""
    a, b = PID, PID + 1
    txn_commit(h, {("in", 0): 10}, pid=a)
    txn_commit(h, {("in", 0): 20}, pid=b)
    done = end(h, None, True, pid=a)
    assert done.records == [
        r.offset_commit_record(G, "in", 0, committed(10)),
        r.txn_offset_commit_record(G, "in", 0, b, pending(20)),
        r.txn_offset_commit_record(G, "in", 0, a, None),
        r.group_transaction_record(G, a, None),
    ]
    assert fetch(h, 0) == [(10, ErrorCode.NONE)]
    assert fetch(h, 0, stable=True) == [(-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)]
    replays(h)
    end(h, None, True, pid=b)
    assert fetch(h, 0, stable=True) == [(20, ErrorCode.NONE)]
    replays(h)
    txn_commit(h, {("in", 0): 25}, pid=b)
    txn_commit(h, {("in", 0): 30}, pid=a)
    assert end(h, None, True, pid=a).records[:2] == [
        r.offset_commit_record(G, "in", 0, committed(30)),
        r.txn_offset_commit_record(G, "in", 0, a, None),
    ]
    end(h, None, True, pid=b)
    assert fetch(h, 0, stable=True) == [(30, ErrorCode.NONE)]
    replays(h)


def test_the_state_written_again_keeps_the_order_of_two_producers(h: Harness) -> None:
    """A snapshot of the state (``records_of_state``) writes pending offsets in the order they
    came: producer B's (older than a plain commit, superseded by it), the commit, then A's
    (newer than it) — each stays as it was."""
    a, b = PID, PID + 1
    txn_commit(h, {("in", 0): 10}, pid=b)
    h.commit(G, "", -1, {("in", 0): 11})
    txn_commit(h, {("in", 0): 12}, pid=a)
    replays(h)
    end(h, None, True, pid=b)
    end(h, None, True, pid=a)
    assert fetch(h, 0, stable=True) == [(12, ErrorCode.NONE)]


def test_an_answer_about_a_transaction_moves_only_that_one(h: Harness) -> None:
    """An outcome learned from the upstream about the transaction as it was seen (its state
    and update time: the periodic check, an EndTxn sent again) does not move the producer's
    next transaction of the same epoch (transaction version 1) begun meanwhile."""
    txn_commit(h, {("in", 0): 10})
    seen = (S.ONGOING, 0)
    end(h, S.PREPARE_COMMIT, True)
    h.now_ms = 30
    end(h, None, True)  # the producer's own EndTxn, through the listener
    txn_commit(h, {("in", 0): 20})  # the next transaction, same epoch
    late = EndTxn(producer_id=PID, producer_epoch=0, commit=True, seen=seen)
    res = h.run(lambda s: s.end_transaction(late, h.now_ms))
    assert res.records == [] and res.response.groups == ()
    assert fetch(h, 0, stable=True) == [(-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)]
    assert fetch(h, 0) == [(10, ErrorCode.NONE)]
    now = EndTxn(producer_id=PID, producer_epoch=0, commit=False, seen=(S.ONGOING, 30))
    assert h.run(lambda s: s.end_transaction(now, h.now_ms)).response.groups == (G,)
    assert fetch(h, 0, stable=True) == [(10, ErrorCode.NONE)]


def test_end_of_another_epoch_changes_nothing(h: Harness) -> None:
    txn_commit(h, {("in", 0): 10}, epoch=3)
    assert end(h, None, True, epoch=2).records == []
    assert end(h, None, True, epoch=2).response.groups == ()
    assert fetch(h, 0, stable=True) == [(-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)]


def test_producer_checks(h: Harness) -> None:
    txn_commit(h, {("in", 0): 10}, epoch=3)
    with pytest.raises(InvalidProducerEpochError):
        txn_commit(h, {("in", 0): 11}, epoch=2)
    end(h, S.PREPARE_COMMIT, True, epoch=3)
    with pytest.raises(ConcurrentTransactionsError) as err:
        txn_commit(h, {("in", 0): 12}, epoch=3)
    assert err.value.code == ErrorCode.CONCURRENT_TRANSACTIONS
    end(h, None, True, epoch=3)
    # The next transaction (same epoch with transaction version 1) goes through.
    txn_commit(h, {("in", 0): 13}, epoch=3)
    assert fetch(h, 0) == [(10, ErrorCode.NONE)]


def test_a_newer_epoch_finds_the_older_transaction_aborted(h: Harness) -> None:
    """An ongoing transaction never had an end forwarded, so it cannot have committed: when
    the producer comes back with a newer epoch (InitProducerId fenced it), its offsets go."""
    txn_commit(h, {("in", 0): 10, ("in", 1): 20}, epoch=3)
    res = txn_commit(h, {("in", 0): 30}, epoch=4)
    assert res.records == [
        r.txn_offset_commit_record(G, "in", 0, PID, None),
        r.txn_offset_commit_record(G, "in", 1, PID, None),
        r.group_transaction_record(G, PID, None),
        r.group_transaction_record(G, PID, txn(epoch=4)),
        r.txn_offset_commit_record(G, "in", 0, PID, pending(30, epoch=4)),
    ]
    assert fetch(h, 1, stable=True) == [(-1, ErrorCode.NONE)]
    replays(h)


def test_init_producer_id_aborts_ongoing_but_not_ending_transactions(h: Harness) -> None:
    txn_commit(h, {("in", 0): 10}, epoch=3)
    txn_commit(h, {("in", 1): 20}, epoch=0, pid=PID + 1)  # an earlier producer id of T
    res = h.run(lambda s: s.producer_initialized(initialized(4), h.now_ms))
    # Both transactions belong to transactional id T: the one of another producer id and the
    # one of an older epoch were aborted by the initialization.
    assert res.response.groups == (G, G)
    assert fetch(h, 0, 1, stable=True) == [(-1, ErrorCode.NONE), (-1, ErrorCode.NONE)]
    txn_commit(h, {("in", 0): 11}, epoch=4)
    end(h, S.PREPARE_COMMIT, True, epoch=4)
    res = h.run(lambda s: s.producer_initialized(initialized(5), h.now_ms))
    assert res.records == [] and res.response.groups == ()
    replays(h)


def test_a_zombies_commit_after_init_producer_id_is_refused_and_changes_nothing(
    h: Harness,
) -> None:
    """The InitProducerId that aborts the producer's ongoing transaction leaves its epoch
    behind in the group (``CompleteAbort`` at the epoch before the new one, as Kafka's abort
    marker at the bumped epoch leaves the producer's epoch in the offsets partition): the old
    producer's TxnOffsetCommit or AddOffsetsToTxn at an older epoch is refused
    INVALID_PRODUCER_EPOCH, nothing written, while the new epoch's transaction begins over
    it. The fence is no transaction: not listed, not ended by an EndTxn."""
    txn_commit(h, {("in", 0): 10}, epoch=3)
    res = h.run(lambda s: s.producer_initialized(initialized(4), h.now_ms))
    assert res.records == [
        r.txn_offset_commit_record(G, "in", 0, PID, None),
        r.group_transaction_record(G, PID, txn(epoch=3, state=S.COMPLETE_ABORT)),
    ]
    assert res.response.groups == (G,)
    assert h.shard.transactions() == []
    before = h.shard.snapshot()
    for epoch in (3, 2):
        with pytest.raises(InvalidProducerEpochError) as err:
            txn_commit(h, {("in", 0): 11}, epoch=epoch)
        assert err.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
        assert err.value.message == (
            f"Producer {PID} epoch {epoch} is fenced: transactional id {T} has a newer epoch "
            f"on group {G} (epochs up to 3 are refused)."
        )
        with pytest.raises(InvalidProducerEpochError):
            h.run(
                lambda s, e=epoch: s.add_offsets_to_txn(
                    AddOffsetsToTxn(
                        group_id=G, transactional_id=T, producer_id=PID, producer_epoch=e
                    ),
                    h.now_ms,
                )
            )
    # The zombie's EndTxn (forwarded, then answered fenced) moves nothing.
    assert end(h, S.PREPARE_COMMIT, True, epoch=3).records == []
    assert end(h, None, False, epoch=3).records == []
    assert h.shard.snapshot() == before
    assert fetch(h, 0, stable=True) == [(-1, ErrorCode.NONE)]
    replays(h)
    # A newer InitProducerId raises the fence to the epoch before its own.
    res = h.run(lambda s: s.producer_initialized(initialized(6), h.now_ms))
    assert res.records == [r.group_transaction_record(G, PID, txn(epoch=5, state=S.COMPLETE_ABORT))]
    assert res.response.groups == ()
    with pytest.raises(InvalidProducerEpochError):
        txn_commit(h, {("in", 0): 11}, epoch=5)
    # The new epoch's transaction begins over the fence.
    assert txn_commit(h, {("in", 0): 12}, epoch=6).records == [
        r.group_transaction_record(G, PID, txn(epoch=6)),
        r.txn_offset_commit_record(G, "in", 0, PID, pending(12, epoch=6)),
    ]
    with pytest.raises(InvalidProducerEpochError):
        txn_commit(h, {("in", 0): 11}, epoch=5)
    end(h, S.PREPARE_COMMIT, True, epoch=6)
    end(h, None, True, epoch=6)
    assert fetch(h, 0, stable=True) == [(12, ErrorCode.NONE)]
    replays(h)


def test_a_fence_outlives_its_group(h: Harness) -> None:
    """A fence is no group: one holding nothing else is not listed, not found by DeleteGroups
    or OffsetDelete, left alone by offset expiry; the deletion of a group with offsets keeps
    its fences — Kafka's producer state in the offsets partition outlives the group's records —
    so the zombie stays refused in the group created again."""
    txn_commit(h, {("in", 0): 10}, epoch=3)
    h.run(lambda s: s.producer_initialized(initialized(4), h.now_ms))
    assert not h.shard.offsets.txn.has_transactions(G)
    assert G not in h.shard.offsets.simple_groups()
    assert h.shard.list_groups() == []
    assert h.run(lambda s: s.delete_groups([G])).response == [
        (G, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {G} not found.")
    ]
    h.now_ms = 11 * 60_000
    assert h.expire_offsets().records == []
    h.commit(G, "", -1, {("in", 1): 5})
    res = h.run(lambda s: s.delete_groups([G]))
    assert res.response == [(G, ErrorCode.NONE, None)]
    assert res.records == [r.offset_commit_tombstone(G, "in", 1)]
    with pytest.raises(InvalidProducerEpochError):
        txn_commit(h, {("in", 0): 11}, epoch=3)
    replays(h)


def test_a_fence_expires_after_producer_id_expiration_ms() -> None:
    """In a group that stays (a committed offset), the fence goes with the periodic cleanup
    once ``producer.id.expiration.ms`` passed since the InitProducerId that wrote it (Kafka
    expires the producer's state in the partition after as long)."""
    h = Harness(
        config=GroupCoordinatorConfig(
            offsets_retention_minutes=10, producer_id_expiration_ms=60_000
        )
    )
    h.create_topic("in", 2)
    h.commit(G, "", -1, {("in", 1): 2})
    txn_commit(h, {("in", 0): 10}, epoch=3)
    h.now_ms = 1_000
    h.run(lambda s: s.producer_initialized(initialized(4), h.now_ms))
    h.now_ms = 60_999
    assert h.expire_offsets().records == []
    with pytest.raises(InvalidProducerEpochError):
        txn_commit(h, {("in", 0): 11}, epoch=3)
    h.now_ms = 61_000
    assert h.expire_offsets().records == [r.group_transaction_record(G, PID, None)]
    assert G in h.shard.offsets.simple_groups()
    replays(h)


def test_a_zombie_stays_refused_after_the_new_producers_transaction_ends(h: Harness) -> None:
    """Kafka refuses an epoch older than the last one it saw of the producer id for as long as
    it keeps the id's state: once the new producer's transaction ends, its end leaves a fence
    of the epochs before its own (CompleteCommit, or CompleteAbort for an abort), so the
    zombie's TxnOffsetCommit and AddOffsetsToTxn stay refused INVALID_PRODUCER_EPOCH, nothing
    written. (Before, the transaction's record was tombstoned and the zombie's commit accepted,
    pending.) The producer's next transaction at its epoch begins over the fence."""
    txn_commit(h, {("in", 0): 10}, epoch=3)
    h.run(lambda s: s.producer_initialized(initialized(4), h.now_ms))
    h.now_ms = 100
    txn_commit(h, {("in", 0): 20}, epoch=4)
    end(h, S.PREPARE_COMMIT, True, epoch=4)
    h.now_ms = 200
    done = end(h, None, True, epoch=4)
    assert done.records == [
        r.offset_commit_record(G, "in", 0, committed(20, at=100)),
        r.txn_offset_commit_record(G, "in", 0, PID, None),
        r.group_transaction_record(G, PID, txn(epoch=3, state=S.COMPLETE_COMMIT, at=200)),
    ]
    assert h.shard.transactions() == []
    before = h.shard.snapshot()
    for epoch in (3, 0):
        with pytest.raises(InvalidProducerEpochError) as err:
            txn_commit(h, {("in", 0): 11}, epoch=epoch)
        assert err.value.message == (
            f"Producer {PID} epoch {epoch} is fenced: transactional id {T} has a newer epoch "
            f"on group {G} (epochs up to 3 are refused)."
        )
        add = AddOffsetsToTxn(group_id=G, transactional_id=T, producer_id=PID, producer_epoch=epoch)
        with pytest.raises(InvalidProducerEpochError):
            h.run(lambda s, a=add: s.add_offsets_to_txn(a, h.now_ms))
    assert h.shard.snapshot() == before
    assert fetch(h, 0, stable=True) == [(20, ErrorCode.NONE)]
    replays(h)
    # The next transaction (epoch 4 again with transaction version 1), aborted this time.
    assert txn_commit(h, {("in", 0): 30}, epoch=4).records == [
        r.group_transaction_record(G, PID, txn(epoch=4, at=200)),
        r.txn_offset_commit_record(G, "in", 0, PID, pending(30, epoch=4, at=200)),
    ]
    h.now_ms = 300
    assert end(h, None, False, epoch=4).records == [
        r.txn_offset_commit_record(G, "in", 0, PID, None),
        r.group_transaction_record(G, PID, txn(epoch=3, state=S.COMPLETE_ABORT, at=300)),
    ]
    with pytest.raises(InvalidProducerEpochError):
        txn_commit(h, {("in", 0): 11}, epoch=3)
    assert fetch(h, 0, stable=True) == [(20, ErrorCode.NONE)]
    replays(h)


def test_the_epoch_is_checked_against_every_group_of_the_shard(h: Harness) -> None:
    """Kafka keeps one epoch per producer id in an offsets partition, whatever the group: the
    producer seen at epoch 5 in one group (an open transaction, then its fence) refuses epoch 4
    in another group of the shard; an epoch-0 transaction's end leaves nothing to refuse."""
    txn_commit(h, {("in", 0): 10}, epoch=5, group="other-group")
    with pytest.raises(InvalidProducerEpochError) as err:
        txn_commit(h, {("in", 0): 11}, epoch=4)
    assert err.value.message == (
        f"Producer {PID} epoch 4 is older than the epoch 5 of its transaction on group other-group."
    )
    end(h, None, True, epoch=5)
    with pytest.raises(InvalidProducerEpochError) as err:
        txn_commit(h, {("in", 0): 11}, epoch=4)
    assert err.value.message == (
        f"Producer {PID} epoch 4 is fenced: transactional id {T} has a newer epoch on group "
        "other-group (epochs up to 4 are refused)."
    )
    assert txn_commit(h, {("in", 0): 12}, epoch=5).response is not None
    other = PID + 1
    txn_commit(h, {("in", 1): 13}, pid=other)
    assert end(h, None, True, pid=other).records[-1] == r.group_transaction_record(G, other, None)
    replays(h)


def test_an_end_fence_expires_producer_id_expiration_ms_after_the_end() -> None:
    """The fence an ended transaction leaves goes ``producer.id.expiration.ms`` after the end
    (Kafka expires the producer id's state that long after its last record); then Kafka no
    longer knows the producer id's epoch in the partition, and neither does the group."""
    h = Harness(config=GroupCoordinatorConfig(producer_id_expiration_ms=60_000))
    h.create_topic("in", 2)
    txn_commit(h, {("in", 0): 10}, epoch=2)
    h.now_ms = 5_000
    end(h, None, True, epoch=2)
    h.now_ms = 64_999
    assert h.expire_offsets().records == []
    with pytest.raises(InvalidProducerEpochError):
        txn_commit(h, {("in", 0): 11}, epoch=1)
    h.now_ms = 65_000
    assert h.expire_offsets().records == [r.group_transaction_record(G, PID, None)]
    assert txn_commit(h, {("in", 0): 11}, epoch=1).response is not None
    replays(h)


def test_a_transaction_kept_by_init_producer_id_goes_on_under_the_new_epoch(h: Harness) -> None:
    """KIP-939: an InitProducerId with KeepPreparedTxn bumps the epoch but keeps the ongoing
    transaction (the answer's OngoingTxnProducerId/Epoch name it); its EndTxn comes with the
    new epoch. Its offsets stay pending and are committed by that EndTxn — not aborted as an
    InitProducerId's older ongoing transaction otherwise is."""
    txn_commit(h, {("in", 0): 10}, epoch=3)
    h.now_ms = 40
    kept = ProducerInitialized(transactional_id=T, producer_id=PID, producer_epoch=4, kept=(PID, 3))
    res = h.run(lambda s: s.producer_initialized(kept, h.now_ms))
    assert res.records == [r.group_transaction_record(G, PID, txn(epoch=4, at=40))]
    assert res.response.groups == ()
    assert fetch(h, 0, stable=True) == [(-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)]
    replays(h)
    end(h, S.PREPARE_COMMIT, True, epoch=4)
    assert end(h, None, True, epoch=4).records[:1] == [
        r.offset_commit_record(G, "in", 0, committed(10))
    ]
    assert fetch(h, 0, stable=True) == [(10, ErrorCode.NONE)]
    # Kept under another producer id (the old one's epochs ran out): the pending offsets move
    # to it, but one a later plain commit superseded (never to be materialized) is dropped.
    txn_commit(h, {("in", 0): 20, ("in", 1): 30}, epoch=5)
    h.commit(G, "", -1, {("in", 1): 31})
    other = PID + 7
    kept = ProducerInitialized(
        transactional_id=T, producer_id=other, producer_epoch=0, kept=(PID, 5)
    )
    res = h.run(lambda s: s.producer_initialized(kept, h.now_ms))
    assert res.records == [
        r.txn_offset_commit_record(G, "in", 0, PID, None),
        r.txn_offset_commit_record(G, "in", 0, other, pending(20, epoch=5, at=40)),
        r.txn_offset_commit_record(G, "in", 1, PID, None),
        r.group_transaction_record(G, PID, None),
        r.group_transaction_record(G, other, txn(epoch=0, at=40)),
    ]
    replays(h)
    end(h, S.PREPARE_COMMIT, True, epoch=0, pid=other)
    end(h, None, True, epoch=0, pid=other)
    assert fetch(h, 0, 1, stable=True) == [(20, ErrorCode.NONE), (31, ErrorCode.NONE)]
    # Without KeepPreparedTxn (or a transaction it did not keep), the ongoing one is aborted.
    txn_commit(h, {("in", 0): 40}, epoch=1, pid=other)
    init = ProducerInitialized(transactional_id=T, producer_id=other, producer_epoch=2, kept=None)
    assert h.run(lambda s: s.producer_initialized(init, h.now_ms)).response.groups == (G,)
    assert fetch(h, 0, stable=True) == [(20, ErrorCode.NONE)]
    replays(h)


def test_member_validation(h: Harness) -> None:
    """Kafka's validateTransactionalOffsetCommit: a missing group takes only generation -1
    (GROUP_ID_NOT_FOUND, KIP-1319's code; the service answers ILLEGAL_GENERATION before v6); a
    consumer group checks the member and its epoch (KIP-1251 included: an older epoch for
    partitions owned since then) when the commit names a member or a generation — one naming
    neither (TxnOffsetCommit before v3) is not checked against the members; an unknown member
    is UNKNOWN_MEMBER_ID."""
    with pytest.raises(GroupIdNotFoundError):  # ILLEGAL_GENERATION before v6 (the service's)
        txn_commit(h, {("in", 0): 1}, generation=2, member="m", group="nobody")
    h.join("A", ["in"])  # epoch 1, in-0 and in-1
    h.create_topic("more", 1)
    h.heartbeat(member_id="A", member_epoch=1, subscribed_topic_names=("in", "more"))  # 2
    assert txn_commit(h, {("in", 0): 1}).response is not None  # no member, generation -1
    with pytest.raises(UnknownMemberIdError):
        txn_commit(h, {("in", 0): 1}, generation=2)
    with pytest.raises(UnknownMemberIdError):
        txn_commit(h, {("in", 0): 1}, member="B")
    assert txn_commit(h, {("in", 0): 1}, generation=1, member="A").response is not None
    with pytest.raises(StaleMemberEpochError):
        txn_commit(h, {("more", 0): 1}, generation=1, member="A")
    with pytest.raises(StaleMemberEpochError):
        txn_commit(h, {("in", 0): 1}, generation=3, member="A")


def test_member_validation_in_a_classic_group(h: Harness) -> None:
    """Kafka's ClassicGroup.validateOffsetCommit with isTransactional: a commit with no member,
    no instance and generation -1 is accepted by a group with members when transactional (a
    plain one is UNKNOWN_MEMBER_ID); a named member is checked with its generation; an empty
    group takes generation -1 whatever member id it names."""
    first = h.join_group(group_id=G, topics=["in"])
    member = first.member_id
    assert isinstance(h.join_group(member, group_id=G, topics=["in"]), Pending)
    h.sleep(3_000)  # the initial rebalance delay: generation 1, waiting for the leader's sync
    with pytest.raises(UnknownMemberIdError):
        h.commit(G, "", -1, {("in", 0): 1})  # plain, no member
    assert txn_commit(h, {("in", 0): 2}).response is not None
    with pytest.raises(IllegalGenerationError):
        txn_commit(h, {("in", 0): 3}, generation=2, member=member)
    with pytest.raises(UnknownMemberIdError):
        txn_commit(h, {("in", 0): 3}, generation=1, member="someone")
    assert txn_commit(h, {("in", 0): 3}, generation=1, member=member).response is not None
    h.leave_group(member, group_id=G)
    assert txn_commit(h, {("in", 0): 4}, member="gone").response is not None  # empty group


def test_deleting_the_group_the_partition_or_the_topic_drops_pending_offsets(h: Harness) -> None:
    txn_commit(h, {("in", 0): 10, ("in", 1): 20, ("other", 0): 5})
    res = h.run(lambda s: s.offset_delete(G, [("in", [1])]))
    assert res.records == [r.txn_offset_commit_record(G, "in", 1, PID, None)]
    res = h.run(lambda s: s.on_topics_deleted(["other"]))
    assert res.records == [r.txn_offset_commit_record(G, "other", 0, PID, None)]
    assert [g.group_id for g in h.shard.list_groups()] == [G]  # known through its transaction
    res = h.run(lambda s: s.delete_groups([G]))
    assert res.response == [(G, ErrorCode.NONE, None)]
    assert res.records[:2] == [
        r.txn_offset_commit_record(G, "in", 0, PID, None),
        r.group_transaction_record(G, PID, None),
    ]
    assert h.shard.snapshot()["pending_offsets"] == {} and h.shard.transactions() == []
    assert end(h, None, True).records == []  # its end finds nothing


def test_expiry_keeps_partitions_with_pending_offsets_and_the_group(h: Harness) -> None:
    h.commit(G, "", -1, {("in", 0): 1, ("in", 1): 2})
    txn_commit(h, {("in", 0): 10})
    h.now_ms = 11 * 60_000
    res = h.expire_offsets()
    assert res.records == [r.offset_commit_tombstone(G, "in", 1)]  # in-0 is held
    assert G in h.shard.offsets
    end(h, None, False)
    h.now_ms = 12 * 60_000
    res = h.expire_offsets()
    assert r.offset_commit_tombstone(G, "in", 0) in res.records
    assert G not in h.shard.offsets.simple_groups()
