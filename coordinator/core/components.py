"""The seams of a shard: what every component offers the shard, and what the shard asks of its
classic groups (the legacy bridge, which plugs in here; the core never imports it).

A *component* owns part of the shard's state and the record types that change it (Kafka's
GroupMetadataManager, OffsetMetadataManager, GroupConfigManager). The shard routes every record
to the component that declared its type, every timer to the component that declared its kind,
and asks each for its timers after a load, its part of the snapshot and the records that
rebuild it.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from . import records as r
from .commands import ConsumerGroupHeartbeat, ListedGroup, Result, WriteWatch
from .errors import CoordinatorError
from .timeline import TDict
from .timers import DueTimer, TimerOp

if TYPE_CHECKING:
    from .group import ConsumerGroup
    from .offset_requests import OffsetCommit


V = TypeVar("V")


class ByGroupId(Mapping[str, V]):
    """A component's state as a read-only mapping group id -> value. The component keeps it
    in ``_by_group`` (a dict of the undo log) and changes it only in its replay."""

    _by_group: TDict

    def __getitem__(self, group_id: str) -> V:
        value: V = self._by_group[group_id]
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_group)

    def __len__(self) -> int:
        return len(self._by_group)

    def __contains__(self, group_id: object) -> bool:
        return group_id in self._by_group

    def forget_groups(self, budget: int) -> int:
        """Remove groups' state, below the undo log, until ``budget`` is spent (each group
        counting its :meth:`weight`): a dropped shard's state being thrown away
        (``GroupCoordinatorShard.free``), each group freed as it goes. Returns what was
        spent."""
        by_group, popitem, weight = self._by_group, dict.popitem, self.weight
        spent = 0
        while by_group and spent < budget:
            spent += weight(popitem(by_group)[1])
        return spent

    def weight(self, value: V) -> int:
        """What freeing one group's state costs, in groups of no size (:meth:`forget_groups`):
        a component whose groups hold many objects counts them."""
        return 1


class Component(Protocol):
    def replayers(self) -> dict[r.RecordType, Callable[[r.Record], None]]:
        """The record types this component owns, each with the code that applies one."""
        ...

    def snapshot(self) -> dict[str, object]:
        """Its part of the shard's snapshot: everything replay determines, canonical."""
        ...

    def records_of_state(self) -> list[r.Record]:
        """The records that rebuild its current state (a compacted log)."""
        ...


class ClassicGroupSupport(Component, Protocol):
    """Classic groups (Kafka's ClassicGroup and the classic protocol), as the rest of the shard
    sees them. A read-only set of group ids; the requests of the classic protocol are the
    implementation's own business."""

    def __contains__(self, group_id: object) -> bool: ...

    def __iter__(self) -> Iterator[str]: ...

    def timer_handlers(self) -> dict[str, Callable[[DueTimer, int], Result[None]]]:
        """The timer kinds it arms, each with the code that runs when one falls due."""
        ...

    def on_loaded(self, now_ms: int) -> list[TimerOp]:
        """Timers to arm after a load."""
        ...

    def write_error_handlers(
        self,
    ) -> dict[str, Callable[[WriteWatch, CoordinatorError, int], Result[None]]]:
        """The kinds of :class:`~.commands.WriteWatch` it asks for, each with the code that
        runs when such a write fails or times out (with the error its requests were answered)."""
        ...

    def prepare_consumer_group(
        self, result: Result[Any], req: ConsumerGroupHeartbeat, now_ms: int
    ) -> bool:
        """A ConsumerGroupHeartbeat for ``req.group_id`` is about to run: a classic group of that
        id is upgraded to a consumer group, replaced (if empty) or the request refused (KIP-848
        "Online Migration"). Records go into ``result``. True when a non-empty classic group
        was upgraded."""
        ...

    def maybe_downgrade(self, result: Result[Any], group: ConsumerGroup, now_ms: int) -> None:
        """Members left ``group``: if only classic members remain, it may become a classic
        group again (KIP-848 downgrade). Records go into ``result``."""
        ...

    def check_offset_commit(self, req: OffsetCommit, transactional: bool = False) -> None:
        """Validate an OffsetCommit (a TxnOffsetCommit: ``transactional``) to the classic group
        ``req.group_id`` (member, generation, state), raising the error Kafka answers."""
        ...

    def listed(self) -> list[ListedGroup]:
        """ListGroups entries of the classic groups."""
        ...

    def listed_group(self, group_id: str) -> ListedGroup | None:
        """The ListGroups entry of the classic group ``group_id``; None if there is none."""
        ...

    def member_count(self) -> int:
        """Members of all the classic groups (pending members not included)."""
        ...

    def is_empty(self, group_id: str) -> bool:
        """The classic group ``group_id`` (which exists) is Empty: it may be deleted."""
        ...

    def subscribed_topics(self, group_id: str) -> Container[str]:
        """Topics the members of the classic group ``group_id`` subscribe to (their offsets do
        not expire; Kafka's ClassicGroup.isSubscribedToTopic)."""
        ...

    def delete_group(self, result: Result[Any], group_id: str) -> None:
        """Delete the (Empty) classic group ``group_id``, if there is one: its tombstone goes
        into ``result`` (DeleteGroups, the offset expiration)."""
        ...
