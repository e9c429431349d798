"""A coordinator shard: the single-threaded state machine that owns a set of groups.

The shard is composed of components, each owning its state and the records that change it
(Kafka's GroupCoordinatorShard and its managers):

* ``groups`` — :class:`~.consumer_groups.ConsumerGroups`, the KIP-848 consumer groups;
* ``offsets`` — :class:`~.offsets.Offsets`, committed offsets;
* ``group_configs`` — :class:`~.group_configs.GroupConfigs`, per-group dynamic configs;
* ``classic_groups`` — the classic groups, plugged in through
  :class:`~.components.ClassicGroupSupport` (the legacy bridge; the core does not import it);
* the topics image, shared by all through the :class:`~.context.ShardContext`.

Each is a read-only mapping by group id. The shard routes: every record to the component that
owns its :class:`~.records.RecordType`, every timer to the component that armed its kind, every
command to its component; commands that span components — DeleteGroups, ListGroups, the offset
expiration — are the shard's own.

Entry points take a command and ``now_ms`` and return a :class:`~.commands.Result`. A handler
validates (raising a typed :class:`~.errors.CoordinatorError` before changing anything), then
*emits* records: each is appended to the result and replayed at once through :meth:`replay` —
the only code that changes state, and the same code that loads a store. If a handler fails after
emitting, its changes are rolled back, so an error never leaves a trace. The runtime calls
:meth:`mark` before a command, makes the records durable, and calls :meth:`rollback` if the
write fails or :meth:`release` once it is durable. Timers are returned as keyed operations and
fire back in through :meth:`on_timer`. The shard holds no clock, no IO, no randomness.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from assignors.api import PartitionAssignor

from . import records as r
from .commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    IdSource,
    ListedGroup,
    Result,
    WriteWatch,
)
from .components import ByGroupId, ClassicGroupSupport, Component
from .config import GroupCoordinatorConfig
from .consumer_groups import ConsumerGroups
from .context import ShardContext
from .errors import CoordinatorError, ErrorCode, IllegalStateError, NonEmptyGroupError
from .events import Event, LogEvent
from .group import GroupState
from .group_configs import GroupConfigs
from .group_descriptions import GroupDescription, MemberDescription
from .model import TopicsImage
from .offsets import (
    OffsetCommit,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchGroup,
    OffsetFetchGroupResponse,
    Offsets,
    TxnOffsetCommit,
)
from .timeline import UndoLog
from .timers import DueTimer, TimerOp
from .transactions import AddOffsetsToTxn, Ended, EndTxn, GroupTransaction, ProducerInitialized

__all__ = [
    "DeleteGroupResult",
    "GroupCoordinatorShard",
    "GroupDescription",
    "MemberDescription",
    "ShardCensus",
    "ShardParts",
]

DeleteGroupResult = tuple[str, ErrorCode, str | None]
"""DeleteGroups' answer for one group: (group id, error code, error message)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardCensus:
    """How many groups, members and offsets a shard holds (the metrics' gauges)."""

    groups: Mapping[tuple[str, str], int]
    """(group type, state) -> groups, as ListGroups names them (offsets-only groups are
    classic/Empty)."""
    members: Mapping[tuple[str, str], int]
    """(group type, member type) -> members; member type ``consumer`` (KIP-848 protocol) or
    ``classic`` (JoinGroup/SyncGroup, also inside a consumer group)."""
    offsets: int
    """Committed offsets (partitions)."""


C = TypeVar("C", bound=ClassicGroupSupport)


@dataclass(frozen=True, slots=True)
class ShardParts:
    """What the classic-groups component is built from: the rest of its shard."""

    context: ShardContext
    groups: ConsumerGroups
    offsets: Offsets
    group_configs: GroupConfigs


