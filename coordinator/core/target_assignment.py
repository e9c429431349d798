"""Computing a new target assignment (Kafka's ``TargetAssignmentBuilder``).

Builds the assignor's read-only inputs from the group (each member's subscribed topic *ids*
resolved through the group's subscription metadata, its current target, rack and instance id),
runs the assignor, validates the result, and diffs it against the current target: one
``ConsumerGroupTargetAssignmentMember`` record per member whose target changed, then always the
``ConsumerGroupTargetAssignmentMetadata`` record with the new assignment epoch.

Cost. A join to a settled group should cost what moves, not the group's size, so every step
avoids per-partition work on members that keep their target:

* the inputs are cached per member (soft state on the group, :class:`SpecCache`): a member's
  :class:`MemberSubscription` is rebuilt only when its member object or its target changed
  (both are immutable values, replaced on every change, so an identity check says it all), and
  the member ids are kept sorted, so the assignor's own sort sees sorted input;
* an assignor that returns a member's input mapping unchanged (``uniform`` does) has that
  member skipped by the validation of partitions and by the diff; only the members whose
  mapping is new are checked against the current target's owners (:func:`check_result`).

What remains per member is a few C-level passes (key views, identity maps, ``issuperset``).
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter, is_not
from typing import Any

from assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    PartitionAssignor,
    PartitionAssignorError,
    SubscriptionType,
    TopicId,
    TopicMetadata,
)
from assignors.validation import check_assignment

from . import records as r
from .errors import UnknownServerError
from .group import ConsumerGroup
from .model import EMPTY_ASSIGNMENT, Assignment

_assignment_of = attrgetter("assignment")
_subscribed = attrgetter("subscribed_topic_ids")


class SpecCache:
    """Soft, per-group cache of the assignor's inputs (never undo-logged: every entry is
    checked by identity against the live values before use, so a rollback cannot make it
    lie). ``entries``: member id -> (member, target, MemberSubscription) for the subscription
    metadata ``metadata``; ``sorted_ids``/``ids``: the member ids, sorted, as last seen."""

    __slots__ = ("entries", "ids", "metadata", "sorted_ids")

    def __init__(self, metadata: object) -> None:
        self.metadata = metadata
        self.entries: dict[str, tuple[object, Assignment, MemberSubscription]] = {}
        self.sorted_ids: list[str] = []
        self.ids: set[str] = set()

    def member_ids(self, members: Mapping[str, object]) -> list[str]:
        """The group's member ids, sorted (updated from the last call's list)."""
        keys = members.keys()
        if keys == self.ids:
            return self.sorted_ids
        gone = self.ids - keys
        new = keys - self.ids
        if len(gone) + len(new) > 64:
            self.sorted_ids = sorted(keys)
        else:
            if gone:
                self.sorted_ids = [m for m in self.sorted_ids if m not in gone]
                for m in gone:
                    self.entries.pop(m, None)
            for m in new:
                insort(self.sorted_ids, m)
        self.ids = set(keys)
        return self.sorted_ids


def build_group_spec(group: ConsumerGroup) -> tuple[GroupSpec, Mapping[str, TopicMetadata]]:
    metadata = group.subscription_metadata
    cache = group.spec_cache
    if cache is None or cache.metadata is not metadata:
        cache = group.spec_cache = SpecCache(metadata)
    entries = cache.entries
    target = group.target
    members_of = group.members
    by_name_id: dict[str, TopicId] | None = None
    members = {}
    for member_id in cache.member_ids(members_of):
        m = members_of[member_id]
        assignment = target.get(member_id, EMPTY_ASSIGNMENT)
        entry = entries.get(member_id)
        if entry is not None and entry[0] is m and entry[1] is assignment:
            members[member_id] = entry[2]
            continue
        if by_name_id is None:
            by_name_id = {name: t.topic_id for name, t in metadata.items()}
        names = group.effective_topics(m)
        subscription = MemberSubscription(
            rack_id=m.rack_id,
            instance_id=m.instance_id,
            subscribed_topic_ids=frozenset(by_name_id[n] for n in names if n in by_name_id),
            assignment=assignment,
        )
        members[member_id] = subscription
        if not m.subscribed_topic_regex:  # a regex's resolution may change under it
            entries[member_id] = (m, assignment, subscription)
    spec = GroupSpec(
        members=members,
        subscription_type=group.subscription_type(),
        partition_owners=group.target_owners,
    )
    topics = {t.topic_id: t for t in metadata.values()}
    return spec, topics


def changed_members(spec: GroupSpec, result: GroupAssignment) -> list[str] | None:
    """Members whose result is not their input mapping (same object), in the result's order;
    None if the result's members are not exactly the spec's (a dict with the same keys)."""
    given = result.members
    specs = spec.members
    if not isinstance(given, dict) or given.keys() != specs.keys():
        return None
    inputs = map(_assignment_of, map(specs.__getitem__, given))
    return list(compress(given, map(is_not, given.values(), inputs)))


def check_result(
    spec: GroupSpec,
    topics: Mapping[TopicId, TopicMetadata],
    result: object,
    changed: list[str] | None,
) -> None:
    """Raise :class:`~assignors.validation.InvalidAssignmentError` if ``result`` may not be
    installed. ``spec`` must be one :func:`build_group_spec` made: its members' assignments
    are the group's current target (valid, exclusive, within topics whose partition counts
    only grow) and ``partition_owners`` is that target's exact inverse. Then only the members
    in ``changed`` need their partitions examined: each of their partitions exists, none is
    given twice among them, and none is still owned by a member that keeps its target. Every
    member's subscription is checked (in C). Anything unusual falls back to the full
    :func:`~assignors.validation.check_assignment`, which names the culprit."""
    if (
        changed is None
        or not isinstance(result, GroupAssignment)
        or not _looks_valid(spec, topics, result.members, changed)
    ):
        check_assignment(spec, topics, result)


def _looks_valid(
    spec: GroupSpec,
    topics: Mapping[TopicId, TopicMetadata],
    given: Mapping[str, Any],
    changed: list[str],
) -> bool:
    """A fast check of an assignor's (untrusted) output; False sends it to the full check."""
    specs = spec.members
    assignments = list(given.values())
    subscriptions = map(_subscribed, map(specs.__getitem__, given))
    if not all(map(frozenset.issuperset, subscriptions, assignments)):
        return False
    if not all(type(given[m]) is dict for m in changed):
        return False
    keep = set(changed)
    by_topic: dict[TopicId, list[frozenset[int]]] = {}
    for m in changed:
        for t, partitions in given[m].items():
            if type(partitions) is not frozenset or not partitions:
                return False
            by_topic.setdefault(t, []).append(partitions)
    owners_of = spec.partition_owners
    for t, sets in by_topic.items():
        metadata = topics.get(t)
        if metadata is None:
            return False
        union: set[int] = set().union(*sets)
        if len(union) != sum(map(len, sets)) or not set(map(type, union)) <= {int}:
            return False
        if min(union) < 0 or max(union) >= metadata.num_partitions:
            return False
        owners = owners_of.get(t)
        if owners and not keep.issuperset(filter(None, map(owners.get, union))):
            return False  # a partition still held by a member that keeps its target
    return True


