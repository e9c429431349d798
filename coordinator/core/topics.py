"""The topic registry: the coordinator's own source of topic metadata (AdminService topic RPCs).

A small state machine in the same style as a shard: handlers validate per topic (Kafka's
per-topic error codes), emit ``TopicKey`` records (a tombstone deletes a topic), and replay
builds the state. Each change yields a new immutable :class:`TopicsImage` with a higher
process-local version, which the runtime hands to every shard. A deleted and re-created topic
gets a new topic id (KIP-848 "Topic ID and Topic Recreation").

In front of a broker (``--kafka-upstream``) the registry *follows* the broker instead:
:meth:`TopicRegistry.apply_snapshot` makes it equal to the broker's metadata (names, ids,
partition counts — Kafka's metadata image) with the same ordinary topic records, so replay is
unchanged. The broker is the source of truth there, so its names are taken as they are.

The registry is the *cluster-level* state machine: other cluster-wide state (the security
metadata: ACLs and SCRAM credentials, which Kafka also keeps in its metadata log) plugs into
it as components (:meth:`TopicRegistry.plug`), sharing its undo log, so they are loaded,
written and rolled back with it; the registry routes their record types to them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import records as r
from .commands import IdSource, Result
from .components import Component
from .errors import (
    CoordinatorError,
    ErrorCode,
    IllegalStateError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from .model import (
    REMOVED,
    ZERO_TOPIC_ID,
    PartitionRacks,
    TopicImage,
    TopicsImage,
    make_partition_racks,
    mapping_changed,
)
from .timeline import TDict, UndoLog

MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS = 1_000_000
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTopic:
    name: str
    num_partitions: int
    topic_id: str | None = None
    partition_racks: PartitionRacks = field(default_factory=dict)
    """The racks of each partition's replicas (rack-aware assignment); partitions left out have
    unknown racks."""
    # What a Kafka CreateTopics may ask besides (the Kafka listener in coordinator-only mode),
    # checked as Kafka's controller checks them; the registry keeps none of it.
    replication_factor: int = -1
    """-1: the default. The registry keeps one replica of each partition (Metadata lists the
    node answering as its leader): 1 is the only other factor it can honour."""
    configs: tuple[str, ...] = ()
    """Names of the topic configs asked for: the registry keeps no topic configs."""
    assignments: int = 0
    """Manual partition assignments given (replica broker ids): the registry places no
    replicas."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicResult:
    name: str
    topic_id: str = ZERO_TOPIC_ID
    num_partitions: int = 0
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    partition_racks: PartitionRacks = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotChanges:
    """What :meth:`TopicRegistry.apply_snapshot` changed (each list sorted by name)."""

    created: list[TopicResult]
    updated: list[TopicResult]  # same id, another partition count or other replica racks
    deleted: list[TopicResult]  # gone from the broker, or re-created there (a new id)

    @property
    def deleted_names(self) -> list[str]:
        """Topics whose committed offsets must go (gone, or re-created with a new id)."""
        return [t.name for t in self.deleted]


