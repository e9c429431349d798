"""Computing a new target assignment (Kafka's ``TargetAssignmentBuilder``).

Builds the assignor's read-only inputs from the group (each member's subscribed topic *ids*
resolved through the group's subscription metadata, its current target, rack and instance id),
runs the assignor, validates the result, and diffs it against the current target: one
``ConsumerGroupTargetAssignmentMember`` record per member whose target changed, then always the
``ConsumerGroupTargetAssignmentMetadata`` record with the new assignment epoch.

Cost. A join to a settled group should cost what moves, not the group's size, so every step
avoids per-partition work on members that keep their target:

* the inputs are kept beside the group (:class:`SpecCache`) and updated member by member:
  replaying a member's metadata or target marks it dirty (``ConsumerGroup.spec_dirty``), and
  only dirty members get a new :class:`MemberSubscription`; members sharing a subscription share
  one frozenset of topic ids; the member ids are kept sorted (a join inserts one), so the
  assignor's own sort sees sorted input. The cache and the dirty marks change only through the
  undo log, so a rolled-back command rolls them back too;
* an assignor that returns a member's input mapping unchanged (``uniform`` does) has that
  member skipped by the validation of partitions and by the diff; only the members whose
  mapping is new are checked against the current target's owners (:func:`check_result`).

What remains per member is a few C-level passes (key views, identity maps, ``issuperset``).

Incremental computation. An assignor with the SPI's optional ``assign_changes`` (``uniform``
has it) is called first with a spec that visits nobody: its members are a read-only view of the
cache, and its :class:`~assignors.api.TargetSummary` (every member's load, the members sorted
by load, the unassigned partitions per topic) is kept by the cache beside the entries, updated
from the targets of the members that changed (:meth:`SpecCache.summary`). It answers with the
members whose target changes only; they are validated against the summary (a partition they get
must be free or come from one of them: :func:`check_changes`) and become the target records.
Offloaded jobs carry the cache's member inputs and a copy of the summary, so the worker takes
the same path (:func:`run_job`). The summary is offered only when every member's target is
tidy (within its subscription, no regex member); otherwise, or when the assignor returns None,
the whole spec is built and ``assign`` runs as before.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain, compress, filterfalse, islice
from operator import attrgetter, is_not
from types import MappingProxyType
from typing import Any, TypeVar

from assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    PartitionAssignor,
    PartitionAssignorError,
    SubscriptionType,
    TargetSummary,
    TopicId,
    TopicMetadata,
)
from assignors.validation import InvalidAssignmentError, check_assignment

from . import records as r
from .errors import UnknownServerError
from .group import ConsumerGroup
from .held_racks import HeldRacks, any_racks
from .model import EMPTY_ASSIGNMENT, Assignment, ConsumerGroupMember
from .timeline import TDict, UndoLog

_assignment_of = attrgetter("assignment")
_subscribed = attrgetter("subscribed_topic_ids")


class SpecCache:
    """The assignor's inputs for one subscription metadata (``metadata``, compared by
    identity), kept up to date member by member: ``build_group_spec`` rebuilds only the members
    the group marked dirty (``ConsumerGroup.spec_dirty``: their metadata or target was replayed).
    Everything that changes goes through the undo log, so a rollback restores the cache together
    with the group and it cannot lie.

    ``entries``: member id -> its :class:`MemberSubscription` (members without a regex; a
    regex's resolution may change under it, so those, in ``regex_ids``, are rebuilt on every
    call); ``sorted_ids``: every member id, sorted; ``members``: the last spec's member mapping
    (in ``sorted_ids`` order, never changed once built) or None; ``untidy``: the members whose
    target holds a topic outside their subscription (a kept target then needs refusing, see
    :func:`check_result`). ``topic_ids`` maps a
    subscription (names) to its topic ids, shared by every member with that subscription (a
    pure function of ``metadata``: not undo-logged).

    The target summary (every member, regex members included): ``held`` maps a member to the
    target the summary counted for it, ``loads`` to that target's size, ``by_load`` a load to
    the sorted tuple of the members with that load, ``free`` each topic of ``metadata`` to the
    sorted tuple of its partitions in no member's target; ``racks``, when some topic has
    partition racks, counts the targets' partitions by (their racks, their member's rack), and
    ``by_rack`` then maps (a rack, a load) to the sorted tuple of the members of that rack (as
    counted) with that load."""

    __slots__ = (
        "_log",
        "by_load",
        "by_rack",
        "by_name_id",
        "entries",
        "free",
        "free_stale",
        "held",
        "loads",
        "members",
        "metadata",
        "racks",
        "regex_ids",
        "sorted_ids",
        "topic_ids",
        "topics",
        "untidy",
    )

    def __init__(self, log: UndoLog, metadata: Mapping[str, TopicMetadata]) -> None:
        self._log = log
        self.metadata = metadata
        self.topics: dict[TopicId, TopicMetadata] = {t.topic_id: t for t in metadata.values()}
        self.by_name_id: dict[str, TopicId] = {name: t.topic_id for name, t in metadata.items()}
        self.topic_ids: dict[Hashable, frozenset[TopicId]] = {}
        self.entries: TDict = log.new_dict()
        self.regex_ids: TDict = log.new_dict()
        self.untidy: TDict = log.new_dict()
        self.sorted_ids: tuple[str, ...] = ()
        self.members: dict[str, MemberSubscription] | None = None
        self.held: TDict = log.new_dict()
        self.loads: TDict = log.new_dict()
        self.by_load: TDict = log.new_dict()
        self.free: TDict = log.new_dict()
        self.free_stale = False  # a part of the members was refreshed: count every topic next
        self.racks = HeldRacks(log, self.topics) if any_racks(self.topics) else None
        self.by_rack: TDict = log.new_dict()  # (rack, load) -> sorted ids, with ``racks``

    def subscription(self, names: Collection[str]) -> frozenset[TopicId]:
        """The ids of the subscribed topics that exist (one shared frozenset per subscription)."""
        key = names if isinstance(names, Hashable) else frozenset(names)
        ids = self.topic_ids.get(key)
        if ids is None:
            by_name_id = self.by_name_id
            ids = self.topic_ids[key] = frozenset(by_name_id[n] for n in names if n in by_name_id)
        return ids

    def build(self, group: ConsumerGroup, member: ConsumerGroupMember) -> MemberSubscription:
        regex = member.subscribed_topic_regex
        return MemberSubscription(
            rack_id=member.rack_id,
            instance_id=member.instance_id,
            subscribed_topic_ids=self.subscription(
                group.effective_topics(member) if regex else member.subscribed_topic_names
            ),
            assignment=group.target.get(member.member_id, EMPTY_ASSIGNMENT),
        )

    def update(
        self,
        group: ConsumerGroup,
        todo: Iterable[str],
        *,
        fresh: bool = False,
        partial: bool = False,
    ) -> None:
        """Rebuild the entries of the members in ``todo`` (gone members are dropped) and their
        part of the summary; ``fresh``: the cache is new and ``todo`` is every member;
        ``partial``: other members are still to be brought up to date (so nothing is recounted
        from the group's targets, which already hold their changes)."""
        todo = list(todo)
        racks = self.racks
        if racks is not None:  # before the summary: it reads the targets last counted
            placed = list(zip(map(racks.rack_of.get, todo), map(self.loads.get, todo), strict=True))
            racks.update(group, todo, self.held, fresh, partial=partial)
        self._update_summary(group, todo, fresh, partial)
        if racks is not None:
            self._update_racks(todo, placed)
        entries, regex_ids, untidy = self.entries, self.regex_ids, self.untidy
        members_of = group.members
        added: list[str] = []
        removed: list[str] = []
        changed = False
        for member_id in todo:
            m = members_of.get(member_id)
            known = member_id in entries or member_id in regex_ids
            if m is None:
                if known:
                    removed.append(member_id)
                    entries.discard(member_id)
                    regex_ids.discard(member_id)
                    untidy.discard(member_id)
                continue
            if not known:
                added.append(member_id)
            changed = True
            if m.subscribed_topic_regex:
                entries.discard(member_id)
                untidy.discard(member_id)
                if member_id not in regex_ids:
                    regex_ids[member_id] = True
            else:
                regex_ids.discard(member_id)
                entry = entries[member_id] = self.build(group, m)
                assignment = entry.assignment
                if entry.subscribed_topic_ids.issuperset(assignment) and all(assignment.values()):
                    untidy.discard(member_id)
                elif member_id not in untidy:
                    untidy[member_id] = True
        log = self._log
        if added or removed:
            if len(added) + len(removed) > 64:
                ids = sorted(chain(entries, regex_ids))
            else:
                ids = list(self.sorted_ids)
                for member_id in removed:
                    del ids[bisect_left(ids, member_id)]
                for member_id in added:
                    insort(ids, member_id)
            log.set_attr(self, "sorted_ids", tuple(ids))
        if changed or removed:
            log.set_attr(self, "members", None)

    def _update_summary(
        self, group: ConsumerGroup, todo: list[str], fresh: bool, partial: bool = False
    ) -> None:
        """Bring the summary up to date for the members in ``todo``: their loads, the load
        buckets they leave and join, and (unless ``fresh``, which recounts every topic) the free
        partitions among those their old and new targets differ by. A load bucket that changes
        is stored as a new sorted tuple (a C-level copy of its member ids: the one per-member
        cost left on a join, a few microseconds per thousand members). ``partial``: other
        members are still to be refreshed, whose changes the group's targets already hold, so
        the free partitions are left for the last refresh, which counts every topic."""
        if partial and not self.free_stale:
            self._log.set_attr(self, "free_stale", True)
        held, loads = self.held, self.loads
        target_of, members_of = group.target, group.members
        removed: dict[int, list[str]] = {}
        added: dict[int, list[str]] = {}
        touched: dict[TopicId, set[int]] = {}
        for member_id in todo:
            old = held.get(member_id)
            new = target_of.get(member_id, EMPTY_ASSIGNMENT) if member_id in members_of else None
            if old is new:
                continue
            old_load = loads.get(member_id)
            if new is None:
                held.discard(member_id)
                loads.discard(member_id)
                new_load = None
            else:
                held[member_id] = new
                new_load = sum(map(len, new.values()))
                if new_load != old_load:
                    loads[member_id] = new_load
            if new_load != old_load:
                if old_load is not None:
                    removed.setdefault(old_load, []).append(member_id)
                if new_load is not None:
                    added.setdefault(new_load, []).append(member_id)
            if fresh or self.free_stale:
                continue
            before = old or EMPTY_ASSIGNMENT
            after = new or EMPTY_ASSIGNMENT
            for t in before.keys() | after.keys():
                a, b = before.get(t), after.get(t)
                differ = a ^ b if a and b else (a or b)
                if differ:
                    bucket = touched.get(t)
                    if bucket is None:
                        touched[t] = set(differ)
                    else:
                        bucket.update(differ)
        _move(self.by_load, removed, added)
        if partial:
            return
        if fresh or self.free_stale:
            self.count_free(group)
            if self.free_stale:
                self._log.set_attr(self, "free_stale", False)
            return
        owners_of, free = group.target_owners, self.free
        for t, partitions in touched.items():
            topic = self.topics.get(t)
            if topic is None:
                continue  # a topic the metadata does not have: the target is untidy anyway
            owners = owners_of.get(t) or {}
            n = topic.num_partitions
            now = [p for p in free[t] if p not in partitions]
            now.extend(p for p in partitions if p not in owners and 0 <= p < n)
            free[t] = tuple(sorted(now))

    def _update_racks(self, todo: list[str], placed: list[tuple[str | None, int | None]]) -> None:
        """Move the members of ``todo`` between the (rack, load) buckets: ``placed``, the rack
        and load each was counted under before this update (load None: not counted)."""
        assert self.racks is not None
        rack_of, loads = self.racks.rack_of, self.loads
        removed: dict[tuple[str | None, int], list[str]] = {}
        added: dict[tuple[str | None, int], list[str]] = {}
        for member_id, (old_rack, old_load) in zip(todo, placed, strict=True):
            new_load = loads.get(member_id)
            new_rack = None if new_load is None else rack_of.get(member_id)
            if (old_rack, old_load) == (new_rack, new_load):
                continue
            if old_load is not None:
                removed.setdefault((old_rack, old_load), []).append(member_id)
            if new_load is not None:
                added.setdefault((new_rack, new_load), []).append(member_id)
        _move(self.by_rack, removed, added)

    def count_free(self, group: ConsumerGroup) -> None:
        """Every topic's partitions in no member's target, counted from the group's targets."""
        owners_of, free = group.target_owners, self.free
        for t, metadata in self.topics.items():
            owners = owners_of.get(t) or {}
            free[t] = tuple(filterfalse(owners.__contains__, range(metadata.num_partitions)))

    def summary(self) -> TargetSummary:
        """The summary of the targets as of the last :meth:`update` (read-only views)."""
        return TargetSummary(
            member_loads=MappingProxyType(self.loads),
            members_by_load=MappingProxyType(self.by_load),
            unassigned=MappingProxyType(self.free),
            held_by_racks=None if self.racks is None else MappingProxyType(self.racks.counts),
            members_by_rack=None if self.racks is None else self.members_by_rack(),
        )

    def members_by_rack(self) -> dict[str | None, dict[int, tuple[str, ...]]]:
        """rack -> load -> the sorted ids of its members with that load (from ``by_rack``)."""
        out: dict[str | None, dict[int, tuple[str, ...]]] = {}
        for (rack, load), ids in self.by_rack.items():
            out.setdefault(rack, {})[load] = ids
        return out

    def inputs_tidy(self) -> bool:
        """Every member's target is within its subscription (regex members: not known here)."""
        return not self.untidy and not self.regex_ids

    def spec_members(self, group: ConsumerGroup) -> dict[str, MemberSubscription]:
        """Every member's input, in member id order (regex members rebuilt)."""
        members = self.members
        if members is None:
            ids = self.sorted_ids
            get: Callable[[str], Any] = self.entries.get  # None for regex members (below)
            members = dict(zip(ids, map(get, ids), strict=True))
            self._log.set_attr(self, "members", members)
        if not self.regex_ids:
            return members
        members = dict(members)
        members_of = group.members
        for member_id in self.regex_ids:
            members[member_id] = self.build(group, members_of[member_id])
        return members


def _move(buckets: TDict, removed: Mapping[_K, list[str]], added: Mapping[_K, list[str]]) -> None:
    """Take the members of ``removed`` out of their buckets (key -> sorted tuple of member ids)
    and put those of ``added`` in theirs. A bucket that changes is stored as a new sorted tuple
    (a C-level copy of its member ids, or a sort when many changed); an empty one is dropped."""
    for k in removed.keys() | added.keys():
        gone, came = removed.get(k, ()), added.get(k, ())
        ids: list[str]
        if len(gone) + len(came) > 32:
            out = set(gone)
            ids = sorted(chain(filterfalse(out.__contains__, buckets.get(k, ())), came))
        else:
            ids = list(buckets.get(k, ()))
            for member_id in gone:
                del ids[bisect_left(ids, member_id)]
            for member_id in came:
                insort(ids, member_id)
        if ids:
            buckets[k] = tuple(ids)
        else:
            buckets.discard(k)


def refresh_spec_cache(group: ConsumerGroup) -> SpecCache:
    """The group's spec cache, brought up to date with the members marked dirty (a new cache,
    built from every member, when the subscription metadata changed)."""
    cache = _refresh(group, None)
    assert cache is not None
    return cache


def refresh_spec_cache_part(group: ConsumerGroup, limit: int) -> bool:
    """Bring at most ``limit`` members of the group's spec cache up to date; True when it is
    (nothing was left beyond them). A big group's refresh spread over several commands (the
    runtime's, before it copies an offloaded job) has the same result as one
    :func:`refresh_spec_cache`; a new cache then starts with nothing counted and every member
    marked dirty. The cache is not to be read before it is up to date."""
    return _refresh(group, limit) is not None


def _refresh(group: ConsumerGroup, limit: int | None) -> SpecCache | None:
    metadata = group.subscription_metadata
    cache = group.spec_cache
    dirty = group.spec_dirty
    if cache is None or cache.metadata is not metadata:
        cache = SpecCache(group.undo, metadata)
        group.set("spec_cache", cache)
        if limit is not None and len(group.members) > limit:
            group.undo.set_attr(cache, "free_stale", True)
            for member_id in group.members:
                if member_id not in dirty:
                    dirty[member_id] = True
            return None
        if dirty:
            dirty.del_many(list(dirty))
        cache.update(group, list(group.members), fresh=True)
        return cache
    if limit is not None and len(dirty) > limit:
        todo = list(islice(dirty, limit))
        dirty.del_many(todo)
        cache.update(group, todo, partial=True)
        return None
    todo = list(dirty)
    if todo:
        dirty.del_many(todo)
    cache.update(group, todo)
    return cache


def incremental_group_spec(
    group: ConsumerGroup,
) -> tuple[GroupSpec, Mapping[str, TopicMetadata]] | None:
    """The inputs of ``assign_changes``: the members as a read-only view of the cache (no
    per-member work) and the target summary; None when some member's target is not tidy or a
    member subscribes with a regex (the summary's promises would not hold, or the entries are
    not all cached)."""
    cache = refresh_spec_cache(group)
    if not cache.inputs_tidy():
        return None
    spec = GroupSpec(
        members=MappingProxyType(cache.entries),
        subscription_type=group.subscription_type(),
        partition_owners=group.target_owners,
        target_summary=cache.summary(),
    )
    return spec, cache.topics


def build_group_spec(group: ConsumerGroup) -> tuple[GroupSpec, Mapping[str, TopicMetadata]]:
    """The assignor's inputs for the group as it is now. Costs what changed since the last call
    (plus one C-level pass over the member ids when the set of members changed)."""
    cache = refresh_spec_cache(group)
    spec = GroupSpec(
        members=cache.spec_members(group),
        subscription_type=group.subscription_type(),
        partition_owners=group.target_owners,
    )
    return spec, cache.topics


def changed_members(spec: GroupSpec, result: GroupAssignment) -> list[str] | None:
    """Members whose result is not their input mapping (same object), in the result's order;
    None if the result's members are not exactly the spec's (a dict with the same keys)."""
    given = result.members
    specs = spec.members
    if not isinstance(given, dict):
        return None
    ids = list(given)
    if ids == list(specs):  # the usual case: same members, same order (identity compares)
        inputs = map(_assignment_of, specs.values())
    elif given.keys() == specs.keys():
        inputs = map(_assignment_of, map(specs.__getitem__, given))
    else:
        return None
    return list(compress(ids, map(is_not, given.values(), inputs)))


def check_result(
    spec: GroupSpec,
    topics: Mapping[TopicId, TopicMetadata],
    result: object,
    changed: list[str] | None,
    *,
    inputs_tidy: bool = False,
) -> None:
    """Raise :class:`~assignors.validation.InvalidAssignmentError` if ``result`` may not be
    installed. ``spec`` must be one :func:`build_group_spec` made: its members' assignments
    are the group's current target (valid, exclusive, within topics whose partition counts
    only grow) and ``partition_owners`` is that target's exact inverse. Then only the members
    in ``changed`` need their partitions examined: each of their partitions exists, none is
    given twice among them, and none is still owned by a member that keeps its target. Every
    member's subscription is checked (in C) — only the changed members' with ``inputs_tidy``
    (the caller knows every input assignment is within its member's subscription, so a kept
    one is too: :meth:`SpecCache.inputs_tidy`). Anything unusual falls back to the full
    :func:`~assignors.validation.check_assignment`, which names the culprit."""
    if (
        changed is None
        or not isinstance(result, GroupAssignment)
        or not _looks_valid(spec, topics, result.members, changed, inputs_tidy)
    ):
        check_assignment(spec, topics, result)


def _looks_valid(
    spec: GroupSpec,
    topics: Mapping[TopicId, TopicMetadata],
    given: Mapping[str, Any],
    changed: list[str],
    inputs_tidy: bool,
) -> bool:
    """A fast check of an assignor's (untrusted) output; False sends it to the full check.
    ``inputs_tidy``: every member's input is within its subscription, so only the changed
    members' subscriptions need checking."""
    specs = spec.members
    checked = changed if inputs_tidy else list(given)
    subscriptions = map(_subscribed, map(specs.__getitem__, checked))
    if not all(map(frozenset.issuperset, subscriptions, map(given.__getitem__, checked))):
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


def check_changes(
    spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata], changes: object
) -> None:
    """Raise :class:`~assignors.validation.InvalidAssignmentError` if the members' new targets
    returned by ``assign_changes`` may not be installed, every other member keeping its target
    (``spec`` carries the coordinator's own :class:`~assignors.api.TargetSummary`). The fast
    check examines only the changed members, without the owners index: a partition they are
    given must exist, go to one of them only, and be free or come from one of their current
    targets (the current target being exclusive, nobody who keeps a target holds it). Anything
    unusual is checked again as a whole result, which names the culprit."""
    if not isinstance(changes, Mapping):
        raise InvalidAssignmentError(
            f"invalid assignment: assign_changes() returned {type(changes).__name__}, "
            "not a mapping of member ids"
        )
    specs = spec.members
    unknown = sorted(m for m in changes if m not in specs)
    if unknown:
        raise InvalidAssignmentError(
            f"invalid assignment: assign_changes() names {unknown[0]!r}, not a member of the group"
        )
    if type(changes) is dict and _changes_look_valid(spec, topics, changes):
        return
    members = {m: specs[m] for m in sorted(specs)}
    whole = GroupSpec(
        members=members,
        subscription_type=spec.subscription_type,
        partition_owners=spec.partition_owners,
    )
    result = {m: changes.get(m, s.assignment) for m, s in members.items()}
    check_assignment(whole, topics, GroupAssignment(members=result))