def target_records(
    group: ConsumerGroup,
    result: Mapping[str, Mapping[TopicId, frozenset[int]]],
    members: list[str] | None,
    group_epoch: int,
    timestamp_ms: int = 0,
) -> list[r.Record]:
    """The records installing ``result`` at ``group_epoch``: a target record per member (of
    ``members``, default all of the result's) whose target differs, in member id order, then
    the assignment epoch and its timestamp."""
    records = []
    group_id = group.group_id
    target = group.target
    for member_id in sorted(result if members is None else members):
        new = {t: ps for t, ps in result[member_id].items() if ps}
        if target.get(member_id, EMPTY_ASSIGNMENT) != new:
            records.append(r.target_assignment_record(group_id, member_id, new))
    records.append(r.target_assignment_epoch_record(group_id, group_epoch, timestamp_ms))
    return records


def compute_target_assignment(
    group: ConsumerGroup, group_epoch: int, assignor: PartitionAssignor, timestamp_ms: int = 0
) -> list[r.Record]:
    """Records installing the new target assignment at ``group_epoch`` (computed at
    ``timestamp_ms``; 0 with batching off). Raises UnknownServerError (nothing changed) if the
    assignor fails or returns an invalid result."""
    spec, topics = build_group_spec(group)
    try:
        result: GroupAssignment = assignor.assign(spec, topics)
        changed = changed_members(spec, result) if isinstance(result, GroupAssignment) else None
        check_result(spec, topics, result, changed)
    except PartitionAssignorError as exc:
        raise UnknownServerError(
            f"Failed to compute a new target assignment for epoch {group_epoch}: {exc}"
        ) from exc
    except Exception as exc:  # a plugin bug must not corrupt the group: same treatment
        raise UnknownServerError(
            f"Failed to compute a new target assignment for epoch {group_epoch}: assignor "
            f"'{assignor.name}' raised {type(exc).__name__}: {exc}"
        ) from exc
    return target_records(group, result.members, changed, group_epoch, timestamp_ms)


