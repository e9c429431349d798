"""Values of the consumer group model: assignments, member states, members, topics.

All values are immutable. An *assignment* is a ``Mapping[topic_id, frozenset[int]]`` with no
empty sets (KIP-848 "Target Assignment" / "Current Assignment"); helpers here build, compare and
diff them. Topic ids are Kafka UUIDs in base64url text form.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from math import isqrt
from typing import Any

from assignors.api import TopicId, TopicMetadata

__all__ = [
    "EMPTY_ASSIGNMENT",
    "REMOVED",
    "ZERO_TOPIC_ID",
    "Assignment",
    "AssignmentEpochs",
    "ConsumerGroupMember",
    "LayeredMap",
    "MemberState",
    "PartitionRacks",
    "TopicImage",
    "TopicMetadata",
    "TopicsImage",
    "assignment_from_pairs",
    "assignment_intersection",
    "assignment_minus",
    "assignment_size",
    "assignment_union",
    "complete_epochs",
    "epoch_of",
    "epochs_restricted",
    "make_assignment",
    "make_partition_racks",
    "mapping_changed",
    "partition_racks_groups",
    "topic_id_from_bytes",
    "topic_id_to_bytes",
]

Assignment = Mapping[TopicId, frozenset[int]]
EMPTY_ASSIGNMENT: Assignment = {}
AssignmentEpochs = Mapping[int, Assignment]
"""KIP-1251: the member epoch at which each partition a member owns (assigned or pending
revocation) was assigned to it, grouped by epoch (epoch -> partitions; no empty sets, each
partition once)."""
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def topic_id_to_bytes(topic_id: TopicId) -> bytes:
    """Base64url text (22 chars, no padding) -> 16 raw bytes."""
    raw = base64.urlsafe_b64decode(topic_id + "==")
    if len(raw) != 16:
        raise ValueError(f"not a topic id: {topic_id!r}")
    return raw


def topic_id_from_bytes(raw: bytes) -> TopicId:
    """16 raw bytes -> base64url text (Kafka's ``Uuid.toString()``)."""
    if len(raw) != 16:
        raise ValueError(f"a topic id has 16 bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def make_assignment(
    items: Iterable[tuple[TopicId, Iterable[int]]],
) -> dict[TopicId, frozenset[int]]:
    """Build an assignment, merging duplicate topics and dropping empty sets."""
    out: dict[TopicId, frozenset[int]] = {}
    for topic_id, partitions in items:
        ps = frozenset(partitions)
        if ps:
            prev = out.get(topic_id)
            out[topic_id] = ps if prev is None else prev | ps
    return out


def make_partition_racks(
    items: Iterable[tuple[int, Iterable[str]]],
) -> PartitionRacks:
    """Partition racks in their normal form: partitions without racks dropped, each distinct
    set of racks one shared frozenset, partitions in ascending order."""
    shared: dict[frozenset[str], frozenset[str]] = {}
    out: dict[int, frozenset[str]] = {}
    for p, racks in sorted(items, key=lambda item: item[0]):
        value = frozenset(racks)
        if value:
            out[p] = shared.setdefault(value, value)
    return out


def partition_racks_groups(racks: PartitionRacks) -> list[tuple[list[str], list[int]]]:
    """Partition racks grouped: (sorted racks, ascending partitions) per distinct set of racks,
    in the order of the racks (how records and the API write them)."""
    by_racks: dict[frozenset[str], list[int]] = {}
    for p in sorted(racks):
        by_racks.setdefault(racks[p], []).append(p)
    return sorted((sorted(rs), ps) for rs, ps in by_racks.items())


def assignment_from_pairs(pairs: Iterable[tuple[TopicId, int]]) -> dict[TopicId, frozenset[int]]:
    acc: dict[TopicId, set[int]] = {}
    for topic_id, p in pairs:
        acc.setdefault(topic_id, set()).add(p)
    return {t: frozenset(ps) for t, ps in acc.items()}


def assignment_minus(a: Assignment, b: Assignment) -> dict[TopicId, frozenset[int]]:
    out: dict[TopicId, frozenset[int]] = {}
    for topic_id, ps in a.items():
        other = b.get(topic_id)
        rest = ps - other if other else ps
        if rest:
            out[topic_id] = rest
    return out


def assignment_union(a: Assignment, b: Assignment) -> dict[TopicId, frozenset[int]]:
    out = dict(a)
    for topic_id, ps in b.items():
        prev = out.get(topic_id)
        out[topic_id] = ps if prev is None else prev | ps
    return out


def assignment_size(a: Assignment) -> int:
    return sum(len(ps) for ps in a.values())


def assignment_intersection(a: Assignment, b: Assignment) -> dict[TopicId, frozenset[int]]:
    out: dict[TopicId, frozenset[int]] = {}
    for topic_id, ps in a.items():
        other = b.get(topic_id)
        if other:
            both = ps & other
            if both:
                out[topic_id] = both
    return out


def epoch_of(epochs: AssignmentEpochs, topic_id: TopicId, partition: int) -> int | None:
    """The epoch at which the partition was assigned; None if the member does not own it."""
    for epoch, assignment in epochs.items():
        partitions = assignment.get(topic_id)
        if partitions is not None and partition in partitions:
            return epoch
    return None


def epochs_restricted(epochs: AssignmentEpochs, keep: Assignment) -> dict[int, Assignment]:
    """Only the partitions of ``keep`` (each keeps its epoch)."""
    out: dict[int, Assignment] = {}
    for epoch, assignment in epochs.items():
        kept = assignment if assignment == keep else assignment_intersection(assignment, keep)
        if kept:
            out[epoch] = kept
    return out


def complete_epochs(
    epochs: AssignmentEpochs, assigned: Assignment, pending: Assignment, default_epoch: int
) -> AssignmentEpochs:
    """The epochs of exactly the owned partitions (``assigned`` and ``pending``): those
    ``epochs`` names keep their epoch, the others get ``default_epoch`` (Kafka: a record written
    before KIP-1251 reads as assigned at max(member epoch, 0))."""
    owned = assignment_union(assigned, pending) if pending else assigned
    if len(epochs) == 1:
        only = next(iter(epochs.values()))
        if only is owned or only == owned:
            return epochs
    if not owned:
        return {}
    if not epochs:
        return {default_epoch: owned}
    out = epochs_restricted(epochs, owned)
    covered: Assignment = {}
    for assignment in out.values():
        covered = assignment_union(covered, assignment)
    missing = assignment_minus(owned, covered)
    if missing:
        prev = out.get(default_epoch)
        out[default_epoch] = missing if prev is None else assignment_union(prev, missing)
    return out


class MemberState(Enum):
    """Reconciliation state of a member (persisted as int8, Kafka's numbers)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        """Any byte this build does not know maps to UNKNOWN (forward compatibility)."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassicMemberMetadata:
    """Present on members that speak the classic protocol (legacy bridge)."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMember:
    """A member: its metadata (record 5) and its current assignment (record 8)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor_name: str | None = None
    rebalance_timeout_ms: int = -1
    classic_member_metadata: ClassicMemberMetadata | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = field(default_factory=dict)
    partitions_pending_revocation: Assignment = field(default_factory=dict)
    assignment_epochs: AssignmentEpochs = field(default_factory=dict)
    """KIP-1251: when each owned partition was assigned (see :data:`AssignmentEpochs`); after
    replay it covers exactly the assigned and pending partitions."""

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic_member_metadata is not None


class _MemberUnderConstruction:
    """The slots of :class:`ConsumerGroupMember`, writable: :func:`build_member` fills one,
    then makes it the frozen class (a ``__class__`` assignment, which CPython allows between
    classes of the same layout). Each frozen field set through ``object.__setattr__`` is a
    slow generic call; these are plain slot stores, five times as fast in all."""

    __slots__ = ConsumerGroupMember.__slots__


_under_construction = object.__new__


def build_member(
    member_id: str,
    instance_id: str | None,
    rack_id: str | None,
    client_id: str,
    client_host: str,
    subscribed_topic_names: tuple[str, ...],
    subscribed_topic_regex: str | None,
    server_assignor_name: str | None,
    rebalance_timeout_ms: int,
    classic_member_metadata: ClassicMemberMetadata | None,
    member_epoch: int,
    previous_member_epoch: int,
    state: MemberState,
    assigned_partitions: Assignment,
    partitions_pending_revocation: Assignment,
    assignment_epochs: AssignmentEpochs,
) -> ConsumerGroupMember:
    """The same value as ``ConsumerGroupMember(...)`` with every field given, built several
    times as fast (no keyword parsing, no frozen-field setter). Replay uses it: a store load
    builds millions of members."""
    m: Any = _under_construction(_MemberUnderConstruction)
    m.member_id = member_id
    m.instance_id = instance_id
    m.rack_id = rack_id
    m.client_id = client_id
    m.client_host = client_host
    m.subscribed_topic_names = subscribed_topic_names
    m.subscribed_topic_regex = subscribed_topic_regex
    m.server_assignor_name = server_assignor_name
    m.rebalance_timeout_ms = rebalance_timeout_ms
    m.classic_member_metadata = classic_member_metadata
    m.member_epoch = member_epoch
    m.previous_member_epoch = previous_member_epoch
    m.state = state
    m.assigned_partitions = assigned_partitions
    m.partitions_pending_revocation = partitions_pending_revocation
    m.assignment_epochs = assignment_epochs
    m.__class__ = ConsumerGroupMember
    member: ConsumerGroupMember = m
    return member


PartitionRacks = Mapping[int, frozenset[str]]
"""Partition -> the racks of its replicas; partitions whose racks are unknown are absent (an
empty mapping: no rack information). Values are non-empty and shared between partitions with
the same racks."""


@dataclass(frozen=True, slots=True)
class TopicImage:
    topic_id: TopicId
    name: str
    num_partitions: int
    partition_racks: PartitionRacks = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicsImage:
    """The cluster's topics as the coordinator knows them (its topic registry). Immutable:
    a change produces a new image with a higher ``version``, whose mappings may be the last
    image's under the change (:class:`LayeredMap`); their order means nothing."""

    version: int = 0
    by_name: Mapping[str, TopicImage] = field(default_factory=dict)
    by_id: Mapping[TopicId, TopicImage] = field(default_factory=dict)

    @staticmethod
    def of(topics: Iterable[TopicImage], version: int = 0) -> TopicsImage:
        by_name = {t.name: t for t in topics}
        return TopicsImage(version, by_name, {t.topic_id: t for t in by_name.values()})

    def with_topics(self, topics: Iterable[TopicImage]) -> TopicsImage:
        return TopicsImage.of(topics, self.version + 1)


class _Removed:
    """In a :class:`LayeredMap`'s overlay: the key of its base is removed."""

    __slots__ = ()

    def __reduce__(self) -> str:
        return "REMOVED"  # pickled by name: one instance

    def __repr__(self) -> str:
        return "REMOVED"


REMOVED: Any = _Removed()
_ABSENT: Any = object()


class LayeredMap(Mapping[Any, Any]):
    """An immutable mapping made from another by a few changes without copying it: a base
    dict (shared with the mapping it came from; no one writes it) under a small overlay (key
    -> its value, or :data:`REMOVED` for a key of the base that is gone). Built by
    :func:`mapping_changed`, which makes it a plain dict again once the overlay grows, so a
    lookup costs at most two dict lookups. Its order (the base's keys, then the overlay's)
    means nothing."""

    __slots__ = ("_base", "_len", "_over")

    def __init__(self, base: dict[Any, Any], over: dict[Any, Any], length: int) -> None:
        self._base = base
        self._over = over
        self._len = length

    def __getitem__(self, key: Any) -> Any:
        value = self._over.get(key, _ABSENT)
        if value is _ABSENT:
            return self._base[key]
        if value is REMOVED:
            raise KeyError(key)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._over.get(key, _ABSENT)
        if value is _ABSENT:
            return self._base.get(key, default)
        return default if value is REMOVED else value

    def __contains__(self, key: object) -> bool:
        value = self._over.get(key, _ABSENT)
        if value is _ABSENT:
            return key in self._base
        return value is not REMOVED

    def __iter__(self) -> Iterator[Any]:
        over = self._over
        for key in self._base:
            if key not in over:
                yield key
        for key, value in over.items():
            if value is not REMOVED:
                yield key

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"LayeredMap({dict(self.items())!r})"


def mapping_changed(mapping: Mapping[Any, Any], changes: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """``mapping`` (a dict no one writes, or a :class:`LayeredMap`) with ``changes`` (key ->
    its new value, or :data:`REMOVED`), left as it is: a :class:`LayeredMap` over its base
    when the overlay stays under 64 + the square root of the base's size, in time
    proportional to the overlay; else a new plain dict (the base copied once every so many
    changes: a change costs about the square root of the size, amortized)."""
    if isinstance(mapping, LayeredMap):
        base, over, length = mapping._base, dict(mapping._over), mapping._len
    else:
        base = mapping if isinstance(mapping, dict) else dict(mapping)
        over, length = {}, len(base)
    for key, value in changes.items():
        was = over.get(key, _ABSENT)
        present = key in base if was is _ABSENT else was is not REMOVED
        if value is REMOVED:
            if present:
                length -= 1
                if key in base:
                    over[key] = REMOVED
                else:
                    del over[key]
        else:
            length += not present
            over[key] = value
    if len(over) <= 64 + isqrt(len(base)):
        return LayeredMap(base, over, length) if over else base
    # dict.copy clones the table (a C copy) while deletions left few free slots; dict() would
    # insert every entry again once any was deleted: 22 ms at 100,000 topics, not 2.
    flat = dict.copy(base)
    for key, value in over.items():
        if value is REMOVED:
            del flat[key]
        else:
            flat[key] = value
    return flat
