"""One batch of the PostgreSQL store (:mod:`.postgres`) as the arrays its statements take."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .api import Fence, StoredRecord

__all__ = ["Rows"]


class Rows:
    """One batch as the arrays its statements take."""

    __slots__ = ("deletes", "fence", "firsts", "j", "logs", "puts")

    def __init__(self, fence: Fence | None) -> None:
        self.fence = fence
        self.logs: list[int] = []
        self.firsts: dict[int, int] = {}  # log -> the offset of its first record
        self.j: tuple[list[Any], ...] = ([], [], [], [], [], [], [])
        self.puts: dict[tuple[int, bytes], tuple[int, str | None, bytes]] = {}
        self.deletes: set[tuple[int, bytes]] = set()

    def add(self, log: int, first: int, ts: int, records: Sequence[StoredRecord]) -> None:
        logs, offsets, tss, epochs, gids, keys, values = self.j
        n = len(records)
        self.logs.append(log)
        self.firsts[log] = first
        epoch = -1 if self.fence is None or log < 0 else self.fence.epochs.get(log, -1)
        logs.extend([log] * n)
        offsets.extend(range(first, first + n))
        tss.extend([ts] * n)
        epochs.extend([epoch] * n)
        for offset, rec in enumerate(records, first):
            gids.append(rec.group_id)
            keys.append(rec.key)
            values.append(rec.value)
            where = (log, rec.key)
            if rec.value is None:  # the batch's last write of a key decides
                self.puts.pop(where, None)
                self.deletes.add(where)
            else:
                self.deletes.discard(where)
                self.puts[where] = (offset, rec.group_id, rec.value)

    def journal(self) -> tuple[list[Any], ...]:
        return self.j

    def first_row(self) -> tuple[int, int, int, bytes, bytes | None]:
        """(log, offset, timestamp, key, value) of the batch's first journal row."""
        logs, offsets, tss, _epochs, _gids, keys, values = self.j
        return logs[0], offsets[0], tss[0], keys[0], values[0]

    def fenced(self) -> tuple[int, list[int], list[int]]:
        """(node, partitions, epochs) for kip848_fence: every partition the batch writes (the
        cluster log has no lease)."""
        assert self.fence is not None
        parts = [log for log in self.logs if log >= 0]
        return self.fence.node_id, parts, [self.fence.epochs.get(p, -1) for p in parts]

    def upserts(self) -> tuple[list[Any], ...]:
        items = list(self.puts.items())
        return (
            [log for (log, _), _v in items],
            [key for (_, key), _v in items],
            [v[0] for _k, v in items],
            [v[1] for _k, v in items],
            [v[2] for _k, v in items],
        )

    def tombstones(self) -> tuple[list[Any], ...]:
        items = sorted(self.deletes)
        return [log for log, _ in items], [key for _, key in items]


def landed(conn: Any, rows: Rows) -> bool:
    """The batch's first journal row is in PostgreSQL, as the batch wrote it (``conn``: a
    connection of the store)."""
    log, offset, ts, key, value = rows.first_row()
    found = conn.execute(
        'SELECT timestamp_ms, key, value FROM kip848_journal WHERE log = %s AND "offset" = %s',
        (log, offset),
    ).fetchone()
    return found is not None and (found[0], bytes(found[1]), _bytes(found[2])) == (ts, key, value)


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)