def _changes_look_valid(
    spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata], changes: dict[str, Any]
) -> bool:
    """The fast check of :func:`check_changes`; False sends the result to the whole check."""
    summary = spec.target_summary
    if summary is None:
        return False
    specs = spec.members
    by_topic: dict[TopicId, list[frozenset[int]]] = {}
    for m, new in changes.items():
        if type(new) is not dict or not specs[m].subscribed_topic_ids.issuperset(new):
            return False
        for t, partitions in new.items():
            if type(partitions) is not frozenset or not partitions:
                return False
            by_topic.setdefault(t, []).append(partitions)
    free = summary.unassigned
    released: dict[TopicId, list[frozenset[int]]] = {}
    for m in changes:
        for t, partitions in specs[m].assignment.items():
            if t in by_topic:
                released.setdefault(t, []).append(partitions)
    for t, sets in by_topic.items():
        metadata = topics.get(t)
        if metadata is None:
            return False
        union: set[int] = set().union(*sets)
        if len(union) != sum(map(len, sets)) or not set(map(type, union)) <= {int}:
            return False
        if min(union) < 0 or max(union) >= metadata.num_partitions:
            return False
        available = set(free.get(t, ()))
        available.update(*released.get(t, ()))
        if not union <= available:
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
    """Records installing the new target at ``group_epoch`` (computed at ``timestamp_ms``; 0
    with batching off); UnknownServerError (nothing changed) if the assignor fails or returns an
    invalid result. ``assign_changes`` is asked first (the module's "Incremental computation")."""
    records = incremental_target_assignment(group, group_epoch, assignor, timestamp_ms)
    if records is not None:
        return records
    spec, topics = build_group_spec(group)
    tidy = group.spec_cache.inputs_tidy()

    def whole() -> tuple[GroupAssignment, list[str] | None]:
        result: GroupAssignment = assignor.assign(spec, topics)
        changed = changed_members(spec, result) if isinstance(result, GroupAssignment) else None
        check_result(spec, topics, result, changed, inputs_tidy=tidy)
        return result, changed

    result, changed = _guarded(assignor, group_epoch, whole)
    return target_records(group, result.members, changed, group_epoch, timestamp_ms)


