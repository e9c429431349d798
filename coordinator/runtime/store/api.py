"""The record store contract: types, errors and the :class:`RecordStore` protocol.

Every implementation (:mod:`.sqlite`, :mod:`.memory`, :mod:`.postgres`) follows this module to
the letter, and one contract test suite (tests/unit/test_store_contract.py) runs against all.

A store is ``partitions`` partitioned logs (Kafka's ``__consumer_offsets`` partitions, one per
``offsets.topic.num.partitions``) plus the cluster log (:data:`CLUSTER_LOG`). A record's log
follows from its group id (:func:`log_of`): a group's records all live in its partition, in the
order they were written; cluster-level records (group id None: topics, users, ACLs) live in the
cluster log. Each log has its own offsets (0, 1, 2, ...), compacted view and journal, and is
loaded as a whole. One ``append`` is atomic across every log it touches.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from coordinator.routing import CLUSTER_LOG, MAX_PARTITIONS, partition_for

__all__ = [
    "CLUSTER_LOG",
    "Fence",
    "GroupRecords",
    "JournalEntry",
    "RecordStore",
    "StoreAccessError",
    "StoreCorruptError",
    "StoreError",
    "StoreFencedError",
    "StoreLockedError",
    "StoreLostError",
    "StoreVersionError",
    "StoreWriteError",
    "StoredRecord",
    "check_batch",
    "check_log",
    "check_partitions",
    "log_ids",
    "groups_of_rows",
    "log_of",
    "retention_interval_ms",
    "split_batch",
]

RETENTION_CHECK_MS = 60_000


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as the store sees it: opaque bytes plus the group it belongs to.

    ``key`` and ``value`` are encoded by the core's codec; the store only compares keys for
    equality (within a log). ``value is None`` is a tombstone. ``group_id`` is None for
    cluster-level records (the topic registry); it names the record's log (:func:`log_of`) and
    feeds analytics.
    """

    key: bytes
    value: bytes | None
    group_id: str | None

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


GroupRecords = tuple[str | None, int, int, bytes]
"""One group's records in a log's compacted view (:meth:`RecordStore.load_groups`):
``(group id, how many records, the offset of its last one, their bytes)``, the bytes a JSON
array of each record's key and value in offset order (``[key1,value1,key2,value2,...]``, each
key and value as stored: the codec's JSON)."""


