"""The server-side assignor SPI: one pure call, read-only inputs, one error type.

An assignor turns a *group spec* (who is in the group, what each member subscribes to, what
each member is currently targeted with) and the *metadata of the subscribed topics* into the
group's new target assignment (KIP-848 "Assignment Process", Kafka 4.0's
``ConsumerGroupPartitionAssignor``).

Rules for implementers
* ``assign`` must be a pure function of its inputs: no IO, no clock, no randomness, and no
  dependence on ``hash()`` seeds or mapping iteration order (sort when order matters). The same
  inputs must always give the same result.
* Every member of ``group_spec.members`` appears in the result (possibly with nothing).
* A partition is given to at most one member, only to a member subscribed to its topic, and
  only if the topic is in ``topics`` and the partition index is in ``range(num_partitions)``.
  The coordinator validates every result before installing it and refuses one that breaks
  these rules (the group then keeps its previous target assignment).
* A member subscribed to a topic id that is absent from ``topics`` is an error: raise
  :class:`PartitionAssignorError`. Any failure must be raised as that type; the coordinator
  answers the triggering request with UNKNOWN_SERVER_ERROR and changes nothing.
* Inputs are read-only. Partition sets are ``frozenset``s and may be shared between the input
  and the output (returning a member's current set unchanged is encouraged: it is cheap).

Optional extra (incremental assignors)
* The coordinator may also call ``assign_changes(group_spec, topics)`` on an assignor that has
  it (:class:`IncrementalPartitionAssignor`), with a spec carrying a :class:`TargetSummary`
  (the members' current loads and the unassigned partitions, kept up to date by the
  coordinator). It returns only the members whose assignment changes, or None to be called
  through ``assign`` instead. Assignors without it are unaffected: ``assign`` is the only call
  they ever get, with ``target_summary`` None.

Topic ids are Kafka UUIDs in their base64url text form (22 characters), as Kafka's tools
print them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import chain
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

__all__ = [
    "GroupAssignment",
    "GroupSpec",
    "IncrementalPartitionAssignor",
    "MemberAssignment",
    "MemberSubscription",
    "PartitionAssignor",
    "PartitionAssignorError",
    "SubscriptionType",
    "TargetSummary",
    "TopicId",
    "TopicMetadata",
]

TopicId = str
"""A Kafka topic id (UUID) in base64url form, e.g. ``"vUoHcKbRQRu-E0ATTUX9fA"``."""

MemberAssignment = Mapping[TopicId, frozenset[int]]
"""Topic id -> partition indexes. Topics with no partitions are omitted."""

_T = TypeVar("_T")


class SubscriptionType(Enum):
    """HOMOGENEOUS when every member subscribes to exactly the same topics."""

    HOMOGENEOUS = "HOMOGENEOUS"
    HETEROGENEOUS = "HETEROGENEOUS"


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberSubscription:
    """What one member asks for, and what it is currently targeted with."""

    rack_id: str | None
    instance_id: str | None
    subscribed_topic_ids: frozenset[TopicId]
    assignment: MemberAssignment
    """The member's current *target* assignment (empty for a new member)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetSummary:
    """Facts about the members' current target assignments, kept up to date by the coordinator
    as targets change, so that an assignor can find what must move without visiting every
    member (:class:`IncrementalPartitionAssignor`). When a spec carries one, the coordinator
    guarantees that every member's ``assignment`` holds only non-empty ``frozenset`` s of topics
    it subscribes to that are in ``topics``, with indexes in ``range(num_partitions)``, and that
    no partition is held by two members."""

    member_loads: Mapping[str, int]
    """Member id -> the number of partitions in its current assignment (every member)."""
    members_by_load: Mapping[int, Sequence[str]]
    """Load -> the ids of the members holding that many partitions, sorted (loads nobody has
    are absent)."""
    unassigned: Mapping[TopicId, Sequence[int]]
    """Topic id -> its partitions that no member holds, sorted (every topic in ``topics``)."""
    held_by_racks: Mapping[tuple[frozenset[str], str | None], int] | None = None
    """(the racks of a partition's replicas — empty when unknown —, the ``rack_id`` of the
    member holding it) -> how many partitions of the members' targets are so (pairs counting
    none are absent); None when the coordinator does not count them (no topic in ``topics`` has
    partition racks). What a rack-aware assignor needs to plan without visiting every
    partition."""
    members_by_rack: Mapping[str | None, Mapping[int, Sequence[str]]] | None = None
    """The members by their ``rack_id`` (None: no rack) and load: rack -> load -> the ids of
    the members of that rack holding that many partitions, sorted (racks and loads nobody has
    are absent); None when ``held_by_racks`` is None. With ``held_by_racks``, what a
    rack-aware assignor needs to plan without visiting every member."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSpec:
    """The group as the assignor sees it. ``members`` is keyed by member id."""

    members: Mapping[str, MemberSubscription]
    subscription_type: SubscriptionType
    partition_owners: Mapping[TopicId, Mapping[int, str]] = field(default_factory=dict)
    """Inverted current target assignment: topic id -> partition -> member id."""
    target_summary: TargetSummary | None = None
    """Only in the specs given to ``assign_changes`` (:class:`IncrementalPartitionAssignor`);
    ``members`` is then a read-only mapping in no particular order."""

    def is_partition_assigned(self, topic_id: TopicId, partition: int) -> bool:
        """True if the partition is in some member's current target assignment."""
        owners = self.partition_owners.get(topic_id)
        return owners is not None and partition in owners


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadata:
    """A subscribed topic. ``partition_racks`` maps a partition to the racks of its replicas;
    partitions whose racks are unknown are absent (it is empty when no rack is known)."""

    topic_id: TopicId
    name: str
    num_partitions: int
    partition_racks: Mapping[int, frozenset[str]] = field(default_factory=dict)
    _by_racks: dict[frozenset[str], tuple[int, ...]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _rack_codes: tuple[bytes, tuple[frozenset[str], ...]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _replica_racks: frozenset[str] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _memo: dict[Hashable, Any] | None = field(default=None, init=False, repr=False, compare=False)

    def memo(self, key: Hashable, make: Callable[..., _T], *args: Any) -> _T:
        """``make(*args)``, computed once per object and ``key`` and kept with it (the metadata is
        immutable): what an assignor derives from the topic and uses again on every call with
        the same metadata (the rack-aware ones: the partitions grouped by which of the
        members' racks hold a replica). ``make`` and its ``args`` rather than a closure: the
        callers look up many topics per call, and would build a ``functools.partial`` for each
        only to find the value kept."""
        memo = self._memo
        if memo is None:
            memo = {}
            object.__setattr__(self, "_memo", memo)
        if key in memo:
            return memo[key]
        value = memo[key] = make(*args)
        return value

    def replica_racks(self) -> frozenset[str]:
        """The racks that hold a replica of some partition (computed once per object)."""
        racks = self._replica_racks
        if racks is None:
            racks = (
                frozenset().union(*self.partitions_by_racks())
                if self.partition_racks
                else frozenset()
            )
            object.__setattr__(self, "_replica_racks", racks)
        return racks

    def partitions_by_racks(self) -> Mapping[frozenset[str], tuple[int, ...]]:
        """Every partition, grouped by the racks of its replicas: racks -> the partitions
        (ascending), in the order of the sorted racks; the partitions whose racks are unknown
        are under the empty set (first). Computed once per object (a topic's metadata is
        immutable), so an assignor called again with the same metadata does not pay for it
        again; a read-only view."""
        groups = self._by_racks
        if groups is None:
            by: dict[frozenset[str], list[int]] = {}
            racks = self.partition_racks
            n = max(0, self.num_partitions)
            for p in sorted(racks):
                rs = racks[p]
                if rs and 0 <= p < n:
                    by.setdefault(rs, []).append(p)
            known = sum(map(len, by.values()))
            if known < n:
                if known:
                    placed = set(chain.from_iterable(by.values()))
                    by[frozenset()] = [p for p in range(n) if p not in placed]
                else:
                    by[frozenset()] = list(range(n))
            groups = {rs: tuple(by[rs]) for rs in sorted(by, key=sorted)}
            object.__setattr__(self, "_by_racks", groups)
        return MappingProxyType(groups)

    def partition_rack_codes(self) -> tuple[bytes, tuple[frozenset[str], ...]] | None:
        """Every partition's racks as one byte: ``(codes, racks)`` with ``racks[codes[p]]`` the
        racks of partition ``p`` (the keys of :meth:`partitions_by_racks`, in order), so that
        per-partition work can be done with C-level bytes operations (``bytes.translate``,
        ``zip``). None when a topic has more than 256 distinct sets of racks. Computed once per
        object."""
        cached = self._rack_codes
        if cached is None:
            groups = self.partitions_by_racks()
            if len(groups) > 256:
                return None
            codes = bytearray(max(0, self.num_partitions))
            for j, partitions in enumerate(groups.values()):
                for p in partitions:
                    codes[p] = j
            cached = (bytes(codes), tuple(groups))
            object.__setattr__(self, "_rack_codes", cached)
        return cached


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupAssignment:
    """The new target assignment: member id -> its partitions."""

    members: Mapping[str, MemberAssignment]


class PartitionAssignorError(Exception):
    """The one error an assignor may raise. The coordinator turns it into
    UNKNOWN_SERVER_ERROR for the triggering request and keeps the group unchanged."""


@runtime_checkable
class PartitionAssignor(Protocol):
    """A server-side assignor. ``name`` is what members put in ``server_assignor``.

    An assignor that places partitions by racks (each member's ``rack_id``, each partition's
    ``partition_racks``) may say so with a class attribute ``rack_aware = True`` (optional; an
    assignor without it is taken as rack-blind): the conformance kit then checks its rack
    properties too (docs/assignors.md)."""

    name: ClassVar[str]

    def assign(
        self, group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
    ) -> GroupAssignment:
        """Compute the target assignment. ``topics`` holds the metadata of every topic that
        some member subscribes to and that exists."""
        ...


@runtime_checkable
class IncrementalPartitionAssignor(PartitionAssignor, Protocol):
    """An assignor that can also compute only what changes (an optional extra of the SPI).

    When an assignor has ``assign_changes``, the coordinator calls it first, with a spec whose
    ``target_summary`` is set, and falls back to ``assign`` (with a spec without a summary) when
    it returns None. The result is validated like any other and installed for the members it
    names; every other member keeps its current target."""

    def assign_changes(
        self, group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
    ) -> Mapping[str, MemberAssignment] | None:
        """The members whose assignment ``assign`` would change (member id -> its whole new
        assignment), each exactly as ``assign`` would give it, every member left out keeping its
        current one; or None when this spec is not one the assignor computes incrementally.
        Pure, like ``assign``; failures raise :class:`PartitionAssignorError`."""
        ...
