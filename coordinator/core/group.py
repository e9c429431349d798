"""A consumer group's in-memory state, changed only by :meth:`ConsumerGroup.replay_*`.

Besides what the records say (epochs, members, target assignment, subscription metadata,
resolved regexes) the group keeps derived indexes, updated in the same replay step so they can
never drift: static members by instance id, subscriber counts per topic name, member counts
per regex and per server assignor, the inverted target assignment, and the *current owner* of
every partition (assigned or pending revocation) — the invariant "a partition is owned by at
most one member" is checked here on every replay (KIP-848 "Reconciliation of the group").
Replay also marks the members whose assignor input may have changed (``spec_dirty``), so the
next target computation rebuilds the inputs of those members only (target_assignment.SpecCache).

Every write goes through the shard's :class:`~coordinator.core.timeline.UndoLog`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from enum import Enum
from typing import Any

from assignors.api import SubscriptionType, TopicId, TopicMetadata

from . import records as r
from .errors import IllegalStateError
from .model import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroupMember,
    MemberState,
    build_member,
    complete_epochs,
)
from .timeline import TDict, UndoLog

_STATES = {s.value: s for s in MemberState}
_NO_EPOCHS: dict[int, Assignment] = {}


class GroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class ConsumerGroup:
    __slots__ = (
        "__weakref__",  # a dropped partition's groups are watched dying (tests)
        "_log",
        "assignment_epoch",
        "assignment_timestamp_ms",
        "assignor_votes",
        "classic_members",
        "group_epoch",
        "group_id",
        "group_uid",
        "members",
        "metadata_checked",
        "offload_asked_at",
        "parked_at",
        "partition_owners",
        "regex_members",
        "regex_asked_ms",
        "regex_image_version",
        "regex_refreshed_ms",
        "regex_trigger",
        "reported_pending",
        "resolved_regexes",
        "spec_cache",
        "spec_dirty",
        "static_members",
        "subscription_metadata",
        "target",
        "target_owners",
        "topic_subscribers",
        "waiting",
    )

    def __init__(self, log: UndoLog, group_id: str) -> None:
        self._log = log
        new = log.new_dicts(12)  # each dict of the group's state, in one call
        self.group_id = group_id
        self.group_uid = ""
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.assignment_timestamp_ms = 0  # when the target was computed (0: compute at once)
        self.members: TDict = new[0]  # member id -> ConsumerGroupMember
        self.static_members: TDict = new[1]  # instance id -> member id
        self.target: TDict = new[2]  # member id -> Assignment
        self.target_owners: TDict = new[3]  # topic id -> TDict(partition -> member id)
        self.partition_owners: TDict = new[4]  # topic id -> TDict(partition -> member id)
        self.topic_subscribers: TDict = new[5]  # topic name -> number of members
        self.regex_members: TDict = new[6]  # regex -> number of members using it
        self.resolved_regexes: TDict = new[7]  # regex -> (frozenset of names, version)
        # When the regexes were last resolved (the latest resolution record's timestamp; -1:
        # never).
        self.regex_refreshed_ms = -1
        # Soft state: the topics image version they were resolved against (image versions are
        # process-local: -1 after a restart), when a resolution was asked for that has not run
        # yet (-1: none; Kafka: the executor has the group's task), and the (principal, client
        # host) of the heartbeat that asked (a regex resolves to what that member may describe).
        self.regex_image_version = -1
        self.regex_asked_ms = -1
        self.regex_trigger: tuple[object, str] | None = None
        self.subscription_metadata: dict[
            str, TopicMetadata
        ] = {}  # name -> metadata (replaced whole)
        self.assignor_votes: TDict = new[8]  # server assignor name -> members
        self.classic_members = 0
        # Soft state: (topics image version, group epoch) at the last metadata check.
        self.metadata_checked: tuple[int, int] = (-1, -1)
        # The assignor's inputs, cached (target_assignment.SpecCache); derived, not recorded,
        # but kept through the undo log like everything else so a rollback cannot make it lie.
        self.spec_cache: Any = None
        # Member ids whose assignor input may have changed since the cache last saw them (their
        # metadata or target was replayed, or they appeared): the cache rebuilds only these.
        self.spec_dirty: TDict = new[9]
        # Soft state: member id -> the pending partitions its last heartbeat response carried
        # (the target moves on between a member's heartbeats, so "did pending change" is asked
        # against what the member was told). Through the undo log like everything else; gone
        # after a restart, when the pending set at the start of the heartbeat stands in.
        self.reported_pending: TDict = new[10]
        # Soft state: member id -> the tokens of its join (and of that join sent again), not
        # answered yet, for members that joined the group before its first target
        # (ConsumerGroups.parks_joins); they are answered when that target is installed.
        # Empty after a restart (the callers are gone).
        self.waiting: TDict = new[11]
        self.parked_at = 0  # the assignment epoch when the first of them was parked
        # Soft state: the assignment epoch when a target computed off the loop was last asked
        # for (-1: never); while the target is still there, that computation is pending and the
        # next one is not done inline (target_updates.TargetUpdates.update).
        self.offload_asked_at = -1

    # ------------------------------------------------------------------ queries

    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        epoch = self.assignment_epoch
        for m in self.members.values():
            if not m.is_reconciled_to(epoch):
                return GroupState.RECONCILING
        return GroupState.STABLE

    def subscription_type(self) -> SubscriptionType:
        n = len(self.members)
        for count in self.topic_subscribers.values():
            if count != n:
                return SubscriptionType.HETEROGENEOUS
        return SubscriptionType.HOMOGENEOUS

    def effective_topics(self, member: ConsumerGroupMember) -> frozenset[str]:
        """Topic names a member subscribes to: its names plus what its regex resolved to."""
        regex = member.subscribed_topic_regex
        if regex:
            resolved = self.resolved_regexes.get(regex)
            if resolved is not None:
                return resolved[0].union(member.subscribed_topic_names)
        return frozenset(member.subscribed_topic_names)

    def owner_of(self, topic_id: TopicId, partition: int) -> str | None:
        owners = self.partition_owners.get(topic_id)
        return None if owners is None else owners.get(partition)

    def target_of(self, member_id: str) -> Assignment:
        return self.target.get(member_id, EMPTY_ASSIGNMENT)

    def preferred_assignor(self, configured: tuple[str, ...]) -> str:
        """The server assignor named by most members; ties go to the one configured first;
        none named: the default (first configured)."""
        best, best_votes = configured[0], 0
        for name in configured:
            votes = self.assignor_votes.get(name, 0)
            if votes > best_votes:
                best, best_votes = name, votes
        return best

    # ------------------------------------------------------------------ replay

    def set(self, name: str, value: object) -> None:
        self._log.set_attr(self, name, value)

    @property
    def undo(self) -> UndoLog:
        """The shard's undo log (for derived state kept beside the group, e.g. the spec cache)."""
        return self._log

    def _touch(self, member_id: str) -> None:
        if member_id not in self.spec_dirty:
            self.spec_dirty[member_id] = True

    def replay_group_metadata(self, value: r.ConsumerGroupMetadataValue) -> None:
        self.set("group_epoch", value.epoch)
        self.set("group_uid", value.group_uid)

    def replay_target_metadata(
        self, value: r.ConsumerGroupTargetAssignmentMetadataValue | None
    ) -> None:
        self.set("assignment_epoch", -1 if value is None else value.assignment_epoch)
        self.set("assignment_timestamp_ms", 0 if value is None else value.assignment_timestamp_ms)

    def replay_partition_metadata(
        self, value: r.ConsumerGroupPartitionMetadataValue | None
    ) -> None:
        self.set(
            "subscription_metadata", {} if value is None else {m.name: m for m in value.topics}
        )

    def replay_member_metadata(
        self, member_id: str, value: r.ConsumerGroupMemberMetadataValue | None
    ) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is None:
                return
            if old.member_epoch != -1 or member_id in self.target:
                raise IllegalStateError(
                    f"group {self.group_id}: member {member_id} metadata deleted before its "
                    "current and target assignments"
                )
            self._touch(member_id)
            self._unindex_member(old)
            del self.members[member_id]
            self.reported_pending.discard(member_id)
            return
        self._touch(member_id)
        # One explicit constructor call (dataclasses.replace is several times slower, and
        # loading a store replays millions of these).
        new = build_member(
            member_id,
            value.instance_id,
            value.rack_id,
            value.client_id,
            value.client_host,
            value.subscribed_topic_names,
            value.subscribed_topic_regex,
            value.server_assignor,
            value.rebalance_timeout_ms,
            value.classic_member_metadata,
            0 if old is None else old.member_epoch,
            0 if old is None else old.previous_member_epoch,
            MemberState.STABLE if old is None else old.state,
            EMPTY_ASSIGNMENT if old is None else old.assigned_partitions,
            EMPTY_ASSIGNMENT if old is None else old.partitions_pending_revocation,
            _NO_EPOCHS if old is None else old.assignment_epochs,
        )
        if old is not None:
            self._unindex_member(old)
        self._index_member(new)
        self.members[member_id] = new

    def _index_member(self, m: ConsumerGroupMember) -> None:
        if m.instance_id is not None:
            self.static_members[m.instance_id] = m.member_id
        for name in self.effective_topics(m):
            self.topic_subscribers.increment(name, 1)
        if m.subscribed_topic_regex:
            self.regex_members.increment(m.subscribed_topic_regex, 1)
        if m.server_assignor_name is not None:
            self.assignor_votes.increment(m.server_assignor_name, 1)
        if m.classic_member_metadata is not None:
            self.set("classic_members", self.classic_members + 1)

    def _unindex_member(self, m: ConsumerGroupMember) -> None:
        if m.instance_id is not None and self.static_members.get(m.instance_id) == m.member_id:
            del self.static_members[m.instance_id]
        for name in self.effective_topics(m):
            self.topic_subscribers.increment(name, -1)
        if m.subscribed_topic_regex:
            self.regex_members.increment(m.subscribed_topic_regex, -1)
        if m.server_assignor_name is not None:
            self.assignor_votes.increment(m.server_assignor_name, -1)
        if m.classic_member_metadata is not None:
            self.set("classic_members", self.classic_members - 1)

    def replay_regex(self, regex: str, value: r.ConsumerGroupRegularExpressionValue | None) -> None:
        users = [m for m in self.members.values() if m.subscribed_topic_regex == regex]
        for m in users:
            for name in self.effective_topics(m):
                self.topic_subscribers.increment(name, -1)
        if value is None:
            self.resolved_regexes.discard(regex)
        else:
            self.resolved_regexes[regex] = (frozenset(value.topics), value.version)
            if value.timestamp_ms > self.regex_refreshed_ms:
                self.set("regex_refreshed_ms", value.timestamp_ms)
        for m in users:
            for name in self.effective_topics(m):
                self.topic_subscribers.increment(name, 1)

    def replay_target_member(
        self, member_id: str, value: r.ConsumerGroupTargetAssignmentMemberValue | None
    ) -> None:
        # The inverted target index is lenient: within one new target assignment, the records
        # of the members are replayed one by one, so a moved partition is briefly in two
        # targets. The newest writer wins; a member only removes entries that still name it.
        self._touch(member_id)
        # Only what changed for the member is touched (set differences, in C): a target that
        # shrinks or grows by a few partitions costs those few, whatever its size.
        old = self.target.get(member_id) or EMPTY_ASSIGNMENT
        new = EMPTY_ASSIGNMENT if value is None else value.topic_partitions
        index = self.target_owners
        for topic_id, partitions in old.items():
            kept = new.get(topic_id)
            gone = partitions - kept if kept else partitions
            owners = index.get(topic_id) if gone else None
            if owners is None:
                continue
            get = owners.get
            owners.del_many([p for p in gone if get(p) == member_id])
            if not owners:
                del index[topic_id]
        for topic_id, partitions in new.items():
            before = old.get(topic_id)
            added = partitions - before if before else partitions
            if not added:
                continue
            owners = index.get(topic_id)
            if owners is None:
                owners = TDict(self._log)
                index[topic_id] = owners
            owners.set_many(added, member_id)
        if value is None:
            self.target.discard(member_id)
        else:
            self.target[member_id] = new

    def replay_current_assignment(
        self, member_id: str, value: r.ConsumerGroupCurrentMemberAssignmentValue | None
    ) -> None:
        old = self.members.get(member_id)
        if old is not None:
            self._unown(self.partition_owners, old.assigned_partitions, member_id, "current")
            self._unown(
                self.partition_owners, old.partitions_pending_revocation, member_id, "current"
            )
        if value is None:
            if old is None:
                return
            self.members[member_id] = replace(
                old,
                member_epoch=-1,
                previous_member_epoch=-1,
                state=MemberState.STABLE,
                assigned_partitions=EMPTY_ASSIGNMENT,
                partitions_pending_revocation=EMPTY_ASSIGNMENT,
                assignment_epochs=_NO_EPOCHS,
            )
            return
        state = _STATES.get(value.state) or MemberState.from_value(value.state)
        # KIP-1251: a record without epochs (written before them) reads as every partition
        # assigned at max(member epoch, 0), as Kafka's; one that misses some gets the same.
        epochs = complete_epochs(
            _NO_EPOCHS if value.assignment_epochs is None else value.assignment_epochs,
            value.assigned_partitions,
            value.partitions_pending_revocation,
            max(value.member_epoch, 0),
        )
        if old is None:
            self._touch(member_id)
            new = build_member(
                member_id,
                None,
                None,
                "",
                "",
                (),
                None,
                None,
                -1,
                None,
                value.member_epoch,
                value.previous_member_epoch,
                state,
                value.assigned_partitions,
                value.partitions_pending_revocation,
                epochs,
            )
        else:
            new = build_member(
                member_id,
                old.instance_id,
                old.rack_id,
                old.client_id,
                old.client_host,
                old.subscribed_topic_names,
                old.subscribed_topic_regex,
                old.server_assignor_name,
                old.rebalance_timeout_ms,
                old.classic_member_metadata,
                value.member_epoch,
                value.previous_member_epoch,
                state,
                value.assigned_partitions,
                value.partitions_pending_revocation,
                epochs,
            )
        self._own(self.partition_owners, new.assigned_partitions, member_id, "current")
        self._own(self.partition_owners, new.partitions_pending_revocation, member_id, "current")
        if old is None:
            self._index_member(new)
        self.members[member_id] = new

    def _own(self, index: TDict, assignment: Assignment, member_id: str, what: str) -> None:
        """Strict: a partition is owned (assigned or pending revocation) by at most one member."""
        for topic_id, partitions in assignment.items():
            owners = index.get(topic_id)
            if owners is None:
                owners = TDict(self._log)
                index[topic_id] = owners
            for p in partitions:
                holder = owners.get(p)
                if holder is not None and holder != member_id:
                    raise IllegalStateError(
                        f"group {self.group_id}: {what} partition {topic_id}-{p} given to {member_id} "
                        f"while owned by {holder}"
                    )
            owners.set_many(partitions, member_id)

    def _unown(self, index: TDict, assignment: Assignment, member_id: str, what: str) -> None:
        for topic_id, partitions in assignment.items():
            owners = index.get(topic_id)
            for p in partitions:
                holder = None if owners is None else owners.get(p)
                if holder != member_id:
                    raise IllegalStateError(
                        f"group {self.group_id}: {what} partition {topic_id}-{p} released by {member_id} "
                        f"but owned by {holder}"
                    )
            if owners is None:
                continue  # nothing was released (an empty set: nothing to check either)
            owners.del_many(partitions)
            if not owners:
                del index[topic_id]

    def check_deletable(self) -> None:
        """A group tombstone comes last: after every member, the target assignment epoch and
        the subscription metadata were tombstoned."""
        if self.members or self.target:
            raise IllegalStateError(
                f"group {self.group_id} deleted while it still has members or a target assignment"
            )
        if self.assignment_epoch != -1 or self.subscription_metadata:
            raise IllegalStateError(
                f"group {self.group_id} deleted before its target assignment epoch and subscription metadata"
            )

    # ------------------------------------------------------------------ snapshot

    def snapshot(self) -> dict[str, object]:
        """A canonical, comparable view of everything replay determines (for tests/dumps)."""

        def a(x: Assignment) -> dict[str, list[int]]:
            return {t: sorted(ps) for t, ps in sorted(x.items())}

        return {
            "group_id": self.group_id,
            "group_uid": self.group_uid,
            "group_epoch": self.group_epoch,
            "assignment_epoch": self.assignment_epoch,
            **(
                {"assignment_timestamp_ms": self.assignment_timestamp_ms}
                if self.assignment_timestamp_ms
                else {}
            ),
            "subscription_metadata": {
                n: (t.topic_id, t.num_partitions)
                for n, t in sorted(self.subscription_metadata.items())
            },
            "resolved_regexes": {
                k: (sorted(v[0]), v[1]) for k, v in sorted(self.resolved_regexes.items())
            },
            **(
                {"regex_refreshed_ms": self.regex_refreshed_ms}
                if self.regex_refreshed_ms >= 0
                else {}
            ),
            "members": {
                mid: {
                    "instance_id": m.instance_id,
                    "rack_id": m.rack_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed_topic_names),
                    "subscribed_topic_regex": m.subscribed_topic_regex,
                    "server_assignor": m.server_assignor_name,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "classic": m.classic_member_metadata,
                    "member_epoch": m.member_epoch,
                    "previous_member_epoch": m.previous_member_epoch,
                    "state": m.state.name,
                    "assigned": a(m.assigned_partitions),
                    "pending_revocation": a(m.partitions_pending_revocation),
                    "assignment_epochs": {e: a(x) for e, x in sorted(m.assignment_epochs.items())},
                }
                for mid, m in sorted(self.members.items())
            },
            "target": {mid: a(t) for mid, t in sorted(self.target.items())},
            "derived": {
                "static_members": dict(sorted(self.static_members.items())),
                "topic_subscribers": dict(sorted(self.topic_subscribers.items())),
                "regex_members": dict(sorted(self.regex_members.items())),
                "assignor_votes": dict(sorted(self.assignor_votes.items())),
                "classic_members": self.classic_members,
                "partition_owners": {
                    t: dict(sorted(o.items())) for t, o in sorted(self.partition_owners.items())
                },
                "target_owners": {
                    t: dict(sorted(o.items())) for t, o in sorted(self.target_owners.items())
                },
            },
        }


def iter_assignment(a: Assignment) -> Iterable[tuple[TopicId, int]]:
    for topic_id, partitions in a.items():
        for p in partitions:
            yield topic_id, p