def groups_of_rows(
    chunks: Iterator[list[tuple[int, bytes, bytes, str | None]]],
) -> Iterator[list[GroupRecords]]:
    """:meth:`RecordStore.load_groups` from :meth:`RecordStore.load_rows`' chunks (one chunk
    of every group at the end: a group's records may come in any chunk)."""
    groups: dict[str | None, list[Any]] = {}
    get = groups.get
    for rows in chunks:
        for offset, key, value, group_id in rows:
            g = get(group_id)
            if g is None:
                g = groups[group_id] = [0, offset, []]
            g[0] += 1
            g[1] = offset
            g[2] += (key, value)
    if groups:
        yield [
            (gid, n, last, b"[" + b",".join(parts) + b"]")
            for gid, (n, last, parts) in groups.items()
        ]


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One record of a log's append-only journal, as written (tombstones included).

    ``partition`` is the log (:data:`CLUSTER_LOG` or 0..P-1), ``offset`` its offset in that
    log; ``leader_epoch`` is the epoch of the lease the write was fenced by (-1: a store with a
    single writer and no leases)."""

    offset: int
    timestamp_ms: int
    group_id: str | None
    key: bytes
    value: bytes | None
    partition: int
    leader_epoch: int = -1


class StoreError(Exception):
    """The store cannot be used: not a record store, corrupt, locked, closed, ...

    Opening refuses anything it cannot trust with one of the subclasses below, and never
    replaces it: only a *missing* store is created. The message says what was found and what
    to do; ``kip848 serve`` and ``kip848 replay`` print it and exit non-zero."""


class StoreCorruptError(StoreError):
    """Something is present where the store should be, but it is not a valid, complete record
    store: an empty or truncated file, a foreign file or database, damaged pages, a directory
    in place of the file, a write-ahead log without its database, or a database whose
    write-ahead log went missing after an unclean shutdown (acknowledged writes lost)."""


class StoreAccessError(StoreError):
    """The store (or where it should be) cannot be accessed as needed: a read-only file system,
    permission denied, a data directory that is a file, no space left to create it, an I/O
    error. Nothing is wrong with the store itself."""


class StoreLockedError(StoreError):
    """Another process holds the store open for writing (one writer per store)."""


class StoreWriteError(StoreError):
    """An append failed. The cause is chained (``__cause__``).

    ``outcome_unknown`` is False when the store knows that nothing of the batch was written (the
    usual case: validation failed, or the transaction was rolled back). It is True when the
    failure happened while committing, so the batch may or may not be durable: the store then
    refuses every later append (``StoreWriteError``) until it is closed and reopened, because the
    in-memory state of the caller can no longer be trusted to match the store. Either way the
    caller must not acknowledge the batch.
    """

    def __init__(self, message: str, *, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class StoreFencedError(StoreWriteError):
    """An append fenced off: the writer no longer holds the lease of ``partitions`` at the
    leader epoch it gave (another node took them over, docs/ha.md). Nothing of the batch was
    written; the writer must stop serving those partitions at once. Appends to partitions it
    still holds go on."""

    def __init__(self, message: str, partitions: frozenset[int]) -> None:
        super().__init__(message, outcome_unknown=False)
        self.partitions = partitions


@dataclass(frozen=True, slots=True)
class Fence:
    """Who writes a batch, and the leases it writes under: ``epochs`` maps each partition the
    writer leads to the leader epoch of its lease. A fenced ``append`` writes only if every
    partition it touches is still led by ``node_id`` at that epoch, checked in the append's own
    transaction (so a lease taken over meanwhile waits for the append, or the append fails)."""

    node_id: int
    epochs: Mapping[int, int]


class StoreLostError(StoreWriteError):
    """The open store is no longer the one on disk: its file, its write-ahead log or its data
    directory was deleted, replaced or unmounted while the store was open (see
    ``SqliteRecordStore.check_identity``). Nothing of the refused batch was written; the
    store refuses every later append: acknowledging writes that a restart would not find is
    the one thing a store must never do."""

    def __init__(self, message: str) -> None:
        super().__init__(message, outcome_unknown=False)


class StoreVersionError(StoreError):
    """The store was written by a schema version this build cannot read (newer, or older
    without a migration)."""


@runtime_checkable
class RecordStore(Protocol):
    """Durable, ordered, atomic storage of records in partitioned logs.

    ``partitions`` is fixed when the store is created (an existing store keeps its count,
    whatever a later opener asks for). Offsets are assigned by the store, per log: 0, 1, 2, ...
    in append order, never reused (not even after journal expiry or tombstones). ``log`` below
    is :data:`CLUSTER_LOG` or a partition 0..``partitions``-1; any other raises ValueError.
    """

    @property
    def partitions(self) -> int:
        """How many partitioned logs the store has (besides the cluster log)."""
        ...

    def append(
        self, records: Sequence[StoredRecord], timestamp_ms: int, *, fence: Fence | None = None
    ) -> dict[int, int]:
        """Atomically and durably append one batch (all or nothing, across every log it
        touches). Each record goes to its log (:func:`log_of`), in batch order. With ``fence``
        (stores shared by several nodes) the batch is written only if the writer still holds
        every partition it touches at the given epoch (:class:`StoreFencedError` otherwise),
        and its cluster-log records only at the log's end as this writer last wrote it or
        ``adopt``-ed it (:class:`StoreFencedError` naming :data:`CLUSTER_LOG` otherwise: the
        writer is behind); each journal entry records the epoch it was written under.

        Returns, for each log written, the offset of its last record. An empty batch writes
        nothing and returns ``{}``. Raises :class:`StoreWriteError` on any failure; nothing of
        the batch is visible then (see ``StoreWriteError.outcome_unknown`` for the one
        exception).
        """
        ...

    def load(self, log: int) -> Iterator[tuple[int, StoredRecord]]:
        """The compacted view of one log: each live key once with its latest value (tombstoned
        keys omitted), in the order of the offsets of those latest writes, like a compacted
        Kafka log. The snapshot is taken when ``load()`` is called; later appends are not
        seen."""
        ...

    def load_rows(self, log: int) -> Iterator[list[tuple[int, bytes, bytes, str | None]]]:
        """The same compacted view as :meth:`load`, as chunks of plain
        ``(offset, key, value, group_id)`` tuples: the fast path for loading millions of
        records (no per-record object)."""
        ...

    def load_snapshot(
        self, log: int
    ) -> tuple[int, Iterator[list[tuple[int, bytes, bytes, str | None]]]]:
        """:meth:`load_rows`' compacted view and the log's last offset *as of the same
        snapshot* (-1: nothing appended yet), which is past the view's last record when the
        newest records were tombstones or overwrote earlier keys. The view holds the log up to
        that offset as a whole: a reader that applies it in place of its copy, then the
        journal from the next offset on, misses nothing, whatever retention removed from the
        journal (Kafka's metadata snapshot with its end offset)."""
        ...

    def load_groups(self, log: int) -> Iterator[list[GroupRecords]]:
        """The same compacted view as :meth:`load`, a group at a time, as chunks of
        :data:`GroupRecords`: the groups in the order of their first record, each group's
        records in offset order. A PostgreSQL store joins them in the server (one row per
        group): the fastest way to load a partition."""
        ...

    def journal(
        self, log: int, *, from_offset: int = 0, to_offset: int | None = None
    ) -> Iterator[JournalEntry]:
        """One log's journal entries with ``from_offset <= offset < to_offset`` (``None``: to
        the end), in offset order, tombstones included. Entries removed by retention are
        skipped, so the first entry may be later than ``from_offset``. Snapshot taken at call
        time."""
        ...

    def expire_journal(self, older_than_ms: int) -> int:
        """In every log, delete the longest *prefix* of its journal whose entries all have
        ``timestamp_ms < older_than_ms`` (each journal stays a contiguous range of offsets).
        Never touches a compacted view. Returns the number of entries deleted."""
        ...

    def apply_retention(self, now_ms: int) -> int:
        """``expire_journal(now_ms - journal_retention_ms)``; 0 when retention is unset.

        Rarely needed: with a retention set, ``append`` applies it by itself (using the batch's
        ``timestamp_ms`` as now), once a minute, a bounded number of entries per call, after
        the batch is durable. Call this to expire while no appends happen, e.g. at shutdown."""
        ...

    def last_offset(self, log: int) -> int:
        """Offset of the last acknowledged record of ``log``; -1 when nothing was ever appended
        to it."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counts and sizes over every log, for ``kip848 replay``/dump and benchmarks (may scan
        the store)."""
        ...

    def check_identity(self) -> None:
        """Raise :class:`StoreLostError` if the store open here is no longer the store on disk
        (deleted, replaced, unmounted since it was opened). ``append`` checks after every
        commit; call this on an interval so an idle owner notices too. A lost store refuses
        every later append."""
        ...

    def rescue(self) -> Any:
        """After :class:`StoreLostError`: save what the open store holds where a restart finds
        it. Returns where it was saved; raises :class:`StoreError` if it could not be."""
        ...

    def probe_write(self) -> None:
        """A small durable write that touches no record: after appends failed (a full disk),
        succeeds once appends can succeed again; raises :class:`StoreWriteError` otherwise."""
        ...

    def close(self) -> None:
        """Release the store. Idempotent. Iterators already returned stay usable."""
        ...


def log_of(group_id: str | None, partitions: int) -> int:
    """The log a record of ``group_id`` lives in: its coordinator partition (Kafka's
    ``partitionFor``), or the cluster log for a cluster-level record (None)."""
    return CLUSTER_LOG if group_id is None else partition_for(group_id, partitions)


def log_ids(partitions: int) -> range:
    """Every log of a store: the cluster log first, then the partitions in order."""
    return range(CLUSTER_LOG, partitions)


def check_partitions(partitions: Any) -> int:
    """``partitions`` if it is a valid partition count for a new store, else ValueError."""
    if type(partitions) is not int or not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(
            f"a store has 1..{MAX_PARTITIONS} partitions (offsets.topic.num.partitions), "
            f"got {partitions!r}"
        )
    return partitions


def check_log(log: int, partitions: int) -> None:
    if type(log) is not int or not CLUSTER_LOG <= log < partitions:
        raise ValueError(
            f"no log {log!r} in a store of {partitions} partitions (the cluster log is "
            f"{CLUSTER_LOG})"
        )


def split_batch(records: Sequence[StoredRecord], partitions: int) -> dict[int, list[StoredRecord]]:
    """A batch's records by log, each in batch order (logs in order of first appearance)."""
    out: dict[int, list[StoredRecord]] = {}
    cache: dict[str | None, int] = {}
    for rec in records:
        gid = rec.group_id
        log = cache.get(gid)
        if log is None:
            log = cache[gid] = log_of(gid, partitions)
        bucket = out.get(log)
        if bucket is None:
            bucket = out[log] = []
        bucket.append(rec)
    return out


def retention_interval_ms(journal_retention_ms: int) -> int:
    """How long after an automatic retention pass ``append`` runs the next one: a minute, or
    the retention itself when shorter (so short retentions in tests act promptly)."""
    return max(1, min(RETENTION_CHECK_MS, journal_retention_ms))


def check_batch(records: Sequence[StoredRecord], timestamp_ms: int) -> None:
    """Raise :class:`StoreWriteError` (nothing written) unless the batch is well typed.

    Strict types matter: SQLite would silently store a ``str`` key as TEXT, a different key
    from the same bytes.
    """
    if type(timestamp_ms) is not int:
        raise StoreWriteError(f"timestamp_ms must be an int, got {type(timestamp_ms).__name__}")
    for i, rec in enumerate(records):
        if not isinstance(rec, StoredRecord):
            raise StoreWriteError(f"record #{i} is a {type(rec).__name__}, not a StoredRecord")
        if type(rec.key) is not bytes:
            raise StoreWriteError(f"record #{i}: key must be bytes, got {type(rec.key).__name__}")
        if rec.value is not None and type(rec.value) is not bytes:
            raise StoreWriteError(
                f"record #{i}: value must be bytes or None, got {type(rec.value).__name__}"
            )
        if rec.group_id is not None and type(rec.group_id) is not str:
            raise StoreWriteError(
                f"record #{i}: group_id must be str or None, got {type(rec.group_id).__name__}"
            )
