"""Record store: the durable home of the coordinator's records.

Rules and theory of operation:

* The store keeps opaque records (key bytes, value bytes or None = tombstone, group id) and
  knows nothing of the core: it never imports ``coordinator.core``.
* Durability contract: ``append(records, timestamp_ms)`` writes one batch atomically (all or
  nothing) and returns only once it is durable; the runtime releases responses after that. A
  failed append raises ``StoreWriteError`` and nothing of the batch is visible, unless
  ``outcome_unknown`` is set (a failed commit): then the store refuses all further appends until
  reopened, and the runtime must reload from it. Group commit = many commands' records in one
  ``append``.
* Two views of the same appends. The *compacted view* (``load()``) holds each key's latest value
  in the order of the offsets of those writes; tombstones delete. The runtime replays it at
  start-up. The *journal* (``journal()``) holds every record with its offset and timestamp, for
  analytics. Retention cuts a prefix of it and never touches the compacted view: with
  ``journal_retention_ms`` set, ``append`` applies it by itself (batch timestamp = now, once a
  minute, bounded work per call); ``expire_journal`` does it on demand. Offsets start at 0 and
  are never reused.
* Thread model: all methods are thread-safe. The runtime calls ``append`` from one writer thread;
  readers (``load``, ``journal``) see a snapshot taken when they are called and do not block it.
* ``SqliteRecordStore`` (default, ``<data-dir>/coordinator.db``, WAL, fsync per commit) refuses
  stores written by a newer schema version (``StoreVersionError``). Only a *missing* store is
  created; anything present that is not a valid, complete store is refused, never replaced
  (``StoreCorruptError``), and what cannot be accessed says why (``StoreAccessError``:
  read-only, permissions; ``StoreLockedError``: another writer). ``MemoryRecordStore`` has the same semantics plus fault
  injection, for tests.
"""

from .api import (
    JournalEntry,
    RecordStore,
    StoreAccessError,
    StoreCorruptError,
    StoredRecord,
    StoreError,
    StoreLockedError,
    StoreLostError,
    StoreVersionError,
    StoreWriteError,
)
from .memory import MemoryRecordStore
from .sqlite import DATA_FILE_NAME, SCHEMA_VERSION, SqliteRecordStore

__all__ = [
    "DATA_FILE_NAME",
    "SCHEMA_VERSION",
    "JournalEntry",
    "MemoryRecordStore",
    "RecordStore",
    "SqliteRecordStore",
    "StoreAccessError",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreLostError",
    "StoreVersionError",
    "StoreWriteError",
    "StoredRecord",
]
