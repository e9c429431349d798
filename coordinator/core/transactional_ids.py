"""Which group each transactional id commits offsets to: a component of the cluster-level state
machine (the cluster log), so every node knows it.

Among several coordinator nodes (docs/ha.md) a transaction's group state — its pending offsets,
the record that its end is on its way, its outcome — lives in the group's coordinator partition,
which one node leads; the transaction coordinator stays upstream, and the node that forwards a
transaction's EndTxn must be the node holding its group's state, or the group never learns how
the transaction ended. Kafka's group coordinator and transaction coordinator send each other
requests (markers); here the transactional id is routed instead: once its transaction commits
offsets to group G, its transaction APIs (FindCoordinator, InitProducerId, AddOffsetsToTxn,
AddPartitionsToTxn, EndTxn) are served by the node leading G's partition, which forwards them
upstream (``server/kafka/transactions.py``). One ``TransactionalIdGroup`` record per
transactional id, written when its group changes (normally once) and when it was last written
a ``transaction.remove.expired.transaction.cleanup.interval.ms`` or more before the id's latest
activity (its record carries that time: ``active_ms``, so a restart knows it).

**Expiry**, as Kafka's transaction coordinator forgets a transactional id: once an id has been
inactive (no transaction API of it served: InitProducerId, AddOffsetsToTxn, TxnOffsetCommit
v5+, EndTxn) for ``transactional.id.expiration.ms`` (7 days) its mapping is removed (a
tombstone) — unless it holds an open or ending transaction (Kafka expires only an id whose
transaction is complete). The driver, every cleanup interval, names the ids it may decide
about — those mapped to a group its node serves, with no open transaction there — and
:meth:`ClusterTransactionalIds.expire` decides by the time it passes. Since activity is written
to within a cleanup interval, an id expires when its recorded activity is older than the
expiration plus one interval: never sooner than the expiration after its last activity. A
record written before ``active_ms`` existed (-1) is written again with the time of the first
check that names it: its expiration counts from then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from . import records as r
from .commands import Result
from .config import GroupCoordinatorConfig
from .errors import InvalidRequestError
from .staging import Staging
from .timeline import TDict, UndoLog


class ClusterTransactionalIds:
    """transactional id -> the group its transactions commit offsets to (module doc)."""

    def __init__(self, undo: UndoLog, config: GroupCoordinatorConfig | None = None) -> None:
        self._config = config or GroupCoordinatorConfig()
        self._ids = undo.new_dict()  # transactional id -> TransactionalIdGroupValue
        self._staging: Staging[TDict] = Staging(undo.new_dict)

    def stage(self) -> None:
        """Until :meth:`unstage`, replayed records go to a copy of the mappings (``staging.py``):
        every read — the transactions' routing — sees them as they were. Only on the
        committed copy, which never rolls back."""
        self._staging.stage(self._ids)

    def unstage(self) -> list[TDict]:
        """The mappings replayed since :meth:`stage` are what every read sees, at once;
        returns the map they replace, for the caller to drop."""
        self._ids, replaced = self._staging.unstage(self._ids)
        return replaced

    def group_of(self, transactional_id: str) -> str | None:
        """The group ``transactional_id`` commits offsets to; None: none known."""
        value: r.TransactionalIdGroupValue | None = self._ids.get(transactional_id)
        return None if value is None else value.group_id

    def needs_write(self, transactional_id: str, group_id: str, now_ms: int) -> bool:
        """Would :meth:`map` write a record (the group changes, or the recorded activity is a
        cleanup interval old or unknown)?"""
        value: r.TransactionalIdGroupValue | None = self._ids.get(transactional_id)
        return (
            value is None
            or value.group_id != group_id
            or value.active_ms < 0
            or now_ms - value.active_ms >= self._config.transactional_id_cleanup_interval_ms
        )

    def mapped(self) -> list[tuple[str, str]]:
        """(transactional id, its group) of every mapped id, by id."""
        return [(tid, v.group_id) for tid, v in sorted(self._ids.items())]

    def __len__(self) -> int:
        return len(self._ids)

    # ------------------------------------------------------------------ commands

    def map(self, transactional_id: str, group_id: str, now_ms: int) -> Result[bool]:
        """``transactional_id``, active at ``now_ms``, commits offsets to ``group_id``: its
        record when that is new (response True) or when its recorded activity is a cleanup
        interval old (False; :meth:`needs_write`), else nothing (False)."""
        if not transactional_id:
            raise InvalidRequestError("The transactional id is empty.")
        if not group_id:
            raise InvalidRequestError("The group id is empty.")
        if not self.needs_write(transactional_id, group_id, now_ms):
            return Result(response=False)
        changed = self.group_of(transactional_id) != group_id
        record = r.transactional_id_group_record(transactional_id, group_id, now_ms)
        self._replay(record)
        return Result(records=[record], response=changed)

    def expire(self, transactional_ids: Iterable[str], now_ms: int) -> Result[list[str]]:
        """Of ``transactional_ids`` (those the caller may decide about: served by its node,
        no open transaction; module doc), the mappings inactive for
        ``transactional.id.expiration.ms`` plus a cleanup interval at ``now_ms`` are removed
        (response: those ids, in order); one whose activity is unknown (-1) starts counting
        now."""
        config = self._config
        age = config.transactional_id_expiration_ms + config.transactional_id_cleanup_interval_ms
        expired: list[str] = []
        result: Result[list[str]] = Result(response=expired)
        for tid in sorted(set(transactional_ids)):
            value: r.TransactionalIdGroupValue | None = self._ids.get(tid)
            if value is None:
                continue
            if value.active_ms < 0:
                record = r.transactional_id_group_record(tid, value.group_id, now_ms)
            elif now_ms - value.active_ms >= age:
                record = r.transactional_id_group_record(tid, None)
                expired.append(tid)
            else:
                continue
            self._replay(record)
            result.records.append(record)
        return result

    # ------------------------------------------------------------------ records

    def replayers(self) -> dict[r.RecordType, Callable[[r.Record], None]]:
        return {r.RecordType.TRANSACTIONAL_ID_GROUP: self._replay}

    def _replay(self, record: r.Record) -> None:
        key, value = r.typed(record, r.TransactionalIdGroupKey, r.TransactionalIdGroupValue)
        ids = self._staging.target(self._ids)
        if value is None:
            ids.discard(key.transactional_id)
        else:
            ids[key.transactional_id] = value

    def snapshot(self) -> dict[str, object]:
        return {"transactional_id_groups": dict(sorted(self._ids.items()))}

    def records_of_state(self) -> list[r.Record]:
        return [
            r.transactional_id_group_record(tid, v.group_id, v.active_ms)
            for tid, v in sorted(self._ids.items())
        ]