def incremental_target_assignment(
    group: ConsumerGroup, group_epoch: int, assignor: PartitionAssignor, timestamp_ms: int = 0
) -> list[r.Record] | None:
    """:func:`compute_target_assignment` by ``assign_changes`` alone; None: untaken, declined."""
    changes_of = incremental_method(assignor)
    given = None if changes_of is None else incremental_group_spec(group)
    if changes_of is None or given is None:
        return None
    changes = _guarded(assignor, group_epoch, lambda: changes_of(*given))
    if changes is None:
        return None
    _guarded(assignor, group_epoch, lambda: check_changes(*given, changes))
    return target_records(group, changes, list(changes), group_epoch, timestamp_ms)


_T = TypeVar("_T")
_K = TypeVar("_K", bound=Hashable)


def incremental_method(assignor: PartitionAssignor) -> Callable[..., Any] | None:
    """The assignor's ``assign_changes``, if its *class* defines one. A wrapper that forwards
    attributes dynamically (``__getattr__``, like the runtime's timing and tracing wrapper) is
    called through ``assign``, which it times and traces: to take the incremental path, a
    wrapper defines ``assign_changes`` itself."""
    if getattr(type(assignor), "assign_changes", None) is None:
        return None
    method: Callable[..., Any] = getattr(assignor, "assign_changes")  # noqa: B009
    return method


