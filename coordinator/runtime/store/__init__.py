"""Record store: the durable home of the coordinator's records.

Rules and theory of operation:

* The store keeps opaque records (key bytes, value bytes or None = tombstone, group id) and
  knows nothing of the core: it never imports ``coordinator.core``.
* Partitioned logs: ``partitions`` coordinator partitions (Kafka's ``__consumer_offsets``
  partitions; fixed when the store is created) and the cluster log. A record lives in its
  group's partition (``coordinator.routing.partition_for``), a cluster-level record (group id
  None) in the cluster log; each log has its own offsets, compacted view and journal, and is
  read as a whole (``load(log)``, ``journal(log)``).
* Durability contract: ``append(records, timestamp_ms)`` writes one batch atomically (all or
  nothing, across every log it touches) and returns only once it is durable; the runtime releases responses after that. A
  failed append raises ``StoreWriteError`` and nothing of the batch is visible, unless
  ``outcome_unknown`` is set (a failed commit): then the store refuses all further appends until
  reopened, and the runtime must reload from it. Group commit = many commands' records in one
  ``append``.
* Two views of the same appends, per log. The *compacted view* (``load(log)``) holds each
  key's latest value in the order of the offsets of those writes; tombstones delete. The
  runtime replays it when it loads the log. The *journal* (``journal(log)``) holds every record
  with its offset and timestamp, for analytics. Retention cuts a prefix of it and never touches
  the compacted view: with
  ``journal_retention_ms`` set, ``append`` applies it by itself (batch timestamp = now, once a
  minute, bounded work per call); ``expire_journal`` does it on demand. Offsets start at 0 in
  each log and are never reused.
* Thread model: all methods are thread-safe. The runtime calls ``append`` from one writer thread;
  readers (``load``, ``journal``) see a snapshot taken when they are called and do not block it.
* ``SqliteRecordStore`` (default, ``<data-dir>/coordinator.db``, WAL, fsync per commit) refuses
  stores written by a newer schema version (``StoreVersionError``) and migrates the single-log
  stores of version 1 when opened for writing. Only a *missing* store is
  created; anything present that is not a valid, complete store is refused, never replaced
  (``StoreCorruptError``), and what cannot be accessed says why (``StoreAccessError``:
  read-only, permissions; ``StoreLockedError``: another writer). ``MemoryRecordStore`` has the same semantics plus fault
  injection, for tests.
"""

from .api import (
    CLUSTER_LOG,
    Fence,
    GroupRecords,
    JournalEntry,
    RecordStore,
    StoreAccessError,
    StoreCorruptError,
    StoredRecord,
    StoreError,
    StoreFencedError,
    StoreLockedError,
    StoreLostError,
    StoreVersionError,
    StoreWriteError,
    log_ids,
    log_of,
)
from .memory import MemoryRecordStore
from .postgres import PostgresRecordStore
from .sqlite import DATA_FILE_NAME, SCHEMA_VERSION, SqliteRecordStore

__all__ = [
    "CLUSTER_LOG",
    "DATA_FILE_NAME",
    "Fence",
    "GroupRecords",
    "SCHEMA_VERSION",
    "JournalEntry",
    "MemoryRecordStore",
    "PostgresRecordStore",
    "RecordStore",
    "SqliteRecordStore",
    "StoreAccessError",
    "StoreCorruptError",
    "StoreError",
    "StoreFencedError",
    "StoreLockedError",
    "StoreLostError",
    "StoreVersionError",
    "StoreWriteError",
    "StoredRecord",
    "log_ids",
    "log_of",
]
