"""A classic group: Kafka's group membership protocol with a join barrier and a leader.

States (Kafka's ClassicGroupState): Empty -> PreparingRebalance -> CompletingRebalance -> Stable,
and back to PreparingRebalance on any membership or metadata change. Dead is never held (a
removed group simply disappears). The legal moves are data (:data:`VALID_PREVIOUS_STATES`, as
Kafka's ``validPreviousStates``): :meth:`ClassicGroup.transition` refuses any other, raising
before it changes anything.

Durability follows Kafka: the join and sync phases are transient (in memory, every write through
the shard's undo log so a failed batch rolls them back); each *completed generation* — the
leader's SyncGroup, a join phase that left the group empty, a static member replaced in a
stable group — is written as one GroupMetadata record (type 2). Loading rebuilds the group from
its last record: Stable with its members and assignments, or Empty.

A record that completes a rebalance also says how it came about (``rebalance``, ours: when the
group entered PreparingRebalance and CompletingRebalance, what started it, who was removed and
why), so the journal alone tells each classic rebalance's phases and causes (docs/analytics.md).
The group gathers it while the rebalance runs (:class:`RebalanceDraft`, through the undo log).

A record must fit the offsets topic's largest message, as Kafka's (``message.max.bytes``;
:func:`group_metadata_size`, :func:`record_size_error`): a larger one fails as Kafka's append
fails with MESSAGE_TOO_LARGE, answered UNKNOWN_SERVER_ERROR (docs/legacy_bridge.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum, StrEnum

from coordinator.core import records as r
from coordinator.core.errors import IllegalStateError, UnknownServerError
from coordinator.core.timeline import TDict, UndoLog

from .messages import Protocols


class ClassicGroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = ClassicGroupState
VALID_PREVIOUS_STATES: Mapping[ClassicGroupState, frozenset[ClassicGroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(
        {_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}
    ),
}
"""State -> the states a group may move to it from (Kafka's ClassicGroupState)."""

CLIENT_REASON_CHARS = 256
"""A client's rebalance reason is kept in the record up to this many characters."""


class RebalanceCause(StrEnum):
    """What started a classic rebalance (recorded in the GroupMetadata record that completes it;
    the names are the analytics' causes, docs/analytics.md)."""

    MEMBER_JOINED = "member_joined"
    """A new member's JoinGroup."""
    MEMBER_REJOINED = "member_rejoined"
    """A known member's JoinGroup with the same subscription: the leader noticed a metadata
    change, a cooperative member rejoins after revoking, or the client chose to (its reason
    says which, when it gives one)."""
    SUBSCRIPTION_CHANGED = "subscription_changed"
    """A known member rejoined subscribing to other topics."""
    MEMBER_LEFT = "member_left"
    MEMBER_FENCED_SESSION_TIMEOUT = "member_fenced_session_timeout"
    MEMBER_FENCED_REBALANCE_TIMEOUT = "member_fenced_rebalance_timeout"
    """A member did not send SyncGroup within the rebalance timeout."""
    STATIC_MEMBER_RESTART = "static_member_restart"
    """A static member came back under a new member id while the group was rebalancing, or
    with other protocols."""
    DOWNGRADED = "downgraded_from_consumer_group"
    ASSIGNMENT_NOT_STORED = "assignment_not_stored"
    """The write of the leader's SyncGroup (the generation's assignment) failed or was not
    durable within offsets.commit.timeout.ms: the group was reset and rebalanced (Kafka's
    "Error ... when storing group assignment during SyncGroup")."""


class RemovalCause(StrEnum):
    """Why a member left a classic group (recorded with the rebalance, as above)."""

    MEMBER_LEFT = "member_left"
    MEMBER_FENCED_SESSION_TIMEOUT = "member_fenced_session_timeout"
    MEMBER_FENCED_REBALANCE_TIMEOUT = "member_fenced_rebalance_timeout"
    """It did not rejoin, or did not send SyncGroup, within the rebalance timeout."""
    STATIC_MEMBER_REPLACED = "static_member_replaced"
    """A new incarnation of the static member took its place."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RebalanceDraft:
    """How the next generation is coming about, gathered while its rebalance runs; the
    ``rebalance`` of the record that completes it (and of the later records of that generation,
    written when a static member is replaced)."""

    preparing_ms: int | None = None
    completing_ms: int | None = None
    cause: str | None = None
    client_reason: str | None = None
    removed: tuple[r.GroupMetadataRemovedMember, ...] = ()

    def value(self) -> r.GroupMetadataRebalanceValue | None:
        if self.preparing_ms is None or self.completing_ms is None or self.cause is None:
            return None
        return r.GroupMetadataRebalanceValue(
            preparing_ms=self.preparing_ms,
            completing_ms=self.completing_ms,
            cause=self.cause,
            client_reason=self.client_reason,
            removed=self.removed,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_token: int | None = None
    """Set while its JoinGroup waits at the barrier."""
    sync_token: int | None = None
    """Set while its SyncGroup waits for the leader's assignment."""
    is_new: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def protocol_names(self) -> tuple[str, ...]:
        return tuple(name for name, _m in self.protocols)


class ClassicGroup:
    __slots__ = (
        "__weakref__",  # a dropped partition's groups are watched dying (tests)
        "_log",
        "assignment_write",
        "durable",
        "generation",
        "generation_rebalance",
        "group_id",
        "leader_id",
        "members",
        "new_member_added",
        "pending_members",
        "pending_sync",
        "previous_state",
        "protocol_name",
        "protocol_type",
        "rebalance",
        "state",
        "state_timestamp_ms",
        "static_members",
    )

    def __init__(self, log: UndoLog, group_id: str) -> None:
        self._log = log
        self.group_id = group_id
        self.state = ClassicGroupState.EMPTY
        self.previous_state = ClassicGroupState.EMPTY
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation = 0
        self.leader_id: str | None = None
        self.members: TDict = log.new_dict()  # member id -> ClassicMember (join order)
        self.static_members: TDict = log.new_dict()  # instance id -> member id
        self.pending_members: TDict = log.new_dict()  # member ids handed out by MEMBER_ID_REQUIRED
        self.pending_sync: TDict = log.new_dict()  # member ids expected to send SyncGroup
        self.new_member_added = False
        self.state_timestamp_ms = 0
        self.durable: r.GroupMetadataValue | None = None  # the last record replayed
        self.rebalance = RebalanceDraft()  # how the next generation is coming about
        self.generation_rebalance: r.GroupMetadataRebalanceValue | None = None
        """How the current generation came about (the ``rebalance`` of its records)."""
        self.assignment_write: int | None = None
        """The leader's SyncGroup (its token) whose assignment record made the group Stable in
        this generation: if that write fails or times out, the group is reset (Kafka's
        ``resetAndPropagateAssignmentWithError``) only if it still holds that assignment."""

    def set(self, name: str, value: object) -> None:
        self._log.set_attr(self, name, value)

    def transition(self, state: ClassicGroupState, now_ms: int) -> None:
        """Move to ``state``; an illegal move raises and changes nothing."""
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalStateError(
                f"classic group {self.group_id} cannot move from {self.state.value} to "
                f"{state.value} (it must be in one of "
                f"{', '.join(sorted(s.value for s in VALID_PREVIOUS_STATES[state]))})"
            )
        if state is ClassicGroupState.COMPLETING_REBALANCE or (
            state is ClassicGroupState.EMPTY and self.state is ClassicGroupState.PREPARING_REBALANCE
        ):
            self.set("rebalance", replace(self.rebalance, completing_ms=now_ms))
        self.set("previous_state", self.state)
        self.set("state", state)
        self.set("state_timestamp_ms", now_ms)

    # ------------------------------------------------------------------ rebalance draft

    def note_preparing(self, now_ms: int, cause: str, client_reason: str | None) -> None:
        """A rebalance starts (or starts over): the first since the last record is its start."""
        if self.rebalance.preparing_ms is None:
            reason = None if client_reason is None else client_reason[:CLIENT_REASON_CHARS]
            self.set(
                "rebalance",
                replace(self.rebalance, preparing_ms=now_ms, cause=cause, client_reason=reason),
            )

    def note_removal(self, member_id: str, cause: str, now_ms: int) -> None:
        removed = r.GroupMetadataRemovedMember(member_id=member_id, cause=cause, removed_ms=now_ms)
        self.set("rebalance", replace(self.rebalance, removed=(*self.rebalance.removed, removed)))

    # ------------------------------------------------------------------ membership

    def put_member(self, member: ClassicMember) -> None:
        old = self.members.get(member.member_id)
        if (
            old is not None
            and old.group_instance_id is not None
            and old.group_instance_id != member.group_instance_id
        ):
            self.static_members.discard(old.group_instance_id)
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.set("leader_id", member.member_id)

    def remove_member(self, member_id: str) -> ClassicMember | None:
        member = self.members.get(member_id)
        if member is None:
            return None
        del self.members[member_id]
        if (
            member.group_instance_id is not None
            and self.static_members.get(member.group_instance_id) == member_id
        ):
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.set("leader_id", next(iter(self.members), None))
        return member

    def all_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_token is not None for m in self.members.values()
        )

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ------------------------------------------------------------------ protocols

    def candidate_protocols(self) -> list[str]:
        """Protocols every member supports, in the order of the first member's preference."""
        members = list(self.members.values())
        if not members:
            return []
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return [n for n in members[0].protocol_names() if n in common]

    def supports_protocols(self, protocol_type: str, names: tuple[str, ...]) -> bool:
        """Kafka's ClassicGroup.supportsProtocols: an Empty group takes any; else the group's
        protocol type and a protocol every member supports (a member that joins again is
        counted with the protocols it has now)."""
        if self.state is ClassicGroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        if not self.members:
            return bool(names)
        return bool(set(self.candidate_protocols()) & set(names))

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; most votes wins, ties go to the
        earlier candidate (Kafka's vote)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id}: no protocol supported by every member")
        votes: Counter[str] = Counter()
        for m in self.members.values():
            for name in m.protocol_names():
                if name in candidates:
                    votes[name] += 1
                    break
        best = max(votes.values())
        return next(c for c in candidates if votes[c] == best)

    # ------------------------------------------------------------------ records

    def to_record_value(self) -> r.GroupMetadataValue:
        return r.GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol_name,
            leader=self.leader_id if self.members else None,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=tuple(
                r.GroupMetadataMemberValue(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.metadata(self.protocol_name),
                    assignment=m.assignment,
                )
                for m in self.members.values()
            ),
            rebalance=self.rebalance.value() or self.generation_rebalance,
        )

    def rebalance_recorded(self, value: r.GroupMetadataRebalanceValue) -> None:
        """A record completing the rebalance in progress was written: the generation it made
        is the group's now, and the next rebalance starts from nothing."""
        self.set("generation_rebalance", value)
        self.set("rebalance", RebalanceDraft())

    @classmethod
    def stable(
        cls,
        log: UndoLog,
        group_id: str,
        *,
        protocol_type: str,
        generation: int,
        members: Iterable[ClassicMember],
        now_ms: int,
    ) -> ClassicGroup:
        """A new group, Stable at ``generation`` from the start (a consumer group downgraded to
        a classic group; not a transition: the group did not exist)."""
        group = cls(log, group_id)
        for member in members:
            group.put_member(member)
        group.protocol_type = protocol_type
        group.generation = generation
        group.protocol_name = group.select_protocol()
        group.state = ClassicGroupState.STABLE
        group.state_timestamp_ms = now_ms
        return group

    @classmethod
    def from_record(cls, log: UndoLog, group_id: str, value: r.GroupMetadataValue) -> ClassicGroup:
        group = cls(log, group_id)
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.generation = value.generation
        group.state_timestamp_ms = value.current_state_timestamp_ms
        for mv in value.members:
            group.put_member(
                ClassicMember(
                    member_id=mv.member_id,
                    group_instance_id=mv.group_instance_id,
                    client_id=mv.client_id,
                    client_host=mv.client_host,
                    rebalance_timeout_ms=mv.rebalance_timeout_ms,
                    session_timeout_ms=mv.session_timeout_ms,
                    protocol_type=value.protocol_type,
                    protocols=((value.protocol or "", mv.subscription),),
                    assignment=mv.assignment,
                )
            )
        group.leader_id = (
            value.leader if value.leader in group.members else next(iter(group.members), None)
        )
        group.state = ClassicGroupState.STABLE if value.members else ClassicGroupState.EMPTY
        group.durable = value
        group.generation_rebalance = value.rebalance
        return group

    def snapshot(self) -> dict[str, object]:
        """What replay determines: the last durable record (the join/sync phases are transient)."""
        return {"classic": self.durable}


