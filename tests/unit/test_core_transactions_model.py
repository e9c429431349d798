"""Property: transactional offsets follow Kafka's rules under any interleaving
(coordinator/core/transactions.py; Kafka's OffsetMetadataManager).

Hypothesis drives one group through random streams of TxnOffsetCommits of three producers (each
its own transactional id; some from an older epoch: a zombie), plain commits, EndTxn forwarded (prepare) and answered (commit or
abort), InitProducerIds, OffsetDeletes and the group's deletion. A small model keeps what
Kafka keeps: pending offsets per producer and committed offsets, each dated by the position of
its record in the log (a committed transaction's offset by its pending record), the most recent
winning when a transaction commits; a tombstone drops the partition's pending offsets too; an
InitProducerId aborts its producer's ongoing transaction; an epoch older than the last one the
group saw of the producer id (its transaction's, an InitProducerId's, an ended transaction's)
is refused INVALID_PRODUCER_EPOCH, also after the group's deletion. After every step both fetches (plain
and require_stable) must answer what the model says, and so must a shard rebuilt from the
emitted records and one rebuilt from ``records_of_state``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    ConcurrentTransactionsError,
    ErrorCode,
    GroupIdNotFoundError,
    InvalidProducerEpochError,
)
from coordinator.core.offsets import (
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetFetchGroup,
    OffsetFetchTopic,
    TxnOffsetCommit,
)
from coordinator.core.records import TransactionState as S
from coordinator.core.transactions import EndTxn, ProducerInitialized
from coordinator.harness import Harness

G = "grp"
PIDS = [100, 200, 300]
PARTITIONS = [0, 1]

offsets = st.dictionaries(
    st.sampled_from(PARTITIONS), st.integers(min_value=0, max_value=999), min_size=1
)
op = st.one_of(
    st.tuples(st.just("txn"), st.sampled_from(PIDS), offsets, st.sampled_from([0, 0, 1, 2])),
    st.tuples(st.just("plain"), offsets),
    st.tuples(st.just("prepare"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("complete"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("init"), st.sampled_from(PIDS)),
    st.tuples(st.just("delete"), st.sampled_from(PARTITIONS)),
    st.tuples(
        st.just("delete_group"),
    ),
)


@dataclass
class Model:
    seq: int = 0
    committed: dict[int, tuple[int, int]] = field(default_factory=dict)  # p -> (offset, seq)
    pending: dict[int, dict[int, tuple[int, int]]] = field(default_factory=dict)
    txns: dict[int, tuple[int, str]] = field(default_factory=dict)  # pid -> (epoch, state)
    epochs: dict[int, int] = field(default_factory=lambda: dict.fromkeys(PIDS, 0))
    fenced: dict[int, int] = field(default_factory=dict)  # pid -> newest epoch refused

    def refused(self, pid: int, epoch: int) -> bool:
        txn = self.txns.get(pid)
        return epoch <= self.fenced.get(pid, -1) or (txn is not None and epoch < txn[0])

    def next(self) -> int:
        self.seq += 1
        return self.seq

    def drop(self, pid: int) -> None:
        self.pending.pop(pid, None)
        self.txns.pop(pid, None)

    def known(self) -> bool:
        return bool(self.committed or self.txns or any(self.pending.values()))

    def fetched(self, stable: bool) -> list[tuple[int, ErrorCode]]:
        out = []
        for p in PARTITIONS:
            if stable and any(p in offsets for offsets in self.pending.values()):
                out.append((-1, ErrorCode.UNSTABLE_OFFSET_COMMIT))
            else:
                out.append((self.committed[p][0] if p in self.committed else -1, ErrorCode.NONE))
        return out


def fetch(shard: Any, stable: bool) -> list[tuple[int, ErrorCode]]:
    got = shard.offset_fetch(
        OffsetFetchGroup(
            group_id=G,
            topics=(OffsetFetchTopic(name="in", partition_indexes=tuple(PARTITIONS)),),
            require_stable=stable,
        )
    )
    return [(p.committed_offset, p.error_code) for t in got.topics for p in t.partitions]


def step(h: Harness, m: Model, o: tuple[Any, ...]) -> None:
    kind = o[0]
    if kind == "txn":
        _, pid, offsets, lag = o
        epoch = m.epochs[pid] - lag
        if epoch < 0:
            return
        txn = m.txns.get(pid)
        req = TxnOffsetCommit(
            transactional_id=f"t{pid}",
            group_id=G,
            producer_id=pid,
            producer_epoch=epoch,
            topics=(
                OffsetCommitTopic(
                    name="in",
                    partitions=tuple(
                        OffsetCommitPartition(partition_index=p, committed_offset=offset)
                        for p, offset in sorted(offsets.items())
                    ),
                ),
            ),
        )
        if m.refused(pid, epoch):
            before = h.shard.snapshot()
            try:
                h.run(lambda s: s.txn_offset_commit(req, h.now_ms))
            except InvalidProducerEpochError:
                assert h.shard.snapshot() == before
                return
            raise AssertionError("a zombie's commit was accepted")
        if txn is not None and txn[0] == epoch and txn[1] != "ongoing":
            try:
                h.run(lambda s: s.txn_offset_commit(req, h.now_ms))
            except ConcurrentTransactionsError:
                return
            raise AssertionError("a commit into an ending transaction was accepted")
        h.run(lambda s: s.txn_offset_commit(req, h.now_ms))
        if txn is not None and txn[0] < epoch:
            m.drop(pid)
        m.fenced.pop(pid, None)  # the transaction's record replaces the fence
        m.txns[pid] = (epoch, "ongoing")
        for p, offset in sorted(offsets.items()):
            m.pending.setdefault(pid, {})[p] = (offset, m.next())
    elif kind == "plain":
        h.commit(G, "", -1, {("in", p): offset for p, offset in offsets_of(o[1])})
        for p, offset in offsets_of(o[1]):
            m.committed[p] = (offset, m.next())
    elif kind == "prepare":
        _, pid, commit = o
        state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        cmd = EndTxn(producer_id=pid, producer_epoch=m.epochs[pid], commit=commit, state=state)
        h.run(lambda s: s.end_transaction(cmd, h.now_ms))
        txn = m.txns.get(pid)
        if txn is not None and txn[0] == m.epochs[pid] and txn[1] == "ongoing":
            m.txns[pid] = (txn[0], "commit" if commit else "abort")
    elif kind == "complete":
        _, pid, commit = o
        cmd = EndTxn(producer_id=pid, producer_epoch=m.epochs[pid], commit=commit)
        h.run(lambda s: s.end_transaction(cmd, h.now_ms))
        txn = m.txns.get(pid)
        if txn is not None and txn[0] == m.epochs[pid]:
            if commit:
                for p, (offset, seq) in sorted(m.pending.get(pid, {}).items()):
                    if p not in m.committed or seq > m.committed[p][1]:
                        m.committed[p] = (offset, seq)
            m.drop(pid)
            if txn[0] > 0:
                m.fenced[pid] = txn[0] - 1
    elif kind == "init":
        _, pid = o
        m.epochs[pid] += 1
        cmd = ProducerInitialized(
            transactional_id=f"t{pid}", producer_id=pid, producer_epoch=m.epochs[pid]
        )
        h.run(lambda s: s.producer_initialized(cmd, h.now_ms))
        txn = m.txns.get(pid)
        if txn is not None and txn[1] == "ongoing":
            m.drop(pid)
            m.fenced[pid] = m.epochs[pid] - 1
        elif txn is None and pid in m.fenced:
            m.fenced[pid] = m.epochs[pid] - 1
    elif kind == "delete":
        _, p = o
        try:
            h.run(lambda s: s.offset_delete(G, [("in", [p])]))
        except GroupIdNotFoundError:
            assert not m.known(), m  # a group with offsets or transactions is found
        m.committed.pop(p, None)
        for offsets in m.pending.values():
            offsets.pop(p, None)
    else:
        answer = h.run(lambda s: s.delete_groups([G])).response
        assert m.known() or answer == [(G, ErrorCode.GROUP_ID_NOT_FOUND, answer[0][2])], answer
        assert not m.known() or answer == [(G, ErrorCode.NONE, None)], answer
        m.committed.clear()
        m.pending.clear()
        m.txns.clear()  # the fences stay


def offsets_of(offsets: dict[int, int]) -> list[tuple[int, int]]:
    return sorted(offsets.items())


ZOMBIE_AFTER_THE_END = [
    ("init", 100),
    ("txn", 100, {0: 1}, 0),
    ("complete", 100, True),
    ("txn", 100, {0: 2}, 1),  # the zombie of epoch 0: refused
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=25))
@example(ZOMBIE_AFTER_THE_END)
@example([*ZOMBIE_AFTER_THE_END[:3], ("delete_group",), ZOMBIE_AFTER_THE_END[3]])
def test_transactional_offsets_follow_kafka(ops: list[tuple[Any, ...]]) -> None:
    h = Harness(config=GroupCoordinatorConfig())
    h.create_topic("in", len(PARTITIONS))
    m = Model()
    for o in ops:
        step(h, m, o)
        for stable in (False, True):
            assert fetch(h.shard, stable) == m.fetched(stable), (o, stable)
        replayed = h.replayed()
        assert replayed.snapshot() == h.shard.snapshot(), o
        from_log, from_state = rebuilt(h, h.log), rebuilt(h, h.shard.records_of_state())
        for stable in (False, True):
            assert fetch(from_state.shard, stable) == m.fetched(stable), ("state", o, stable)
        # What the state says is what it will commit: every open transaction committed gives
        # the same offsets, rebuilt from the log or from the state.
        assert commit_all(from_log) == commit_all(from_state), o


def rebuilt(h: Harness, records: Any) -> Harness:
    fresh = Harness(config=h.config)
    fresh.create_topic("in", len(PARTITIONS))
    for record in list(records):
        fresh.shard.replay(record)
    return fresh


def commit_all(h: Harness) -> list[tuple[int, ErrorCode]]:
    for t in h.shard.transactions():
        cmd = EndTxn(producer_id=t.producer_id, producer_epoch=t.producer_epoch, commit=True)
        h.run(lambda s, c=cmd: s.end_transaction(c, h.now_ms))
    return fetch(h.shard, True)
