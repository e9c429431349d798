"""An in-memory :class:`~.api.RecordStore` with the same semantics as the SQLite one.

``MemoryRecordStore(partitions=P)``: P partitioned logs and the cluster log, like any store.

For tests of the runtime: :meth:`MemoryRecordStore.reopen` simulates a restart (a new store over
the same "durable" data), :meth:`~MemoryRecordStore.fail_next_appends` injects write failures and
:meth:`~MemoryRecordStore.hold_appends` blocks the writer so a test can observe what happens
while a batch is in flight. ``batch_sizes`` records every successful append (group commit).

Several handles on the same data (``MemoryRecordStore(_data=other._data)``: the nodes of an HA
test) share it as nodes share a PostgreSQL store, the cluster log included: each handle knows
the cluster log's end as it last wrote it or :meth:`~MemoryRecordStore.adopt`-ed it, and a
fenced append to the cluster log is refused (:class:`StoreFencedError` naming
:data:`CLUSTER_LOG`, nothing written) unless it lands at the log's end, exactly as the
PostgreSQL store's ``kip848_cluster_at`` refuses a node behind.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Self

from coordinator.routing import DEFAULT_PARTITIONS

from .api import (
    CLUSTER_LOG,
    Fence,
    GroupRecords,
    JournalEntry,
    StoredRecord,
    StoreError,
    StoreFencedError,
    StoreLostError,
    StoreWriteError,
    check_batch,
    check_log,
    check_partitions,
    groups_of_rows,
    log_ids,
    retention_interval_ms,
    split_batch,
)

__all__ = ["MemoryRecordStore"]


class _Log:
    """One log."""

    __slots__ = ("compacted", "journal", "next_offset")

    def __init__(self) -> None:
        self.journal: list[JournalEntry] = []  # contiguous offsets (retention cuts a prefix)
        # key -> (offset, record); dict order == offset order (a re-write moves the key last).
        self.compacted: dict[bytes, tuple[int, StoredRecord]] = {}
        self.next_offset = 0


class _Data:
    """What survives a simulated restart."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.logs = {log: _Log() for log in log_ids(partitions)}
        self.leaders: dict[int, tuple[int, int]] = {}  # partition -> (node id, leader epoch)