# A record batch's header (61 bytes) and one record's framing in it at its longest (its
# length, attributes, timestamp and offset deltas, key and value lengths, header count).
_BATCH_OVERHEAD = 61 + 5 + 1 + 10 + 5 + 5 + 5 + 5


def _string(s: str | None) -> int:
    return 2 + (0 if s is None else len(s.encode()))


def group_metadata_size(group_id: str, value: r.GroupMetadataValue) -> int:
    """The size of a classic group's record as Kafka appends it, alone in its batch: the
    batch's overhead, the GroupMetadata key (version 2) and the value in its version 3
    encoding (strings with an INT16 length, bytes with an INT32 one). Our trailing
    ``rebalance`` field is not Kafka's and is not counted."""
    key = 2 + _string(group_id)
    members = sum(
        _string(x.member_id)
        + _string(x.group_instance_id)
        + _string(x.client_id)
        + _string(x.client_host)
        + 4  # rebalance timeout
        + 4  # session timeout
        + 4
        + len(x.subscription)
        + 4
        + len(x.assignment)
        for x in value.members
    )
    # version, protocol type, generation, protocol, leader, state timestamp, member count
    head = 2 + _string(value.protocol_type) + 4 + _string(value.protocol) + _string(value.leader)
    return _BATCH_OVERHEAD + key + head + 8 + 4 + members


def record_size_error(
    group_id: str, value: r.GroupMetadataValue, limit: int
) -> UnknownServerError | None:
    """What Kafka answers when the append of a record larger than ``limit``
    (``message.max.bytes``) fails with MESSAGE_TOO_LARGE: UNKNOWN_SERVER_ERROR
    (``appendGroupMetadataErrorToResponseError``); None if the record fits."""
    size = group_metadata_size(group_id, value)
    if size <= limit:
        return None
    return UnknownServerError(
        f"The GroupMetadata record of group {group_id} would be {size} bytes, larger than "
        f"message.max.bytes ({limit}): MESSAGE_TOO_LARGE."
    )
