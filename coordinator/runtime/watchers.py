"""Group watchers: who must hear that a group changed, once the change is durable.

Rules
* The runtime calls :meth:`GroupWatchers.notify` with the group ids of a batch's records right
  after the batch became durable — never for a batch that failed (its changes were rolled
  back, nothing happened). A notification only says "look again": a watcher then *reads* what
  it needs (:func:`member_views` through a runtime read, which waits for the shard's
  outstanding batch), so it never sees state that could still be lost.
* Notifications coalesce: a watcher woken several times before it looks again looks once.
* :meth:`GroupWatchers.close` wakes every watcher for good (the runtime is stopping).

This is what the push stream (ConsumerGroupService.ConsumerGroupWatch) is built on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from coordinator.core.push import MemberView, member_view


class GroupWatch:
    """One watcher of one group: ``await changed()`` returns once something changed since the
    previous call (at once if it did meanwhile)."""

    __slots__ = ("_event", "closed", "group_id")

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self._event = asyncio.Event()
        self.closed = False

    def poke(self) -> None:
        """Make the next ``changed()`` return at once."""
        self._event.set()

    async def changed(self) -> None:
        await self._event.wait()
        self._event.clear()


class GroupWatchers:
    def __init__(self) -> None:
        self._by_group: dict[str, set[GroupWatch]] = {}
        self._closed = False

    @contextmanager
    def watch(self, group_id: str) -> Iterator[GroupWatch]:
        w = GroupWatch(group_id)
        if self._closed:
            w.closed = True
            w.poke()
        self._by_group.setdefault(group_id, set()).add(w)
        try:
            yield w
        finally:
            watchers = self._by_group.get(group_id)
            if watchers is not None:
                watchers.discard(w)
                if not watchers:
                    del self._by_group[group_id]

    def notify(self, group_ids: Iterable[str]) -> None:
        by_group = self._by_group
        if not by_group:
            return
        for group_id in set(group_ids):
            for w in by_group.get(group_id, ()):
                w.poke()

    def groups(self) -> list[str]:
        """The groups watched now."""
        return list(self._by_group)

    def close(self) -> None:
        self._closed = True
        for watchers in self._by_group.values():
            for w in watchers:
                w.closed = True
                w.poke()

    def __len__(self) -> int:
        return sum(len(w) for w in self._by_group.values())


GROUP_NOT_FOUND = "group-not-found"


def member_views(
    shard: object, group_id: str, member_ids: Iterable[str]
) -> Mapping[str, MemberView | None] | str:
    """The views of ``member_ids`` (None: not a member; ``core/push.py``), or GROUP_NOT_FOUND
    when the shard has no consumer group ``group_id``. Reads in-memory state only."""
    group = getattr(shard, "groups", {}).get(group_id)
    if group is None:
        return GROUP_NOT_FOUND
    return {member_id: member_view(group, member_id) for member_id in member_ids}