class MemoryRecordStore:
    """Thread-safe (one lock). Not durable: "durable" means "in this object"."""

    def __init__(
        self,
        *,
        partitions: int = DEFAULT_PARTITIONS,
        journal_retention_ms: int | None = None,
        _data: _Data | None = None,
    ) -> None:
        if journal_retention_ms is not None and journal_retention_ms < 0:
            raise ValueError("journal_retention_ms must be >= 0 or None")
        self.journal_retention_ms = journal_retention_ms
        self._data = _data if _data is not None else _Data(check_partitions(partitions))
        self._lock = threading.Lock()
        self._closed = False
        self._failed = False
        self._retention_due_ms = -(2**63)  # the first append checks
        self._faults: list[tuple[BaseException, bool]] = []
        self._lost: str | None = None
        self.rescued = False
        self._released = threading.Event()
        self._released.set()
        self.batch_sizes: list[int] = []
        # The cluster log's next offset as this handle last wrote or adopted it (a PostgreSQL
        # writer's cached next offset): a fenced append to it lands only there.
        self._cluster_next = self._data.logs[CLUSTER_LOG].next_offset

    @property
    def partitions(self) -> int:
        return self._data.partitions

    # -- test hooks -------------------------------------------------------------------------

    def fail_next_appends(
        self, n: int = 1, exc: BaseException | None = None, *, outcome_unknown: bool = False
    ) -> None:
        """Make the next ``n`` non-empty appends raise :class:`StoreWriteError` caused by
        ``exc`` (default ``OSError``). With ``outcome_unknown`` the batch *is* written first
        (a commit that failed to report success) and the store then refuses further appends,
        exactly like the SQLite store after a failed COMMIT."""
        for _ in range(n):
            self._faults.append((exc or OSError("injected write failure"), outcome_unknown))

    def set_leader(self, partition: int, node_id: int, epoch: int) -> None:
        """Test hook: who leads ``partition`` at which epoch, for fenced appends (a shared
        store's lease table; every handle of the same data sees it)."""
        self._data.leaders[partition] = (node_id, epoch)

    def hold_appends(self) -> None:
        """Block every append (before it writes) until :meth:`release_appends`."""
        self._released.clear()

    def release_appends(self) -> None:
        self._released.set()

    def reopen(self) -> MemoryRecordStore:
        """Close this store and return a new one over the same data, like a process restart."""
        self.close()
        return MemoryRecordStore(journal_retention_ms=self.journal_retention_ms, _data=self._data)

    def lose(self, reason: str = "the store was deleted") -> None:
        """Simulate the store vanishing from under the open store (a deleted data directory):
        the next append or :meth:`check_identity` raises :class:`StoreLostError`."""
        self._lost = f"the in-memory record store is no longer the one on disk: {reason}"

    @property
    def failed(self) -> bool:
        return self._failed

    @property
    def lost(self) -> str | None:
        return self._lost

    def check_identity(self) -> None:
        if self._lost is not None:
            raise StoreLostError(self._lost)

    def rescue(self) -> str:
        """The data survives in this object: a ``reopen()`` finds all of it."""
        if self._closed:
            raise StoreError("store is closed; nothing to rescue")
        self.rescued = True
        return "memory"

    def probe_write(self) -> None:
        """Fails like an append would: consumes the next injected fault, if any."""
        with self._lock:
            if self._closed:
                raise StoreWriteError("store is closed")
            if self._lost is not None:
                raise StoreLostError(self._lost)
            if self._failed:
                raise StoreWriteError("store failed earlier (outcome of a commit unknown)")
            if self._faults:
                exc, _unknown = self._faults.pop(0)
                raise StoreWriteError(f"injected probe failure: {exc!r}") from exc

    # -- RecordStore -------------------------------------------------------------------------

    def append(
        self, records: Sequence[StoredRecord], timestamp_ms: int, *, fence: Fence | None = None
    ) -> dict[int, int]:
        check_batch(records, timestamp_ms)
        # Bounded so that a test that forgets release_appends() fails instead of hanging.
        if not self._released.wait(timeout=30):
            raise StoreWriteError("append held for 30 s by hold_appends(); never released")
        with self._lock:
            if self._closed:
                raise StoreWriteError("store is closed")
            if self._lost is not None:
                raise StoreLostError(self._lost)
            if self._failed:
                raise StoreWriteError(
                    "store failed earlier (outcome of a commit unknown); reopen it"
                )
            if not records:
                return {}
            by_log = split_batch(records, self._data.partitions)
            epochs = self._check_fence(fence, by_log) if fence is not None else {}
            if self._faults:
                exc, outcome_unknown = self._faults.pop(0)
                if outcome_unknown:
                    self._apply(by_log, timestamp_ms, epochs)
                    self._failed = True
                raise StoreWriteError(
                    f"injected append failure: {exc!r}", outcome_unknown=outcome_unknown
                ) from exc
            self.batch_sizes.append(len(records))
            last = self._apply(by_log, timestamp_ms, epochs)
            if CLUSTER_LOG in last:
                self._cluster_next = last[CLUSTER_LOG] + 1
        retention = self.journal_retention_ms
        if retention is not None and timestamp_ms >= self._retention_due_ms:
            # Like the SQLite store: after the batch is durable, never an error of the append.
            with contextlib.suppress(StoreError):
                self.expire_journal(timestamp_ms - retention)
            self._retention_due_ms = timestamp_ms + retention_interval_ms(retention)
        return last

    def _check_fence(self, fence: Fence, by_log: dict[int, list[StoredRecord]]) -> dict[int, int]:
        leaders = self._data.leaders
        lost = frozenset(
            log
            for log in by_log
            if log >= 0 and leaders.get(log) != (fence.node_id, fence.epochs.get(log))
        )
        if lost:
            raise StoreFencedError(
                f"node {fence.node_id} no longer leads partitions {sorted(lost)} at the epochs "
                "it gave; nothing written",
                lost,
            )
        end = self._data.logs[CLUSTER_LOG].next_offset
        if CLUSTER_LOG in by_log and end != self._cluster_next:
            raise StoreFencedError(
                f"the cluster log ends at offset {end - 1}, not {self._cluster_next - 1}: node "
                f"{fence.node_id} is behind; nothing written",
                frozenset({CLUSTER_LOG}),
            )
        return {log: fence.epochs[log] for log in by_log if log >= 0}

    def adopt(self, log: int, next_offset: int | None = None) -> int:
        """As the PostgreSQL store's: this handle now appends to ``log`` after others did; its
        next offset is ``next_offset``, or, when None, the log's end now. Returns it. Only the
        cluster log's is kept (a fenced append to it lands only there); the partitions' logs
        are written at their end, their leases fencing the appends."""
        with self._lock:
            state = self._log(log)
            if next_offset is None:
                next_offset = state.next_offset
            if log == CLUSTER_LOG:
                self._cluster_next = next_offset
            return next_offset

    def _apply(
        self, by_log: dict[int, list[StoredRecord]], timestamp_ms: int, epochs: dict[int, int]
    ) -> dict[int, int]:
        last: dict[int, int] = {}
        for log_id, records in by_log.items():
            log = self._data.logs[log_id]
            offset = log.next_offset
            epoch = epochs.get(log_id, -1)
            for rec in records:
                log.journal.append(
                    JournalEntry(
                        offset, timestamp_ms, rec.group_id, rec.key, rec.value, log_id, epoch
                    )
                )
                log.compacted.pop(rec.key, None)
                if rec.value is not None:
                    log.compacted[rec.key] = (offset, rec)
                offset += 1
            log.next_offset = offset
            last[log_id] = offset - 1
        return last

    def _log(self, log: int) -> _Log:
        check_log(log, self._data.partitions)
        return self._data.logs[log]

    def load(self, log: int) -> Iterator[tuple[int, StoredRecord]]:
        with self._lock:
            self._check_open()
            return iter(list(self._log(log).compacted.values()))

    def load_rows(self, log: int) -> Iterator[list[tuple[int, bytes, bytes, str | None]]]:
        rows = [  # the compacted view holds no tombstones: the filter only narrows the type
            (offset, rec.key, rec.value, rec.group_id)
            for offset, rec in self.load(log)
            if rec.value is not None
        ]
        return iter([rows] if rows else [])

    def load_snapshot(
        self, log: int
    ) -> tuple[int, Iterator[list[tuple[int, bytes, bytes, str | None]]]]:
        with self._lock:
            self._check_open()
            state = self._log(log)
            rows = [
                (offset, rec.key, rec.value, rec.group_id)
                for offset, rec in state.compacted.values()
                if rec.value is not None
            ]
            return state.next_offset - 1, iter([rows] if rows else [])

    def load_groups(self, log: int) -> Iterator[list[GroupRecords]]:
        return groups_of_rows(self.load_rows(log))

    def journal(
        self, log: int, *, from_offset: int = 0, to_offset: int | None = None
    ) -> Iterator[JournalEntry]:
        with self._lock:
            self._check_open()
            entries = self._log(log).journal
            if not entries:
                return iter(())
            first = entries[0].offset
            start = max(from_offset - first, 0)
            stop = len(entries) if to_offset is None else max(to_offset - first, 0)
            return iter(entries[start:stop])

    def expire_journal(self, older_than_ms: int) -> int:
        if type(older_than_ms) is not int:
            raise TypeError("older_than_ms must be an int")
        with self._lock:
            self._check_open()
            total = 0
            for log in self._data.logs.values():
                entries = log.journal
                n = 0
                while n < len(entries) and entries[n].timestamp_ms < older_than_ms:
                    n += 1
                del entries[:n]
                total += n
            return total

    def apply_retention(self, now_ms: int) -> int:
        if self.journal_retention_ms is None:
            return 0
        return self.expire_journal(now_ms - self.journal_retention_ms)

    def last_offset(self, log: int) -> int:
        return self._log(log).next_offset - 1

    def stats(self) -> dict[str, Any]:
        with self._lock:
            logs = self._data.logs.values()
            journal = [e for log in logs for e in log.journal]
            live = [rec for log in logs for _, rec in log.compacted.values()]
            return {
                "implementation": "memory",
                "partitions": self._data.partitions,
                "journal_entries": len(journal),
                "journal_tombstones": sum(1 for e in journal if e.value is None),
                "journal_bytes": sum(len(e.key) + len(e.value or b"") for e in journal),
                "compacted_records": len(live),
                "compacted_groups": len({r.group_id for r in live if r.group_id is not None}),
                "compacted_key_bytes": sum(len(r.key) for r in live),
                "compacted_value_bytes": sum(len(r.value or b"") for r in live),
                "journal_retention_ms": self.journal_retention_ms,
                "logs": {
                    log_id: {
                        "last_offset": log.next_offset - 1,
                        "journal_first_offset": log.journal[0].offset if log.journal else None,
                        "journal_entries": len(log.journal),
                        "compacted_records": len(log.compacted),
                    }
                    for log_id, log in self._data.logs.items()
                },
            }

    def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