def image_changed(
    image: TopicsImage, topics: Mapping[str, r.TopicValue], names: Iterable[str], version: int
) -> TopicsImage:
    """``image`` with the topics ``names`` as ``topics`` holds them now (a name it lacks: the
    topic is gone), numbered ``version``: a new image sharing every other topic's
    :class:`TopicImage` with ``image``, which stays as it was (as Kafka's metadata image
    applies a TopicsDelta). When ``image`` is the image of ``topics`` but for ``names``, it
    equals the image of ``topics`` built whole (``TopicsImage.of``; the order of its mappings
    aside, which means nothing). Its mappings are the last ones with the changes over them
    (:func:`~coordinator.core.model.mapping_changed`): its time is what ``names`` takes, plus
    now and then (after about the square root of the topics' number of changes) a copy of the
    last image's dicts (about 3 ms at 100,000 topics, where building the image whole takes a
    few hundred)."""
    was = image.by_name
    old: list[TopicImage] = []
    new: list[TopicImage] = []
    for name in names:
        before = was.get(name)
        value = topics.get(name)
        if before is not None:
            if (
                value is not None
                and value.topic_id == before.topic_id
                and value.num_partitions == before.num_partitions
                and (
                    value.partition_racks is before.partition_racks
                    or value.partition_racks == before.partition_racks
                )
            ):
                continue  # as it was: its image is kept
            old.append(before)
        if value is not None:
            new.append(
                TopicImage(value.topic_id, name, value.num_partitions, value.partition_racks)
            )
    if not old and not new:  # nothing changed (a rollback): the same mappings
        return TopicsImage(version, was, image.by_id)
    by_id = image.by_id
    names_changed: dict[str, Any] = {}
    ids_changed: dict[str, Any] = {}
    for t in old:
        names_changed[t.name] = REMOVED
        if by_id.get(t.topic_id) is t:
            ids_changed[t.topic_id] = REMOVED
    # After every old id: a batch may delete a topic and give its id to another.
    for t in new:
        names_changed[t.name] = t
        ids_changed[t.topic_id] = t
    return TopicsImage(
        version, mapping_changed(was, names_changed), mapping_changed(by_id, ids_changed)
    )


