"""Transactional offsets (Kafka's OffsetMetadataManager, its pending part): a component of the
shard.

A producer's transaction commits its input offsets with TxnOffsetCommit; they stay *pending* —
invisible to OffsetFetch, answered UNSTABLE_OFFSET_COMMIT to a fetch that requires stable offsets
— until the transaction ends. Kafka learns the outcome from the transaction coordinator's marker
in its own log; here the transaction coordinator is the upstream broker's, reached through the
Kafka listener, which tells this component what it saw (docs/kafka.md, "Transactions"):

* ``add_offsets`` (AddOffsetsToTxn) and ``txn_offset_commit`` open the group's transaction
  record (``GroupTransaction``: transactional id, producer epoch, state);
* ``end_transaction`` in two steps around the EndTxn the listener forwards: *prepare* (the
  record says PREPARE_COMMIT or PREPARE_ABORT: an end may have reached the transaction
  coordinator; the first end forwarded stays recorded, as the other one forwarded after it
  cannot undo what the first may have done), then *complete* once it answered: a commit turns
  each pending offset into an ordinary OffsetCommit record — unless a plain commit of that
  partition came after it (Kafka keeps the most recent, by log offset) — an abort drops them;
  either way the pending records are tombstoned and the transaction record too (or a
  fence written over it, below), in one batch;
* ``producer_initialized`` (an InitProducerId answered for a transactional id): an ongoing
  transaction of an older epoch (or another producer id) of that id was aborted by it — it
  never had an end forwarded, so it cannot have committed — unless the request asked to keep
  it (KIP-939's KeepPreparedTxn) and the answer names it as kept: that one goes on under the
  new producer id and epoch, with which its EndTxn will come. The aborted one's record stays
  as a *fence* (``COMPLETE_ABORT`` at the epoch before the new one; for another producer id,
  at the aborted epoch), as Kafka's abort marker leaves the bumped epoch in the offsets
  partition: the old producer (a zombie) committing at a fenced epoch is refused
  INVALID_PRODUCER_EPOCH at once, nothing written;
* a transaction that ends (its EndTxn answered, or settled by the upstream) leaves a fence
  too, of the epochs before its own (``COMPLETE_COMMIT`` or ``COMPLETE_ABORT``; none at epoch
  0), as Kafka's marker leaves the producer's epoch in the offsets partition: a zombie of an
  older epoch stays refused once the new producer's transaction is over;
* a TxnOffsetCommit or AddOffsetsToTxn of a newer epoch of the same producer id finds the older
  ongoing transaction aborted for the same reason.

The producer's epoch is checked against every record of its producer id in the shard (Kafka
keeps one epoch per producer id in an offsets partition, whatever the group): a TxnOffsetCommit
or AddOffsetsToTxn of an epoch older than an open transaction's or of one a fence covers is
refused INVALID_PRODUCER_EPOCH. A fence is no transaction (not listed, not ended by an EndTxn,
no reason to keep or list its group, and it outlives the group's deletion, as Kafka's producer
state outlives the group's records); the producer's next transaction in the group replaces it,
a later InitProducerId raises it, and the periodic cleanup drops it ``producer.id.expiration.ms``
after it was written (Kafka expires a producer id's state in a partition as long after its last
record, its transaction ended).

Pending offsets of a partition are dropped with it: OffsetDelete, the group's deletion, its
topic's deletion. Offset expiry leaves a partition with pending offsets alone, and a group with
open transactions is not deleted by it (Kafka).

Records: ``TxnOffsetCommit`` (group, topic, partition, producer id) and ``GroupTransaction``
(group, producer id), this coordinator's own types (Kafka writes OffsetCommit records in the
producer's transaction instead). Whether a pending offset was superseded by a later plain
commit follows from the order of the records, as in Kafka. A committed transaction's offset
keeps the age of its pending record, as Kafka's keeps the record's log offset: another
producer's offset of the partition pending since then is newer, and is written again after
the materialized one so that the log says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from . import records as r
from .commands import Result
from .context import ShardContext
from .errors import ConcurrentTransactionsError, ErrorCode, InvalidProducerEpochError
from .events import Event, LogEvent

S = r.TransactionState
FENCES = frozenset({S.COMPLETE_ABORT, S.COMPLETE_COMMIT})
"""The states of a record that is no transaction, only a fence of older epochs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AddOffsetsToTxn:
    """AddOffsetsToTxn, answered by the transaction coordinator: the group takes part."""

    group_id: str
    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxn:
    """An EndTxn of this producer and epoch: forwarded (``state`` PREPARE_COMMIT or
    PREPARE_ABORT) or answered by the transaction coordinator (``state`` None; ``commit``)."""

    producer_id: int
    producer_epoch: int
    commit: bool
    state: r.TransactionState | None = None
    seen: tuple[r.TransactionState, int] | None = None
    """The state and update time of the transaction as the caller saw it before asking the
    upstream (a restart's or InitProducerId's EndTxn sent again, the periodic check): only a
    transaction still so is moved — with transaction version 1 the producer's next transaction
    has the same epoch, and may have begun while the answer was on its way."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerInitialized:
    """An InitProducerId for ``transactional_id`` answered with this producer id and epoch."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    kept: tuple[int, int] | None = None
    """KIP-939 (InitProducerId v6 with KeepPreparedTxn): the producer id and epoch of the
    ongoing transaction the transaction coordinator kept (its OngoingTxnProducerId/Epoch),
    now continued under ``producer_id``/``producer_epoch``, which its EndTxn will carry."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingOffset:
    value: r.TxnOffsetCommitValue
    superseded: bool = False
    """A plain commit of the partition came after it: it will not be materialized."""
    order: int = 0
    """When its record was replayed, among all pending records (only the order counts: Kafka
    compares the log offsets of the records)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupTransaction:
    """A producer's transaction as one group knows it (the listener's resolver reads these)."""

    group_id: str
    producer_id: int
    transactional_id: str
    producer_epoch: int
    state: r.TransactionState
    updated_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Ended:
    """What ``end_transaction`` did: the groups whose transaction of that producer it moved."""

    groups: tuple[str, ...] = ()