def _guarded(assignor: PartitionAssignor, group_epoch: int, compute: Callable[[], _T]) -> _T:
    """``compute()``, with any failure of the assignor (or of its result's validation) raised
    as UnknownServerError."""
    try:
        return compute()
    except PartitionAssignorError as exc:
        raise UnknownServerError(
            f"Failed to compute a new target assignment for epoch {group_epoch}: {exc}"
        ) from exc
    except Exception as exc:  # a plugin bug must not corrupt the group: same treatment
        raise UnknownServerError(
            f"Failed to compute a new target assignment for epoch {group_epoch}: assignor "
            f"'{assignor.name}' raised {type(exc).__name__}: {exc}"
        ) from exc


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
    """The inputs of one offloaded computation, in member id order: the spec cache's member
    inputs themselves (immutable values, shared, never rebuilt) and, when the targets are tidy,
    a copy of its :class:`~assignors.api.TargetSummary` (then an assignor with
    ``assign_changes`` computes only what changes, as inline)."""

    group_id: str
    group_uid: str
    epoch: int
    """The group epoch the target is computed for."""
    assignor: str
    homogeneous: bool
    topics: tuple[TopicMetadata, ...]
    member_ids: tuple[str, ...]
    members: tuple[MemberSubscription, ...]
    """Each member's input; its ``assignment`` is the group's current target object (read-only)."""
    summary: TargetSummary | None = None

    @property
    def assignments(self) -> tuple[Assignment, ...]:
        """Each member's current target."""
        return tuple(map(_assignment_of, self.members))

    def group_spec(self) -> tuple[GroupSpec, dict[TopicId, TopicMetadata]]:
        """The assignor's inputs (in the worker): the members, and the inverted current
        target, built when first read (the incremental path does not read it)."""
        members = dict(zip(self.member_ids, self.members, strict=True))
        kind = SubscriptionType.HOMOGENEOUS if self.homogeneous else SubscriptionType.HETEROGENEOUS
        spec = GroupSpec(
            members=members,
            subscription_type=kind,
            partition_owners=_Owners(members),
            target_summary=self.summary,
        )
        return spec, {t.topic_id: t for t in self.topics}