def check_topic_name(name: str) -> None:
    """Kafka's topic name rules (org.apache.kafka.common.internals.Topic.validate)."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty.")
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or "..".')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
        )
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )


def check_partition_racks(name: str, racks: PartitionRacks, num_partitions: int) -> PartitionRacks:
    """Partition racks given for a topic of ``num_partitions`` partitions, in their normal form;
    INVALID_REQUEST for a partition out of range or a blank rack id."""
    for p, rs in racks.items():
        if not 0 <= p < num_partitions:
            raise InvalidRequestError(
                f"Replica racks are given for partition {p} of topic {name}, which has "
                f"{num_partitions} partitions."
            )
        if any(not rack.strip() for rack in rs):
            raise InvalidRequestError(f"A replica rack of partition {p} of topic {name} is blank.")
    return make_partition_racks(racks.items())


_NO_PLACEMENT = (
    "The coordinator's topic registry places no replicas: give a number of partitions instead"
    " of a manual assignment."
)


def _check_kafka_extras(t: NewTopic) -> None:
    """What a Kafka CreateTopics asks besides a name and a count, checked in the order of
    Kafka's ReplicationControlManager (configs, a manual assignment, the replication factor)
    against what the registry can hold: no topic configs, no placement, one replica."""
    if t.configs:
        raise InvalidConfigError(
            "The coordinator's topic registry keeps no topic configs; asked: "
            + ", ".join(t.configs)
            + "."
        )
    if t.assignments:
        if t.replication_factor != -1:
            raise InvalidRequestError(
                "A manual partition assignment was specified, but replication factor was not"
                " set to -1."
            )
        if t.num_partitions != -1:
            raise InvalidRequestError(
                "A manual partition assignment was specified, but numPartitions was not set to -1."
            )
        raise InvalidReplicaAssignmentError(_NO_PLACEMENT)
    rf = t.replication_factor
    if rf < -1 or rf == 0:
        raise InvalidReplicationFactorError(
            "Replication factor must be larger than 0, or -1 to use the default value."
        )
    if t.num_partitions < -1 or t.num_partitions == 0:
        raise InvalidPartitionsError(
            "Number of partitions was set to an invalid non-positive value."
        )
    if rf > 1:
        raise InvalidReplicationFactorError(
            f"Unable to replicate the partition {rf} time(s): the coordinator's topic registry"
            " keeps one replica of each partition."
        )


def _duplicates(names: Sequence[str]) -> set[str]:
    seen: set[str] = set()
    dup: set[str] = set()
    for name in names:
        (dup if name in seen else seen).add(name)
    return dup


def _duplicate_result(name: str) -> TopicResult:
    exc = InvalidRequestError(f"Duplicate topic name {name} in the request.")
    return TopicResult(name=name, error_code=exc.code, error_message=exc.message)


_DELETED, _UPDATED, _CREATED = "deleted", "updated", "created"


@dataclass(frozen=True, slots=True)
class PlannedChange:
    """One topic's change of a :class:`SnapshotPlan`: ``kind`` deleted (a tombstone; the id
    and partition count it had), updated (its id, the new count or racks) or created (the id
    the broker gives; None: minted when applied)."""

    kind: str
    name: str
    topic_id: str | None
    num_partitions: int
    partition_racks: PartitionRacks


@dataclass(frozen=True, slots=True)
class SnapshotPlan:
    """What makes a registry whose topics image is ``image`` equal to a broker's snapshot
    (:func:`plan_snapshot`): ``changes`` in the order their records are written — the
    tombstones by name, then the updates and creations by name; ``given_ids``: the ids the
    snapshot gives (a minted id avoids them)."""

    image: TopicsImage
    changes: tuple[PlannedChange, ...]
    given_ids: frozenset[str]


def plan_snapshot(
    image: TopicsImage, topics: Sequence[NewTopic], keep: Collection[str] = ()
) -> SnapshotPlan:
    """The changes that make a registry whose topics are ``image`` equal to a broker's
    complete topic metadata (a pure function of an immutable image: computed off the loop,
    applied on it by :meth:`TopicRegistry.apply_plan`).

    ``topics``: every topic the broker has (a ``topic_id`` of None: the broker gives no ids
    — a topic keeps the id it has here, a new one gets a new id). ``keep``: topics the
    broker listed without usable metadata (an error, no partitions): left as they are.
    A registry topic the broker no longer has is deleted (tombstone); one whose id changed
    was re-created there: tombstone, then the new topic (offsets on it must go, as for a
    deleted topic). A new partition count, or new replica racks, with the same id is an
    update. A snapshot giving one id to two topics, a duplicate name or a partition count
    below 1 is refused whole (INVALID_REQUEST), as is one giving a topic the id of a
    registry topic that stays."""
    seen: set[str] = set()
    ids: dict[str, str] = {}
    for t in topics:
        if t.name in seen or t.name in keep:
            raise InvalidRequestError(f"Topic {t.name} appears twice in the snapshot.")
        seen.add(t.name)
        if t.num_partitions < 1:
            raise InvalidRequestError(
                f"Topic {t.name} has {t.num_partitions} partitions in the snapshot."
            )
        check_partition_racks(t.name, t.partition_racks, t.num_partitions)
        if t.topic_id is not None and (
            t.topic_id == ZERO_TOPIC_ID or ids.setdefault(t.topic_id, t.name) != t.name
        ):
            raise InvalidRequestError(
                f"Topic id {t.topic_id} of {t.name} is reserved or used twice in the snapshot."
            )
    wanted = {t.name: t for t in topics}
    present = image.by_name
    held = {  # ids of the registry topics that stay
        v.topic_id: name
        for name, v in present.items()
        if name in keep or (name in wanted and wanted[name].topic_id in (None, v.topic_id))
    }
    for topic_id, name in ids.items():
        if held.get(topic_id, name) != name:
            raise InvalidRequestError(
                f"Topic id {topic_id} of {name} is still held by topic {held[topic_id]}."
            )
    # Only what changes is sorted (a sort of every name holds a thread's GIL for its whole
    # length: the loop would wait on it).
    deleted: list[PlannedChange] = []
    for name, value in present.items():
        if name in keep:
            continue
        new = wanted.get(name)
        if new is None or (new.topic_id is not None and new.topic_id != value.topic_id):
            deleted.append(PlannedChange(_DELETED, name, value.topic_id, value.num_partitions, {}))
    gone = {d.name for d in deleted}
    changed: list[PlannedChange] = []
    for name, new in wanted.items():
        racks = make_partition_racks(new.partition_racks.items())
        current = None if name in gone else present.get(name)
        if current is None:
            changed.append(PlannedChange(_CREATED, name, new.topic_id, new.num_partitions, racks))
        elif current.num_partitions != new.num_partitions or current.partition_racks != racks:
            changed.append(
                PlannedChange(_UPDATED, name, current.topic_id, new.num_partitions, racks)
            )
    deleted.sort(key=_name_of)
    changed.sort(key=_name_of)
    return SnapshotPlan(image, (*deleted, *changed), frozenset(ids))


def _name_of(change: PlannedChange) -> str:
    return change.name


class TopicRegistry:
    def __init__(self, ids: IdSource, *, default_num_partitions: int = 1) -> None:
        self.ids = ids
        self.default_num_partitions = default_num_partitions
        """The count of a topic created with ``num_partitions=-1`` (Kafka's ``num.partitions``)."""
        self.undo = UndoLog()
        self.topics: TDict = self.undo.new_dict()  # name -> TopicValue
        self._ids: TDict = self.undo.new_dict()
        """topic id -> the name of the topic holding it: the ids in use, without a pass over
        every topic (a creation checks a new id against them)."""
        self._version = 0
        self._image = TopicsImage()
        self._stale = False
        """A topic record was replayed, or the registry rolled back, since ``_image`` was
        built: the next :meth:`image` is a new version."""
        self._changed: dict[str, None] = {}
        """The topics that may differ from ``_image`` (in the order they changed)."""
        self._held: TopicsImage | None = None
        """:meth:`hold_image`: the image shown meanwhile."""
        self._plugged: dict[r.RecordType, Callable[[r.Record], None]] = {}
        self.components: dict[type, Component] = {}
        """Plugged components a caller looks up by class (``factory.group_configs_of``)."""

    def plug(self, component: Component) -> None:
        """Add a cluster-level component (built on this registry's ``undo`` log): the records
        of its types are routed to it."""
        for record_type, replay in component.replayers().items():
            if record_type is r.RecordType.TOPIC or record_type in self._plugged:
                raise IllegalStateError(f"record type {record_type.name} is claimed twice")
            self._plugged[record_type] = replay

    # -------------------------------------------------------------- state

    def replay(self, record: r.Record) -> None:
        if not isinstance(record.key, r.TopicKey):
            plugged = self._plugged.get(record.key.TYPE)
            if plugged is None:
                raise IllegalStateError(f"not a cluster-level record: {record.key}")
            plugged(record)
            return
        name = record.key.name
        value: r.TopicValue | None = record.value  # type: ignore[assignment]
        topics, ids = self.topics, self._ids
        old = topics.get(name)
        if (
            old is not None
            and (value is None or value.topic_id != old.topic_id)
            and ids.get(old.topic_id) == name
        ):
            del ids[old.topic_id]
        if value is None:
            topics.discard(name)
        else:
            topics[name] = value
            if ids.get(value.topic_id) != name:
                ids[value.topic_id] = name
        self._changed[name] = None
        self._stale = True

    def image(self) -> TopicsImage:
        """The current image; a new version after every change (a topic record replayed, a
        rollback). Built from the previous one and the topics changed since
        (:func:`image_changed`): a change costs what it changed, not the whole registry.
        While held (:meth:`hold_image`), the image of then."""
        if self._held is not None:
            return self._held
        return self.build_image()

    def build_image(self) -> TopicsImage:
        """The image of the topics now, shown by :meth:`image` unless it is held."""
        if self._stale:
            self._version += 1
            self._image = image_changed(self._image, self.topics, self._changed, self._version)
            self._changed = {}
            self._stale = False
        return self._image

    def hold_image(self) -> None:
        """Until :meth:`release_image`, :meth:`image` and :meth:`list_topics` show the topics
        as they are now, whatever is replayed meanwhile (:meth:`build_image` builds the next
        image a part at a time): a node applies an append of the cluster log larger than a
        step of its loop in several, and a read between them sees the append whole or not at
        all (``Partitions``)."""
        self._held = self.build_image()

    def release_image(self) -> list[object]:
        """:meth:`image` shows the topics as they are again. Returns the image held (for the
        caller to drop when it will: its mappings of 100,000 topics freed in one go are a
        millisecond or two of the loop), if any."""
        held, self._held = self._held, None
        return [] if held is None else [held]

    def mark(self) -> int:
        return self.undo.mark()

    def rollback(self, mark: int) -> None:
        self._changed.update(dict.fromkeys(self.undo.keys_after(mark, self.topics)))
        self.undo.rollback(mark)
        self._stale = True

    def release(self, mark: int) -> None:
        self.undo.release(mark)

    def _emit(self, result: Result[Any], record: r.Record) -> None:
        result.records.append(record)
        self.replay(record)

    # -------------------------------------------------------------- handlers

    def create_topics(self, topics: Sequence[NewTopic]) -> Result[list[TopicResult]]:
        out: list[TopicResult] = []
        result: Result[list[TopicResult]] = Result(response=out)
        dup = _duplicates([t.name for t in topics])
        for t in topics:
            if t.name in dup:  # Kafka: every entry of a duplicated name fails; nothing is created
                out.append(_duplicate_result(t.name))
                continue
            try:
                check_topic_name(t.name)
                if t.name in self.topics:
                    raise TopicAlreadyExistsError(f"Topic '{t.name}' already exists.")
                _check_kafka_extras(t)
                # -1: the default count, as Kafka's CreateTopics (num.partitions).
                count = self.default_num_partitions if t.num_partitions == -1 else t.num_partitions
                if not 1 <= count <= MAX_PARTITIONS:
                    raise InvalidPartitionsError(
                        f"Number of partitions must be between 1 and {MAX_PARTITIONS}"
                        f" (or -1 for the default), got {t.num_partitions}."
                    )
                racks = check_partition_racks(t.name, t.partition_racks, count)
                topic_id = t.topic_id or self.ids.new_topic_id()
                if topic_id == ZERO_TOPIC_ID or topic_id in self._ids:
                    raise InvalidRequestError(f"Topic id {topic_id} is reserved or already in use.")
                self._emit(result, r.topic_record(t.name, topic_id, count, racks))
                out.append(
                    TopicResult(
                        name=t.name, topic_id=topic_id, num_partitions=count, partition_racks=racks
                    )
                )
            except CoordinatorError as exc:
                out.append(TopicResult(name=t.name, error_code=exc.code, error_message=exc.message))
        return result

    def create_partitions(
        self, requests: Sequence[tuple[str, int]], assignments: Mapping[str, int] | None = None
    ) -> Result[list[TopicResult]]:
        """Raise a topic's partition count to ``count`` (Kafka: the new total).
        ``assignments``: topics whose request gave manual assignments of the new partitions
        (a Kafka CreatePartitions), with how many: refused once the count is checked, as Kafka's
        controller checks them there — the registry places no replicas."""
        out: list[TopicResult] = []
        result: Result[list[TopicResult]] = Result(response=out)
        dup = _duplicates([name for name, _c in requests])
        for name, count in requests:
            if name in dup:
                out.append(_duplicate_result(name))
                continue
            try:
                current = self.topics.get(name)
                if current is None:
                    raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
                # Kafka's ReplicationControlManager.createPartitions, in its order.
                if count == current.num_partitions:
                    raise InvalidPartitionsError(f"Topic already has {count} partition(s).")
                if count < current.num_partitions:
                    raise InvalidPartitionsError(
                        f"The topic {name} currently has {current.num_partitions} partition(s);"
                        f" {count} would not be an increase."
                    )
                given = (assignments or {}).get(name)
                if given is not None:
                    additional = count - current.num_partitions
                    if given != additional:
                        raise InvalidReplicaAssignmentError(
                            f"Attempted to add {additional} additional partition(s), but only"
                            f" {given} assignment(s) were specified."
                        )
                    raise InvalidReplicaAssignmentError(_NO_PLACEMENT)
                if count > MAX_PARTITIONS:
                    raise InvalidPartitionsError(
                        f"Number of partitions must be at most {MAX_PARTITIONS}."
                    )
                # The new partitions' racks are unknown; the others keep theirs.
                racks = current.partition_racks
                self._emit(result, r.topic_record(name, current.topic_id, count, racks))
                out.append(
                    TopicResult(
                        name=name,
                        topic_id=current.topic_id,
                        num_partitions=count,
                        partition_racks=racks,
                    )
                )
            except CoordinatorError as exc:
                out.append(TopicResult(name=name, error_code=exc.code, error_message=exc.message))
        return result

    def delete_topics(self, names: Sequence[str]) -> Result[list[TopicResult]]:
        out: list[TopicResult] = []
        result: Result[list[TopicResult]] = Result(response=out)
        dup = _duplicates(names)
        for name in names:
            if name in dup:
                out.append(_duplicate_result(name))
                continue
            current = self.topics.get(name)
            if current is None:
                exc = UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
                out.append(TopicResult(name=name, error_code=exc.code, error_message=exc.message))
                continue
            self._emit(result, r.topic_record(name, None))
            out.append(
                TopicResult(
                    name=name, topic_id=current.topic_id, num_partitions=current.num_partitions
                )
            )
        return result

    def apply_snapshot(
        self, topics: Sequence[NewTopic], keep: Collection[str] = ()
    ) -> Result[SnapshotChanges]:
        """Make the registry equal to a broker's complete topic metadata, in one command:
        :func:`plan_snapshot` against the registry's image (what it checks and changes is
        said there), then every change of the plan (:meth:`apply_plan`). Nothing is written
        when nothing changed."""
        image = self.image()
        plan = plan_snapshot(image, topics, keep)
        result = self.apply_plan(plan, 0, len(plan.changes), image)
        assert result is not None  # planned on this very image
        return result[0]

    def apply_plan(
        self, plan: SnapshotPlan, start: int, stop: int, expected: TopicsImage
    ) -> tuple[Result[SnapshotChanges], TopicsImage] | None:
        """Apply ``plan.changes[start:stop]`` (:func:`plan_snapshot`) when the registry's image
        is ``expected`` — the plan's own image for its first changes, the image the previous
        part left for the next ones: what the plan's changes were decided on — else nothing
        (None: a change came meanwhile, plan again). Its result, and the image it leaves.
        Applied part by part, the records are those of one application of the whole plan, in
        its order (a new topic's id is minted here, in that order: not one in use, nor one
        the snapshot gives)."""
        if self.image() is not expected:
            return None
        result: Result[SnapshotChanges] = Result(
            response=SnapshotChanges(created=[], updated=[], deleted=[])
        )
        changes = result.response
        assert changes is not None
        for change in plan.changes[start:stop]:
            name, count, racks = change.name, change.num_partitions, change.partition_racks
            if change.kind == _DELETED:
                assert change.topic_id is not None  # the id it had
                self._emit(result, r.topic_record(name, None))
                changes.deleted.append(
                    TopicResult(name=name, topic_id=change.topic_id, num_partitions=count)
                )
                continue
            topic_id = change.topic_id
            if topic_id is None:
                topic_id = self.ids.new_topic_id()
                while topic_id in self._ids or topic_id in plan.given_ids:
                    topic_id = self.ids.new_topic_id()
            self._emit(result, r.topic_record(name, topic_id, count, racks))
            (changes.updated if change.kind == _UPDATED else changes.created).append(
                TopicResult(
                    name=name, topic_id=topic_id, num_partitions=count, partition_racks=racks
                )
            )
        return result, self.image()

    def list_topics(self) -> list[TopicResult]:
        shown = self.topics if self._held is None else self._held.by_name
        return [
            TopicResult(
                name=name,
                topic_id=v.topic_id,
                num_partitions=v.num_partitions,
                partition_racks=v.partition_racks,
            )
            for name, v in sorted(shown.items())
        ]