class TransactionalOffsets:
    """Pending transactional offsets and the transactions that hold them (module doc)."""

    def __init__(self, ctx: ShardContext) -> None:
        self._ctx = ctx
        undo = ctx.undo
        # producer id -> TDict((group, topic, partition) -> PendingOffset)
        self._pending = undo.new_dict()
        # group -> TDict((topic, partition) -> frozenset of producer ids with a pending offset)
        self._open = undo.new_dict()
        # (group, producer id) -> GroupTransactionValue
        self._txns = undo.new_dict()
        # producer id -> frozenset of groups with a transaction of it (derived)
        self._groups_of = undo.new_dict()
        self._order = 0  # pending records replayed so far (PendingOffset.order)

    # ------------------------------------------------------------------ reads

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        open_ = self._open.get(group_id)
        return open_ is not None and (topic, partition) in open_

    def pending_partitions(self, group_id: str) -> frozenset[tuple[str, int]]:
        open_ = self._open.get(group_id)
        return frozenset() if open_ is None else frozenset(open_)

    def has_transactions(self, group_id: str) -> bool:
        """Does the group hold pending offsets or an open transaction (Kafka keeps it then)?"""
        return group_id in self._open or any(
            g == group_id and v.state not in FENCES for (g, _pid), v in self._txns.items()
        )

    def groups(self) -> frozenset[str]:
        """The groups with pending offsets or a transaction (a fence alone makes no group)."""
        return frozenset(self._open) | frozenset(
            g for (g, _pid), v in self._txns.items() if v.state not in FENCES
        )

    def transactions(self) -> list[GroupTransaction]:
        """Every group's open or ending transaction, by group and producer id (no fence)."""
        return [
            GroupTransaction(
                group_id=g,
                producer_id=pid,
                transactional_id=v.transactional_id,
                producer_epoch=v.producer_epoch,
                state=v.state,
                updated_ms=v.updated_ms,
            )
            for (g, pid), v in sorted(self._txns.items())
            if v.state not in FENCES
        ]

    def knows_producer(self, producer_id: int) -> bool:
        return producer_id in self._groups_of

    def knows_transactional_id(self, transactional_id: str) -> bool:
        """Does a transaction or a fence of ``transactional_id`` hold a group here?"""
        return any(v.transactional_id == transactional_id for v in self._txns.values())

    # ------------------------------------------------------------------ commands

    def check_producer(self, group_id: str, producer_id: int, producer_epoch: int) -> None:
        """A TxnOffsetCommit or AddOffsetsToTxn of this producer for this group: refused from
        an epoch older than one a transaction of the producer id in any group of the shard has
        or one a fence covers (INVALID_PRODUCER_EPOCH: a zombie; module doc), or while an end
        of its transaction in this group is on its way (CONCURRENT_TRANSACTIONS, which the
        client retries)."""
        for g in sorted(self._groups_of.get(producer_id, ())):
            known = self._txns[(g, producer_id)]
            if known.state in FENCES and producer_epoch <= known.producer_epoch:
                raise InvalidProducerEpochError(
                    f"Producer {producer_id} epoch {producer_epoch} is fenced: transactional "
                    f"id {known.transactional_id} has a newer epoch on group {g} (epochs up "
                    f"to {known.producer_epoch} are refused)."
                )
            if known.state not in FENCES and producer_epoch < known.producer_epoch:
                raise InvalidProducerEpochError(
                    f"Producer {producer_id} epoch {producer_epoch} is older than the epoch "
                    f"{known.producer_epoch} of its transaction on group {g}."
                )
        txn = self._txns.get((group_id, producer_id))
        if txn is None or txn.state in FENCES:
            return
        if txn.state is not S.ONGOING and txn.producer_epoch == producer_epoch:
            raise ConcurrentTransactionsError(
                f"The transaction of producer {producer_id} on group {group_id} is ending."
            )

    def begin(
        self,
        result: Result[Any],
        group_id: str,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
    ) -> None:
        """The group takes part in the producer's transaction (checked with
        :meth:`check_producer`): its transaction record, ongoing; an ongoing transaction of an
        older epoch (never ended through us, hence aborted) goes first."""
        txn = self._txns.get((group_id, producer_id))
        if txn is not None and txn.state in FENCES:
            pass  # a fence of older epochs: the new transaction's record replaces it
        elif txn is not None and txn.producer_epoch == producer_epoch:
            if txn.transactional_id == transactional_id:
                return
        elif txn is not None:
            self._close(
                result,
                group_id,
                producer_id,
                f"aborted: the producer moved to epoch {producer_epoch}",
            )
        self._ctx.emit(
            result,
            r.group_transaction_record(
                group_id,
                producer_id,
                r.GroupTransactionValue(
                    transactional_id=transactional_id,
                    producer_epoch=producer_epoch,
                    state=S.ONGOING,
                    updated_ms=now_ms,
                ),
            ),
        )

    def add_pending(
        self,
        result: Result[Any],
        group_id: str,
        topic: str,
        partition: int,
        producer_id: int,
        value: r.TxnOffsetCommitValue,
    ) -> None:
        self._ctx.emit(
            result, r.txn_offset_commit_record(group_id, topic, partition, producer_id, value)
        )

    def end_transaction(self, cmd: EndTxn, now_ms: int) -> Result[Ended]:
        """The listener forwards or saw answered an EndTxn (:class:`EndTxn`): every group
        holding the producer's transaction of that epoch is moved along (module doc)."""
        return self._ctx.run(self._end, cmd, now_ms)

    def _end(self, cmd: EndTxn, now_ms: int) -> Result[Ended]:
        result: Result[Ended] = Result()
        producer_id, producer_epoch, state = cmd.producer_id, cmd.producer_epoch, cmd.state
        moved = []
        for group_id in sorted(self._groups_of.get(producer_id, ())):
            txn = self._txns[(group_id, producer_id)]
            if txn.producer_epoch != producer_epoch or txn.state in FENCES:
                continue
            if cmd.seen is not None and cmd.seen != (txn.state, txn.updated_ms):
                continue  # not the transaction the caller asked about
            moved.append(group_id)
            if state is not None:
                # Only an ongoing transaction moves: once one end was forwarded the transaction
                # coordinator may have acted on it (Kafka's moves PrepareCommit/CompleteCommit
                # to nothing but a commit, answering an abort INVALID_TXN_STATE), so the other
                # end forwarded after it does not replace it; its answer alone decides.
                if txn.state is S.ONGOING:
                    self._ctx.emit(
                        result,
                        r.group_transaction_record(
                            group_id,
                            producer_id,
                            r.GroupTransactionValue(
                                transactional_id=txn.transactional_id,
                                producer_epoch=producer_epoch,
                                state=state,
                                updated_ms=now_ms,
                            ),
                        ),
                    )
            elif cmd.commit:
                self._commit(result, group_id, producer_id, txn, now_ms)
            else:
                fence = _ended(txn, S.COMPLETE_ABORT, now_ms)
                self._close(result, group_id, producer_id, "aborted", fence=fence)
        result.response = Ended(groups=tuple(moved))
        return result

    def producer_initialized(self, cmd: ProducerInitialized, now_ms: int) -> Result[Ended]:
        """An InitProducerId for ``transactional_id`` was answered (``producer_id``,
        ``producer_epoch``): the transaction coordinator aborted any transaction of an older
        epoch or another producer id of that transactional id that was still ongoing. Only
        ongoing ones are dropped here: one whose end was forwarded (PREPARE_*) is resolved by
        the listener before it forwards the InitProducerId. The transaction the coordinator
        kept (``cmd.kept``, KIP-939) is not aborted: it moves to the new producer id and epoch."""
        return self._ctx.run(self._initialized, cmd, now_ms)

    def _initialized(self, cmd: ProducerInitialized, now_ms: int) -> Result[Ended]:
        result: Result[Ended] = Result()
        transactional_id, producer_id, producer_epoch = (
            cmd.transactional_id,
            cmd.producer_id,
            cmd.producer_epoch,
        )
        dropped = []
        for (group_id, pid), txn in sorted(self._txns.items()):
            if txn.transactional_id != transactional_id:
                continue
            # The fence: the epochs before the new one (of another producer id: the aborted one).
            fenced = producer_epoch - 1 if pid == producer_id else txn.producer_epoch
            if txn.state in FENCES:
                if pid == producer_id and txn.producer_epoch < fenced:
                    self._ctx.emit(
                        result,
                        r.group_transaction_record(
                            group_id, pid, _fence(txn.transactional_id, fenced, now_ms, txn.state)
                        ),
                    )
                continue
            if txn.state is not S.ONGOING:
                continue
            if pid == producer_id and txn.producer_epoch >= producer_epoch:
                continue
            if cmd.kept == (pid, txn.producer_epoch):
                self._move(result, group_id, pid, txn, producer_id, producer_epoch, now_ms)
                continue
            dropped.append(group_id)
            self._close(
                result,
                group_id,
                pid,
                "aborted: the transactional id was initialized",
                fence=_fence(txn.transactional_id, fenced, now_ms),
            )
        result.response = Ended(groups=tuple(dropped))
        return result

    def _move(
        self,
        result: Result[Any],
        group_id: str,
        old_pid: int,
        txn: r.GroupTransactionValue,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
    ) -> None:
        """The group's ongoing transaction of ``old_pid`` goes on under ``producer_id`` at
        ``producer_epoch`` (KIP-939: kept by an InitProducerId). Under another producer id
        (the old one's epochs ran out) its pending offsets move to the new id — those a later
        plain commit superseded are dropped: they would never be materialized."""
        moved = r.GroupTransactionValue(
            transactional_id=txn.transactional_id,
            producer_epoch=producer_epoch,
            state=txn.state,
            updated_ms=now_ms,
        )
        if producer_id != old_pid:
            pending = self._pending.get(old_pid, {})
            for (g, topic, partition), entry in sorted(pending.items()):
                if g != group_id:
                    continue
                self._ctx.emit(
                    result, r.txn_offset_commit_record(g, topic, partition, old_pid, None)
                )
                if not entry.superseded:
                    self._ctx.emit(
                        result,
                        r.txn_offset_commit_record(g, topic, partition, producer_id, entry.value),
                    )
            self._ctx.emit(result, r.group_transaction_record(group_id, old_pid, None))
        self._ctx.emit(result, r.group_transaction_record(group_id, producer_id, moved))

    def _commit(
        self,
        result: Result[Any],
        group_id: str,
        producer_id: int,
        txn: r.GroupTransactionValue,
        now_ms: int,
    ) -> None:
        """Materialize the producer's pending offsets of the group (those no later plain commit
        superseded), then tombstone them and write the transaction's fence over its record.
        Another producer's offset of the same partition pending since (newer than the
        materialized one, which Kafka dates by its pending record) is written again after it:
        still newer."""
        pending = self._pending.get(producer_id, {})
        open_ = self._open.get(group_id, {})
        count = 0
        for (g, topic, partition), entry in sorted(pending.items()):
            if g != group_id or entry.superseded:
                continue
            # Read before the materialized record is replayed (it supersedes them all).
            newer = []
            for other in open_.get((topic, partition), ()):
                later = self._pending[other][(g, topic, partition)]
                if other != producer_id and not later.superseded and later.order > entry.order:
                    newer.append((later.order, other, later.value))
            newer.sort()
            v = entry.value
            self._ctx.emit(
                result,
                r.offset_commit_record(
                    group_id,
                    topic,
                    partition,
                    r.OffsetCommitValue(
                        offset=v.offset,
                        leader_epoch=v.leader_epoch,
                        metadata=v.metadata,
                        commit_timestamp_ms=v.commit_timestamp_ms,
                    ),
                ),
            )
            count += 1
            for _order, other, value in newer:
                self._ctx.emit(
                    result, r.txn_offset_commit_record(g, topic, partition, other, value)
                )
        fence = _ended(txn, S.COMPLETE_COMMIT, now_ms)
        self._close(result, group_id, producer_id, f"committed ({count} offsets)", fence=fence)

    def _close(
        self,
        result: Result[Any],
        group_id: str,
        producer_id: int,
        outcome: str,
        fence: r.GroupTransactionValue | None = None,
    ) -> None:
        """Drop the producer's pending offsets of the group and its transaction record (or
        write ``fence`` over it: the transaction ended or was aborted by an InitProducerId;
        module doc)."""
        pending = self._pending.get(producer_id, {})
        for g, topic, partition in sorted(k for k in pending if k[0] == group_id):
            self._ctx.emit(
                result, r.txn_offset_commit_record(g, topic, partition, producer_id, None)
            )
        txn = self._txns.get((group_id, producer_id))
        if txn is not None:
            self._ctx.emit(result, r.group_transaction_record(group_id, producer_id, fence))
            result.events.append(
                LogEvent(
                    event=Event.TRANSACTION_ENDED,
                    group_id=group_id,
                    fields={
                        "transactional_id": txn.transactional_id,
                        "producer_id": producer_id,
                        "producer_epoch": txn.producer_epoch,
                        "outcome": outcome,
                    },
                )
            )

    # ------------------------------------------------------------------ within other commands

    def delete_partition(
        self, result: Result[Any], group_id: str, topic: str, partition: int
    ) -> None:
        """OffsetDelete (and a topic's deletion): the partition's pending offsets go too."""
        open_ = self._open.get(group_id)
        pids = () if open_ is None else open_.get((topic, partition), ())
        for pid in sorted(pids):
            self._ctx.emit(
                result, r.txn_offset_commit_record(group_id, topic, partition, pid, None)
            )

    def delete_all(self, result: Result[Any], group_id: str) -> None:
        """The group is deleted: its pending offsets and transaction records; its fences stay
        (Kafka's producer state in the partition outlives the group's records)."""
        for topic, partition in sorted(self.pending_partitions(group_id)):
            self.delete_partition(result, group_id, topic, partition)
        for (g, pid), v in sorted(self._txns.items()):
            if g == group_id and v.state not in FENCES:
                self._ctx.emit(result, r.group_transaction_record(group_id, pid, None))

    def on_topics_deleted(self, result: Result[Any], names: Iterable[str]) -> None:
        deleted = set(names)
        for group_id in sorted(self._open):
            for topic, partition in sorted(self._open[group_id]):
                if topic in deleted:
                    self.delete_partition(result, group_id, topic, partition)

    def expire_fences(self, result: Result[Any], now_ms: int) -> None:
        """The periodic cleanup: the fences written ``producer.id.expiration.ms`` or more
        before ``now_ms`` go (module doc)."""
        ttl = self._ctx.config.producer_id_expiration_ms
        for (g, pid), v in sorted(self._txns.items()):
            if v.state in FENCES and now_ms - v.updated_ms >= ttl:
                self._ctx.emit(result, r.group_transaction_record(g, pid, None))

    def has_open(self, group_id: str) -> bool:
        """Does the group hold offsets pending in a transaction (which a replayed plain commit
        of the same partition supersedes: :meth:`on_offset_committed`)?"""
        return group_id in self._open

    def on_offset_committed(self, group_id: str, topic: str, partition: int) -> None:
        """Replay of a plain OffsetCommit record: the partition's pending offsets are older
        than it, so none of them will be materialized (Kafka compares record offsets)."""
        open_ = self._open.get(group_id)
        if open_ is None:
            return
        for pid in open_.get((topic, partition), ()):
            pending = self._pending[pid]
            key = (group_id, topic, partition)
            entry = pending[key]
            if not entry.superseded:
                pending[key] = PendingOffset(value=entry.value, superseded=True)

    # ------------------------------------------------------------------ records

    def replayers(self) -> dict[r.RecordType, Callable[[r.Record], None]]:
        return {
            r.RecordType.TXN_OFFSET_COMMIT: self._replay_pending,
            r.RecordType.GROUP_TRANSACTION: self._replay_transaction,
        }

    def _replay_pending(self, record: r.Record) -> None:
        key, value = r.typed(record, r.TxnOffsetCommitKey, r.TxnOffsetCommitValue)
        g, tp, pid = key.group_id, (key.topic, key.partition), key.producer_id
        pending = self._pending.get(pid)
        open_ = self._open.get(g)
        if value is None:
            if pending is None or (g, *tp) not in pending:
                return
            del pending[(g, *tp)]
            if not pending:
                del self._pending[pid]
            assert open_ is not None
            rest = open_[tp] - {pid}
            if rest:
                open_[tp] = rest
            else:
                del open_[tp]
                if not open_:
                    del self._open[g]
            return
        if pending is None:
            pending = self._ctx.undo.new_dict()
            self._pending[pid] = pending
        self._order += 1
        pending[(g, *tp)] = PendingOffset(value=value, order=self._order)
        if open_ is None:
            open_ = self._ctx.undo.new_dict()
            self._open[g] = open_
        open_[tp] = open_.get(tp, frozenset()) | {pid}

    def _replay_transaction(self, record: r.Record) -> None:
        key, value = r.typed(record, r.GroupTransactionKey, r.GroupTransactionValue)
        g, pid = key.group_id, key.producer_id
        groups = self._groups_of.get(pid, frozenset())
        if value is None:
            if (g, pid) not in self._txns:
                return
            del self._txns[(g, pid)]
            rest = groups - {g}
            if rest:
                self._groups_of[pid] = rest
            else:
                del self._groups_of[pid]
            return
        self._txns[(g, pid)] = value
        if g not in groups:
            self._groups_of[pid] = groups | {g}

    def snapshot(self) -> dict[str, object]:
        return {
            "pending_offsets": {
                f"{g}/{t}-{p}/{pid}": (entry.value, entry.superseded)
                for pid, pending in sorted(self._pending.items())
                for (g, t, p), entry in sorted(pending.items())
            },
            "transactions": {f"{g}/{pid}": v for (g, pid), v in sorted(self._txns.items())},
        }

    def records_of_state(
        self, committed: Callable[[str, str, int], r.OffsetCommitValue | None]
    ) -> list[r.Record]:
        """The transaction records, then the pending offsets in the order they came; the last
        superseded one of a partition (those superseded came before the others) is followed by
        its committed offset again (``committed``), so that replay marks them superseded as
        before and leaves the newer ones as they were."""
        out = [r.group_transaction_record(g, pid, v) for (g, pid), v in sorted(self._txns.items())]
        entries = sorted(
            (entry.order, pid, key, entry)
            for pid, pending in self._pending.items()
            for key, entry in pending.items()
        )
        last_superseded = {key: order for order, _pid, key, entry in entries if entry.superseded}
        for order, pid, (g, t, p), entry in entries:
            out.append(r.txn_offset_commit_record(g, t, p, pid, entry.value))
            current = committed(g, t, p) if last_superseded.get((g, t, p)) == order else None
            if current is not None:
                out.append(r.offset_commit_record(g, t, p, current))
        return out


def _fence(
    transactional_id: str, epoch: int, now_ms: int, state: r.TransactionState = S.COMPLETE_ABORT
) -> r.GroupTransactionValue:
    """The record of a fence: the producer's epochs up to ``epoch`` refused (module doc)."""
    return r.GroupTransactionValue(
        transactional_id=transactional_id,
        producer_epoch=epoch,
        state=state,
        updated_ms=now_ms,
    )


def _ended(
    txn: r.GroupTransactionValue, state: r.TransactionState, now_ms: int
) -> r.GroupTransactionValue | None:
    """What an ended transaction leaves: a fence of the epochs before its own (``state``
    says how it ended), or nothing at epoch 0 (no older epoch to refuse)."""
    if txn.producer_epoch == 0:
        return None
    return _fence(txn.transactional_id, txn.producer_epoch - 1, now_ms, state)


def pending_error(group_id: str, topic: str, partition: int) -> tuple[ErrorCode, str]:
    """The fetch answer of a partition with pending transactional offsets (require_stable)."""
    return (
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        f"Partition {topic}-{partition} of group {group_id} has pending transactional offsets.",
    )