class GroupCoordinatorShard(Generic[C]):
    def __init__(
        self,
        *,
        config: GroupCoordinatorConfig,
        assignors: Sequence[PartitionAssignor],
        ids: IdSource,
        classic_groups: Callable[[ShardParts], C],
        topics: TopicsImage | None = None,
    ) -> None:
        self.config = config
        self.context = ShardContext(
            config=config,
            ids=ids,
            topics=topics if topics is not None else TopicsImage(),
            replay=self.replay,
        )
        self.group_configs = GroupConfigs(self.context)
        self.groups = ConsumerGroups(self.context, assignors=assignors, configs=self.group_configs)
        self.offsets = Offsets(self.context, groups=self.groups)
        self.classic_groups: C = classic_groups(
            ShardParts(self.context, self.groups, self.offsets, self.group_configs)
        )
        self.groups.classic = self.classic_groups
        self.groups.other_groups = _OtherGroups(self.classic_groups, self.offsets)
        self.offsets.classic = self.classic_groups
        # Records and timers go to the component that owns them. Classic groups come first in
        # records_of_state (as they were written first by the bridged shards of old stores).
        self._components: tuple[Component, ...] = (
            self.classic_groups,
            self.groups,
            self.group_configs,
            self.offsets,
        )
        self._replayers: dict[r.RecordType, Callable[[r.Record], None]] = {}
        for component in self._components:
            self._replayers.update(component.replayers())
        self._timer_handlers = {
            **self.groups.timer_handlers(),
            **self.classic_groups.timer_handlers(),
        }
        self._write_error_handlers = self.classic_groups.write_error_handlers()

    @property
    def undo(self) -> UndoLog:
        """The undo log of all the shard's state (the loader switches it off while loading)."""
        return self.context.undo

    @property
    def topics(self) -> TopicsImage:
        return self.context.topics

    @property
    def ids(self) -> IdSource:
        return self.context.ids

    # ------------------------------------------------------------------ transactions

    def mark(self) -> int:
        return self.context.undo.mark()

    def rollback(self, mark: int) -> None:
        self.context.undo.rollback(mark)

    def release(self, mark: int) -> None:
        self.context.undo.release(mark)

    def set_topics(self, image: TopicsImage) -> None:
        """A new topics image (metadata update). Groups notice on their next heartbeat."""
        self.context.topics = image

    # ------------------------------------------------------------------ replay

    def replay(self, record: r.Record) -> None:
        """Apply one record: the only way state changes (handlers and loading alike)."""
        replayer = self._replayers.get(record.key.TYPE)
        if replayer is None:
            if record.key.TYPE is r.RecordType.TOPIC:
                raise IllegalStateError(
                    "topic registry records belong to the topic registry, not a shard"
                )
            raise IllegalStateError(f"no component of the shard owns {record.key.TYPE!r}")
        replayer(record)

    # ------------------------------------------------------------------ dropping

    def close(self) -> None:
        """The shard's partition was dropped (lost or handed over): nothing is applied to its
        state any more (a command that emits a record raises ``IllegalStateError``) and its
        undo log is emptied. Its state is then thrown away with :meth:`free`."""
        self.context.close()

    def free(self, budget: int) -> bool:
        """Throw away more of a closed shard's state, groups (each component's state of each
        group, below the undo log) until ``budget`` is spent, a group counting 1 plus its
        members or offsets (``ByGroupId.weight``), each freed by reference counting as it goes:
        the caller spreads a big partition over several calls. True once none is left; the
        shard is then taken apart: the parts built on its context (the components and theirs)
        refer to each other, and the context to the shard, a web of reference cycles that only
        a cyclic collection would free; every reference a part holds is cut, so that what is
        left goes as soon as the caller lets the shard go. Taken apart, the shard is unusable
        (its parts have no attributes)."""
        context = self.context
        if not context.closed:
            raise IllegalStateError("free: the shard was not closed")
        left = budget
        for component in self._components:
            if isinstance(component, ByGroupId):
                left -= component.forget_groups(left)
                if left <= 0 and component:
                    return False
        parts: dict[int, object] = {id(c): c for c in self._components}
        todo = list(parts.values())
        while todo:
            for value in vars(todo.pop()).values():
                if getattr(value, "_ctx", None) is context and id(value) not in parts:
                    parts[id(value)] = value
                    todo.append(value)
        for part in parts.values():
            vars(part).clear()
        return True

    # ------------------------------------------------------------------ commands

    def consumer_group_heartbeat(
        self, req: ConsumerGroupHeartbeat, now_ms: int
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        return self.groups.consumer_group_heartbeat(req, now_ms)

    def offset_commit(
        self, req: OffsetCommit, now_ms: int, *, legacy_version: bool = False
    ) -> Result[OffsetCommitResponse]:
        return self.offsets.offset_commit(req, now_ms, legacy_version=legacy_version)

    def offset_fetch(self, req: OffsetFetchGroup) -> OffsetFetchGroupResponse:
        return self.offsets.offset_fetch(req)

    # ------------------------------------------------------------------ transactions
    # (transactions.py; the Kafka listener tells the shard what the transaction coordinator
    # was asked and answered)

    def txn_offset_commit(self, req: TxnOffsetCommit, now_ms: int) -> Result[OffsetCommitResponse]:
        return self.offsets.txn_offset_commit(req, now_ms)

    def add_offsets_to_txn(self, cmd: AddOffsetsToTxn, now_ms: int) -> Result[None]:
        return self.offsets.add_offsets(cmd, now_ms)

    def end_transaction(self, cmd: EndTxn, now_ms: int) -> Result[Ended]:
        return self.offsets.txn.end_transaction(cmd, now_ms)

    def producer_initialized(self, cmd: ProducerInitialized, now_ms: int) -> Result[Ended]:
        return self.offsets.txn.producer_initialized(cmd, now_ms)

    def transactions(self) -> list[GroupTransaction]:
        return self.offsets.txn.transactions()

    def offset_delete(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> Result[OffsetDeleteResponse]:
        return self.offsets.offset_delete(group_id, topics)

    def on_topics_deleted(self, names: Sequence[str]) -> Result[None]:
        return self.offsets.on_topics_deleted(names)

    def group_config(self, group_id: str) -> dict[str, str]:
        """Effective per-group configs (overrides, else the broker defaults)."""
        return self.group_configs.effective(group_id)

    def delete_groups(self, group_ids: Sequence[str]) -> Result[list[DeleteGroupResult]]:
        """DeleteGroups: per group NONE, GROUP_ID_NOT_FOUND or NON_EMPTY_GROUP. A deleted group
        loses its offsets in the same command; its config overrides stay (cluster-level, as Kafka's
        ConfigRecords stay in the metadata log)."""
        answers: list[DeleteGroupResult] = []
        result: Result[list[DeleteGroupResult]] = Result(response=answers)
        classic = self.classic_groups
        for gid in group_ids:
            group = self.groups.get(gid)
            if (
                group is None
                and gid not in classic
                and gid not in self.offsets
                and not self.offsets.txn.has_transactions(gid)
            ):
                answers.append((gid, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found."))
                continue
            if group is not None and group.members:
                exc = NonEmptyGroupError(
                    f"Group {gid} is not empty ({len(group.members)} members)."
                )
                answers.append((gid, exc.code, exc.message))
                continue
            if gid in classic and not classic.is_empty(gid):
                exc = NonEmptyGroupError(f"Classic group {gid} is not empty.")
                answers.append((gid, exc.code, exc.message))
                continue
            result.absorb(self.context.run(self._delete_group, gid, "deleted"))
            answers.append((gid, ErrorCode.NONE, None))
        return result

    def _delete_group(self, group_id: str, reason: str) -> Result[None]:
        result: Result[None] = Result()
        self.offsets.delete_all(result, group_id)
        self.groups.delete_group(result, group_id)
        self.classic_groups.delete_group(result, group_id)
        result.events.append(
            LogEvent(event=Event.GROUP_DELETED, group_id=group_id, fields={"reason": reason})
        )
        return result

    def expire_offsets(self, now_ms: int) -> Result[None]:
        """The periodic cleanup (``offsets.retention.check.interval.ms``; Kafka's
        cleanupGroupMetadata): expire offsets of topics a group no longer subscribes to, then
        delete empty groups — consumer or classic — with no offsets left (and simple groups
        whose last offsets expired)."""
        return self.context.run(self._expire_offsets, now_ms)

    def _expire_offsets(self, now_ms: int) -> Result[None]:
        result: Result[None] = Result()
        classic = self.classic_groups
        self.offsets.txn.expire_fences(result, now_ms)  # producer.id.expiration.ms
        for gid in sorted(self.offsets.simple_groups() | set(self.groups) | set(classic)):
            group = self.groups.get(gid)
            subscribed: Container[str] = ()
            empty = True
            if group is not None:
                subscribed, empty = group.topic_subscribers, group.state() is GroupState.EMPTY
            elif gid in classic:
                subscribed, empty = classic.subscribed_topics(gid), classic.is_empty(gid)
            all_expired = self.offsets.expire(result, gid, subscribed, now_ms)
            if all_expired and empty:
                result.absorb(self._delete_group(gid, "expired"))
        return result

    def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> list[ListedGroup]:
        """ListGroups with case-insensitive state and type filters, states trimmed as Java's
        String.trim (Kafka's listGroups; an unknown state or type matches nothing): consumer
        groups, classic groups and simple groups (offsets only)."""
        want_states = {s.lower().strip(_JAVA_TRIMMED) for s in states}
        want_types = {t.lower() for t in types}
        classic = self.classic_groups
        entries = self.groups.listed() + classic.listed()
        entries += self.offsets.listed(_Either(self.groups, classic))
        return [
            e
            for e in sorted(entries, key=lambda g: g.group_id)
            if (not want_states or e.group_state.lower() in want_states)
            and (not want_types or e.group_type in want_types)
        ]

    def listed_group(self, group_id: str) -> ListedGroup | None:
        """The ListGroups entry of ``group_id`` (a consumer, classic or offsets-only group);
        None if the shard knows no such group."""
        listed = self.groups.listed_group(group_id)
        if listed is None:
            listed = self.classic_groups.listed_group(group_id)
        if listed is None and group_id in self.offsets.simple_groups():
            listed = ListedGroup(
                group_id=group_id, protocol_type="", group_state="Empty", group_type="classic"
            )
        return listed

    def census(self) -> ShardCensus:
        """Groups by type and state, members by group type and member type, offsets."""
        groups: dict[tuple[str, str], int] = {}
        for listed in self.list_groups():
            key = (listed.group_type, listed.group_state)
            groups[key] = groups.get(key, 0) + 1
        consumer = classic_in_consumer = 0
        for group in self.groups.values():
            consumer += len(group.members) - group.classic_members
            classic_in_consumer += group.classic_members
        members = {
            key: n
            for key, n in (
                (("consumer", "consumer"), consumer),
                (("consumer", "classic"), classic_in_consumer),
                (("classic", "classic"), self.classic_groups.member_count()),
            )
            if n
        }
        offsets = sum(len(o) for o in self.offsets.values())
        return ShardCensus(groups=groups, members=members, offsets=offsets)

    # ------------------------------------------------------------------ timers and loading

    def on_timer(self, timer: DueTimer, now_ms: int) -> Result[None]:
        """A timer fell due: its kind names the component that armed it."""
        handler = self._timer_handlers.get(timer.key[0])
        if handler is None:
            raise IllegalStateError(f"unknown timer kind {timer.key[0]}")
        return handler(timer, now_ms)

    def on_write_error(
        self, watch: WriteWatch, error: CoordinatorError, now_ms: int
    ) -> Result[None]:
        """The write of a change that asked to be watched (``Result.write_watches``) failed, or
        was not durable within the write timeout; ``error``: what its requests were answered.
        Its kind names the component that asked."""
        handler = self._write_error_handlers.get(watch.kind)
        if handler is None:
            raise IllegalStateError(f"unknown write watch kind {watch.kind}")
        return handler(watch, error, now_ms)

    def on_loaded(self, now_ms: int) -> list[TimerOp]:
        """After loading: the timers of every member (KIP-848 "Fail Over")."""
        return self.groups.on_loaded(now_ms) + self.classic_groups.on_loaded(now_ms)

    # ------------------------------------------------------------------ reads

    def describe_group(self, group_id: str) -> GroupDescription:
        return self.groups.describe(group_id)

    def group_state(self, group_id: str) -> GroupState:
        return self.groups.state_of(group_id)

    def snapshot(self) -> dict[str, Any]:
        """Everything replay determines, canonical and comparable."""
        out: dict[str, Any] = {}
        for component in self._components:
            out.update(component.snapshot())
        return out

    def records_of_state(self) -> list[r.Record]:
        """The canonical record list that rebuilds the current state (a compacted log)."""
        return [rec for component in self._components for rec in component.records_of_state()]


class _Either:
    """Group ids known to either of two components."""

    __slots__ = ("_a", "_b")

    def __init__(self, a: ConsumerGroups, b: ClassicGroupSupport) -> None:
        self._a, self._b = a, b

    def __contains__(self, group_id: object) -> bool:
        return group_id in self._a or group_id in self._b


_JAVA_TRIMMED = "".join(map(chr, range(0x21)))
"""What Java's String.trim removes from both ends: every character up to the space."""


class _OtherGroups:
    """Group ids of the shard's groups that are not consumer groups: classic groups, and
    simple groups (known only through their offsets, committed or pending)."""

    __slots__ = ("_classic", "_offsets")

    def __init__(self, classic: ClassicGroupSupport, offsets: Offsets) -> None:
        self._classic, self._offsets = classic, offsets

    def __contains__(self, group_id: object) -> bool:
        return (
            group_id in self._classic
            or group_id in self._offsets
            or (isinstance(group_id, str) and self._offsets.txn.has_transactions(group_id))
        )
