"""Requests' reads of groups, answered from the committed state without waiting for writes
they do not depend on (Kafka's ``CoordinatorRuntime.scheduleReadOperation``, which reads a
shard's timeline structures as of its last committed offset).

A shard's in-memory state runs ahead of its log: a command's records are applied before they
are durable, and a failed write with records of the shard rolls it back (undo log) to just
before its first records in it — every change logged since, records or not, whatever group it
belongs to (a shard without records in the failed write is not rolled back). :class:`Reads`
keeps, per shard, which groups have such a change (their records in an outstanding batch, or a
change made without records — a classic rebalance's state, which Kafka keeps in memory — while
a batch with the shard's records was outstanding; a command whose group the driver does not
know marks the shard as a whole), each with the last outstanding batch whose failure would roll
it back. A read of a group with none reads the current state, which is then its committed
state (groups of a shard are independent: a rollback restores no entry of theirs); any other
read reads the shard as of its mark before its records in its oldest outstanding batch holding
any (``UndoLog.as_of``: undone, read, redone — exactly).
The topics image of every read is the cluster log's as of its last durable write
(``committed.py``, when the host keeps one). A batch's durability clears what it marked before
any of its answers is released, so a writer that got its answer reads its write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

Batch = Any
"""A batch of ``driver.py`` (not imported: the driver composes this)."""


class Reads:
    """The reads of one driver (see the module doc)."""

    __slots__ = ("_driver", "_uncommitted")

    def __init__(self, driver: Any) -> None:
        self._driver = driver
        # per shard: group id (None: the shard as a whole) -> the last outstanding batch whose
        # failure would roll back a change of it
        self._uncommitted: list[dict[str | None, Batch]] = [{} for _ in driver.shards]

    def read(
        self,
        index: int,
        fn: Callable[[Any], Any],
        groups: Iterable[str] | None = None,
        *,
        latest: bool = False,
    ) -> tuple[Any, Batch | None]:
        """A request's pure read of shard ``index`` (``fn(shard)``, which changes nothing) about
        ``groups`` (None: the shard as a whole, as ListGroups), run now, outside the turns.

        By default it reads the committed state and is answered at once: ``(answer, None)`` —
        the current state when none of ``groups`` has a change a failed write could roll back,
        else the shard's state as of just before its records in its oldest outstanding batch.

        ``latest`` (OffsetFetch with ``require_stable``, which Kafka runs as a write without
        records): it reads the current state and returns the batch its answer waits for — the
        last outstanding batch holding a change of ``groups`` (None: none, answer at once) —
        not the shard's last batch, as a write without records waits for."""
        driver = self._driver
        driver.check_serving()
        driver.lead.check(index)
        shard = driver.shards[index]
        risky = self._uncommitted[index]
        touched: list[Batch] = []
        if risky:
            if groups is None or None in risky:
                touched = list(risky.values())
            else:
                touched = [risky[g] for g in groups if g in risky]
        wait: Batch | None = None
        as_of: int | None = None
        if touched:
            pending = driver.pending
            if latest:  # batches resolve in order: the newest is the one to wait for
                wait = pending if any(b is pending for b in touched) else driver.inflight
            else:  # as of just before the shard's records in its oldest outstanding batch
                as_of = next(
                    b.start_marks[index]
                    for b in (driver.inflight, driver.pending)
                    if b is not None and index in b.start_marks
                )
        committed = driver.committed
        image = shard.topics
        if committed is not None and driver.registry_outstanding():
            shard.set_topics(committed.registry.image())
        try:
            run = partial(driver.run_command, index, shard, fn, shard.mark())
            out = run() if as_of is None else shard.undo.as_of(as_of, run)
        finally:
            shard.set_topics(image)
        obs = driver.observer
        if obs is not None and (wait is not None or obs.span is not None):
            obs.ran(index, shard, (), (), wait)
        return out, wait

    def uncommit(self, index: int, batch: Batch, groups: Iterable[str | None]) -> None:
        """These groups of shard ``index`` (None: the shard as a whole) have a change that
        ``batch`` failing would roll back, until it is durable."""
        risky = self._uncommitted[index]
        for group in groups:
            risky[group] = batch
        batch.groups.setdefault(index, set()).update(groups)

    def settled(self, batch: Batch) -> None:
        """``batch`` is durable: what it marked is committed (unless a later batch marked it)."""
        for index, groups in batch.groups.items():
            risky = self._uncommitted[index]
            for group in groups:
                if risky.get(group) is batch:
                    del risky[group]

    def failed(self) -> None:
        """A write failed: every outstanding batch failed, every shard with records in them is
        rolled back (the others' changes were committed)."""
        for risky in self._uncommitted:
            risky.clear()

    def forget(self, index: int) -> None:
        """Shard ``index``'s state machine was replaced: nothing outstanding is of the new one."""
        self._uncommitted[index].clear()
