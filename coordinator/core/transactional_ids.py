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
transactional id, written only when its group changes (normally once).
"""

from __future__ import annotations

from collections.abc import Callable

from . import records as r
from .commands import Result
from .errors import InvalidRequestError
from .timeline import UndoLog


class ClusterTransactionalIds:
    """transactional id -> the group its transactions commit offsets to (module doc)."""

    def __init__(self, undo: UndoLog) -> None:
        self._groups = undo.new_dict()  # transactional id -> group id

    def group_of(self, transactional_id: str) -> str | None:
        """The group ``transactional_id`` commits offsets to; None: none known."""
        group: str | None = self._groups.get(transactional_id)
        return group

    def __len__(self) -> int:
        return len(self._groups)

    # ------------------------------------------------------------------ commands

    def map(self, transactional_id: str, group_id: str) -> Result[bool]:
        """``transactional_id`` commits offsets to ``group_id``: its record when that is new
        (response True), nothing when it was already so (False)."""
        if not transactional_id:
            raise InvalidRequestError("The transactional id is empty.")
        if not group_id:
            raise InvalidRequestError("The group id is empty.")
        if self._groups.get(transactional_id) == group_id:
            return Result(response=False)
        record = r.transactional_id_group_record(transactional_id, group_id)
        self._replay(record)
        return Result(records=[record], response=True)

    # ------------------------------------------------------------------ records

    def replayers(self) -> dict[r.RecordType, Callable[[r.Record], None]]:
        return {r.RecordType.TRANSACTIONAL_ID_GROUP: self._replay}

    def _replay(self, record: r.Record) -> None:
        key, value = r.typed(record, r.TransactionalIdGroupKey, r.TransactionalIdGroupValue)
        if value is None:
            self._groups.discard(key.transactional_id)
        else:
            self._groups[key.transactional_id] = value.group_id

    def snapshot(self) -> dict[str, object]:
        return {"transactional_id_groups": dict(sorted(self._groups.items()))}

    def records_of_state(self) -> list[r.Record]:
        return [
            r.transactional_id_group_record(tid, group)
            for tid, group in sorted(self._groups.items())
        ]