# ---------------------------------------------------------------------- offloaded computation
#
# A large group's target is computed outside the event loop (Kafka's KIP-1263 offload, trunk
# design): the inputs are *copied* out of the group into an AssignmentJob (picklable, compact),
# a worker runs the assignor and validates the result against those copies, and only the
# members whose target changes come back, in an AssignmentOutcome; the coordinator applies it
# as an ordinary command (apply_outcome), against the group as it is *then*: members that left
# are skipped, a static member replaced meanwhile is remapped to its new member id, members
# that joined meanwhile keep their (empty) target — "as if the leaves and replacements happened
# after the assignment". An outcome for a group that was deleted (or deleted and re-created), or
# whose target has already reached the job's epoch, is stale and discarded.


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignmentJob:
    """The inputs of one offloaded computation: copies, in member id order."""

    group_id: str
    group_uid: str
    epoch: int
    """The group epoch the target is computed for."""
    assignor: str
    homogeneous: bool
    topics: tuple[TopicMetadata, ...]
    member_ids: tuple[str, ...]
    instance_ids: tuple[str | None, ...]
    rack_ids: tuple[str | None, ...]
    subscriptions: tuple[frozenset[TopicId], ...]
    assignments: tuple[Assignment, ...]
    """Each member's current target (the very objects of the group's target: read-only)."""

    def group_spec(self) -> tuple[GroupSpec, dict[TopicId, TopicMetadata]]:
        """The assignor's inputs, rebuilt (in the worker), with the inverted current target."""
        members: dict[str, MemberSubscription] = {}
        owners: dict[TopicId, dict[int, str]] = {}
        for member_id, instance_id, rack_id, subscription, assignment in zip(
            self.member_ids,
            self.instance_ids,
            self.rack_ids,
            self.subscriptions,
            self.assignments,
            strict=True,
        ):
            members[member_id] = MemberSubscription(
                rack_id=rack_id,
                instance_id=instance_id,
                subscribed_topic_ids=subscription,
                assignment=assignment,
            )
            for t, partitions in assignment.items():
                bucket = owners.get(t)
                if bucket is None:
                    owners[t] = dict.fromkeys(partitions, member_id)
                else:
                    bucket.update(dict.fromkeys(partitions, member_id))
        kind = SubscriptionType.HOMOGENEOUS if self.homogeneous else SubscriptionType.HETEROGENEOUS
        spec = GroupSpec(members=members, subscription_type=kind, partition_owners=owners)
        return spec, {t.topic_id: t for t in self.topics}


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignmentOutcome:
    """What a worker sends back: the new targets of the members whose target changes (member
    id -> (instance id, target)), or the error that stopped the computation."""

    group_id: str
    group_uid: str
    epoch: int
    changed: Mapping[str, tuple[str | None, Assignment]] = field(default_factory=dict)
    error: str | None = None