class _Owners(Mapping[TopicId, Mapping[int, str]]):
    """The inverted current target of ``members``, built on first use."""

    __slots__ = ("_built", "_members")

    def __init__(self, members: Mapping[str, MemberSubscription]) -> None:
        self._members = members
        self._built: dict[TopicId, dict[int, str]] | None = None

    def _index(self) -> dict[TopicId, dict[int, str]]:
        owners = self._built
        if owners is None:
            owners = self._built = {}
            for member_id, member in self._members.items():
                for t, partitions in member.assignment.items():
                    bucket = owners.get(t)
                    if bucket is None:
                        owners[t] = dict.fromkeys(partitions, member_id)
                    else:
                        bucket.update(dict.fromkeys(partitions, member_id))
        return owners

    def __getitem__(self, topic_id: TopicId) -> Mapping[int, str]:
        return self._index()[topic_id]

    def __iter__(self) -> Iterator[TopicId]:
        return iter(self._index())

    def __len__(self) -> int:
        return len(self._index())


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
    """Copy the inputs of a computation at ``epoch`` out of ``group``: the member inputs come
    from the spec cache (C-level passes over the member ids), and with tidy targets a copy of
    its summary."""
    cache = refresh_spec_cache(group)
    summary: TargetSummary | None = None
    if cache.inputs_tidy():  # every member's input is cached (no regex member)
        ids = cache.sorted_ids
        members = tuple(map(cache.entries.__getitem__, ids))
        summary = TargetSummary(
            member_loads=dict(cache.loads),
            members_by_load=dict(cache.by_load),
            unassigned=dict(cache.free),
            held_by_racks=None if cache.racks is None else dict(cache.racks.counts),
            members_by_rack=None if cache.racks is None else cache.members_by_rack(),
        )
    else:
        spec, _topics = build_group_spec(group)
        ids = tuple(spec.members)
        members = tuple(spec.members.values())
    topics = cache.topics
    return AssignmentJob(
        group_id=group.group_id,
        group_uid=group.group_uid,
        epoch=epoch,
        assignor=assignor,
        homogeneous=group.subscription_type() is SubscriptionType.HOMOGENEOUS,
        topics=tuple(topics[t] for t in sorted(topics)),
        member_ids=ids,
        members=members,
        summary=summary,
    )


def run_job(job: AssignmentJob, assignor: PartitionAssignor) -> AssignmentOutcome:
    """Run the assignor on the job's inputs and validate its result (in a worker). Pure. An
    assignor with ``assign_changes`` is asked for the changes first when the job carries a
    summary, as inline."""
    spec, topics = job.group_spec()
    members = spec.members
    try:
        assign_changes = incremental_method(assignor)
        changes = None
        if assign_changes is not None and spec.target_summary is not None:
            changes = assign_changes(spec, topics)
            if changes is not None:
                check_changes(spec, topics, changes)
        if changes is not None:
            new_targets: Mapping[str, Mapping[TopicId, frozenset[int]]] = changes
            changed: list[str] | None = list(changes)
        else:
            whole = GroupSpec(
                members=members,
                subscription_type=spec.subscription_type,
                partition_owners=spec.partition_owners,
            )
            result = assignor.assign(whole, topics)
            changed = (
                changed_members(whole, result) if isinstance(result, GroupAssignment) else None
            )
            check_result(whole, topics, result, changed)
            new_targets = result.members
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
    out: dict[str, tuple[str | None, Assignment]] = {}
    for member_id in changed if changed is not None else members:
        new = {t: ps for t, ps in new_targets[member_id].items() if ps}
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