def assignment_job(group: ConsumerGroup, epoch: int, assignor: str) -> AssignmentJob:
    """Copy the inputs of a computation at ``epoch`` out of ``group`` (O(members); the member
    objects come from the spec cache)."""
    spec, topics = build_group_spec(group)
    subs = list(spec.members.values())
    return AssignmentJob(
        group_id=group.group_id,
        group_uid=group.group_uid,
        epoch=epoch,
        assignor=assignor,
        homogeneous=spec.subscription_type is SubscriptionType.HOMOGENEOUS,
        topics=tuple(topics[t] for t in sorted(topics)),
        member_ids=tuple(spec.members),
        instance_ids=tuple(map(_instance_of, subs)),
        rack_ids=tuple(map(_rack_of, subs)),
        subscriptions=tuple(map(_subscribed, subs)),
        assignments=tuple(map(_assignment_of, subs)),
    )


_instance_of = attrgetter("instance_id")
_rack_of = attrgetter("rack_id")


def run_job(job: AssignmentJob, assignor: PartitionAssignor) -> AssignmentOutcome:
    """Run the assignor on the job's inputs and validate its result (in a worker). Pure."""
    spec, topics = job.group_spec()
    try:
        result = assignor.assign(spec, topics)
        changed = changed_members(spec, result) if isinstance(result, GroupAssignment) else None
        check_result(spec, topics, result, changed)
    except Exception as exc:  # noqa: BLE001 - any failure is reported, never raised
        detail = (
            str(exc)
            if isinstance(exc, PartitionAssignorError)
            else (f"assignor '{assignor.name}' raised {type(exc).__name__}: {exc}")
        )
        return AssignmentOutcome(
            group_id=job.group_id,
            group_uid=job.group_uid,
            epoch=job.epoch,
            error=f"Failed to compute a new target assignment for epoch {job.epoch}: {detail}",
        )
    members = spec.members
    out: dict[str, tuple[str | None, Assignment]] = {}
    for member_id in changed if changed is not None else members:
        new = {t: ps for t, ps in result.members[member_id].items() if ps}
        if new != members[member_id].assignment:
            out[member_id] = (members[member_id].instance_id, new)
    return AssignmentOutcome(
        group_id=job.group_id, group_uid=job.group_uid, epoch=job.epoch, changed=out
    )


def outcome_is_stale(group: ConsumerGroup | None, outcome: AssignmentOutcome) -> str | None:
    """Why ``outcome`` must be discarded, or None if it applies."""
    if group is None or group.group_uid != outcome.group_uid:
        return "the group was deleted"
    if group.assignment_epoch >= outcome.epoch:
        return f"the target is already at epoch {group.assignment_epoch}"
    if group.group_epoch < outcome.epoch:
        return f"the group epoch went back to {group.group_epoch}"
    return None


def outcome_records(
    group: ConsumerGroup, outcome: AssignmentOutcome, timestamp_ms: int
) -> list[r.Record]:
    """The records installing a (non-stale) outcome into the group as it is now: members that
    left are skipped, a static member replaced since is remapped by instance id, members that
    joined since keep their target; then the assignment epoch with ``timestamp_ms``."""
    members = group.members
    static = group.static_members
    targets: dict[str, Assignment] = {}
    for member_id, (instance_id, new) in outcome.changed.items():
        if member_id in members:
            targets[member_id] = new
            continue
        successor = None if instance_id is None else static.get(instance_id)
        if successor is not None and successor not in outcome.changed:
            targets[successor] = new  # the static member re-joined under a new member id
        # else: the member left the group
    return target_records(group, targets, None, outcome.epoch, timestamp_ms)
