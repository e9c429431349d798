"""The ``uniform`` assignor (Kafka 4.0's default server-side assignor): balanced, then sticky.

Theory of operation
-------------------
Members with the same subscription are interchangeable, so the assignor works on *classes* of
members (one class per distinct subscription; a homogeneous group is one class) and only goes
down to individual members at the end:

1. **Clean** each member's current target assignment: drop topics it no longer subscribes to,
   topics that vanished, indexes out of range and partitions claimed twice (the first member in
   member-id order keeps them). Per topic, what nobody holds forms the *unassigned pool*.
2. **Count** (only when there are several classes): decide how many partitions of each topic
   each class gets. First the unassigned partitions of each topic are water-filled onto its
   least-loaded subscriber classes (topics with the most partitions per subscriber first, as in
   KAFKA-17710); then each topic whose most-loaded holder carries two or more partitions more than
   its least-loaded subscriber is re-split optimally among its subscribers, keeping every class
   as close to what it holds as that optimum allows. Each re-split strictly lowers the sum of
   squared member loads, so the passes converge; they are capped at
   :data:`~assignors.balance.MAX_BALANCE_PASSES` (:mod:`assignors.balance`). The result is *locally balanced*: no single partition can move to
   another subscriber of its topic and narrow the gap between the two members.
3. **Realise** per class: the class total is spread over its members (sizes differ by at most
   one; the extra partitions go first to members that already hold that many, so survivors never
   lose partitions when someone leaves). Members give up what their class must release and what
   exceeds their quota (the highest partition indexes), and members below quota take contiguous
   runs from the pool.

Members whose partitions do not change get their input mapping back unchanged (shared, not
copied). Member ids, topic ids and partitions are sorted wherever order matters, so the result
depends only on the input's values, never on ``hash()`` seeds or mapping order.

Racks (beyond Kafka 4.x, whose server-side assignors ignore them since KAFKA-16694): when some
member of a class is in a rack that holds replicas of the class's partitions, step 3 is
:func:`assignors.racks_uniform.settle_class` instead — the same class totals and the same q / q+1
member sizes (balance first), but which members get the extra partition and which partitions
each member gets are planned for the most partitions with a replica in the member's rack, then
for the fewest moves. Without rack information, or with no member in a rack that holds a
replica, nothing changes: the result is exactly the rack-blind one. ``assign_changes`` plans
groups where racks are relevant the same way from the summary (below).

Incremental path (``assign_changes``)
-------------------------------------
In a homogeneous group, step 3 depends only on each member's load, the member order and the
unassigned partitions: with ``q, r = divmod(partitions, members)``, the first ``r`` members (in
member id order) holding more than ``q`` keep ``q + 1`` and every other such member comes down
to ``q``; if fewer than ``r`` hold more than ``q``, the first of the others get ``q + 1``.
Given the coordinator's :class:`~assignors.api.TargetSummary` (members sorted by load, the
unassigned partitions), those cuts are found by binary search in the load buckets, and only the
members whose target differs from their load are visited: members above their target give up
their highest partitions, members below it take contiguous runs of the pool. The result is the
one :meth:`UniformAssignor.assign` gives, member for member (the same steps on the same
members); the cost follows the members that change and the number of distinct loads, not the
group's size. Heterogeneous groups, or a summary that does not add up, return None (the
coordinator then calls ``assign``).

With racks relevant, the rack plan is global (which member gets an extra partition depends on
the racks of everything held), so the incremental path runs the plan of step 3 on the same
inputs as ``assign``, from the summary: the held partitions counted by (their racks, their
member's rack) (``TargetSummary.held_by_racks``) and the members in buckets by rack and load
(``members_by_rack``). Each node's members taking ``q + 1`` are found as in the buckets of the
rack-blind path (the first ids across the node's buckets above ``q``, then across the others),
and only the members whose target differs from their load, or that give up partitions the
plan moves, are visited (:class:`~assignors.racks_members.Sparse`). The result is again
``assign``'s, member for member; the cost follows the members that change, the racks and the
distinct loads, plus one pass over the subscribed topics (as without racks).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from heapq import merge
from itertools import chain, compress, filterfalse, islice, repeat
from operator import attrgetter, lt
from typing import ClassVar

from assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberAssignment,
    MemberSubscription,
    PartitionAssignorError,
    SubscriptionType,
    TopicId,
    TopicMetadata,
)
from assignors.balance import MAX_BALANCE_ROUNDS, Split, fit, water_level
from assignors.loads import _values, member_loads
from assignors.racks import Counted, RackNodes, count_owned, relevant_racks
from assignors.racks_uniform import Holders, settle_class, settle_from_summary

__all__ = ["UniformAssignor", "compute_uniform_assignment", "compute_uniform_changes"]

_assignment_of = attrgetter("assignment")
_subscribed = attrgetter("subscribed_topic_ids")
_rack_of = attrgetter("rack_id")


class UniformAssignor:
    """Balanced and sticky; member sizes differ by at most one in homogeneous groups (default)."""

    name: ClassVar[str] = "uniform"
    rack_aware: ClassVar[bool] = True

    def assign(
        self, group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
    ) -> GroupAssignment:
        return GroupAssignment(members=compute_uniform_assignment(group_spec, topics))

    def assign_changes(
        self, group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
    ) -> dict[str, MemberAssignment] | None:
        """The members whose assignment :meth:`assign` would change (the SPI's optional
        extra). None for a subclass that overrides ``assign``: the shortcut stands in for this
        class's own ``assign`` only."""
        if type(self).assign is not UniformAssignor.assign:
            return None
        return compute_uniform_changes(group_spec, topics)


def compute_uniform_assignment(
    group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
) -> dict[str, MemberAssignment]:
    """The uniform assignment as a plain ``member id -> {topic id: frozenset}`` dict."""
    specs = group_spec.members
    if not specs:
        return {}
    return _Builder(
        specs, group_spec.subscription_type, topics, group_spec.partition_owners
    ).build()


def compute_uniform_changes(
    group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
) -> dict[str, MemberAssignment] | None:
    """The members whose uniform assignment differs from their current one (member id -> new
    assignment, exactly as :func:`compute_uniform_assignment` gives it), computed from the
    spec's :class:`~assignors.api.TargetSummary` without visiting the members that keep their
    partitions. None when the spec has no summary, is heterogeneous, or the summary does not add
    up (the caller then computes the whole assignment)."""
    summary = group_spec.target_summary
    specs = group_spec.members
    if (
        summary is None
        or group_spec.subscription_type is not SubscriptionType.HOMOGENEOUS
        or not specs
    ):
        return None
    subscription = next(iter(specs.values())).subscribed_topic_ids
    if not subscription <= topics.keys():
        return None  # the whole computation names the culprit
    counts = {t: n for t in subscription if (n := topics[t].num_partitions) > 0}
    by_load = summary.members_by_load
    unassigned = summary.unassigned
    try:
        free = {t: unassigned[t] for t in counts}
    except KeyError:
        return None
    total = sum(counts.values())
    # The summary must describe exactly these members and partitions (cheap sums; anything else
    # is left to the whole computation).
    if sum(map(len, by_load.values())) != len(specs) or total != sum(map(len, free.values())) + sum(
        k * len(ids) for k, ids in by_load.items()
    ):
        return None
    by_rack = summary.members_by_rack
    member_racks = map(_rack_of, specs.values()) if by_rack is None else by_rack.keys()
    racks = relevant_racks(member_racks, counts, topics)
    if racks:
        if summary.held_by_racks is None or by_rack is None:
            return None  # the plan needs the held partitions and the members counted by racks
        topic_ids = sorted(counts)
        incoming = [(t, seq) for t in topic_ids if (seq := free[t])]
        owners = group_spec.partition_owners
        return settle_from_summary(
            specs, summary, total, incoming, topic_ids, topics, owners, racks
        )
    return _Changes(specs, by_load, counts, free).compute(total)


class _Changes:
    """One incremental computation (see "Incremental path" above)."""

    def __init__(
        self,
        specs: Mapping[str, MemberSubscription],
        by_load: Mapping[int, Sequence[str]],
        counts: dict[TopicId, int],
        free: dict[TopicId, Sequence[int]],
    ) -> None:
        self.specs, self.by_load, self.counts, self.free = specs, by_load, counts, free
        self.target: dict[str, int] = {}  # member id -> target, for the members that change
        self.load: dict[str, int] = {}

    def _merged(self, loads: list[int]) -> tuple[list[str], list[int]]:
        """The members of the given load buckets, in member id order, and their loads."""
        by_load = self.by_load
        pairs = list(merge(*([(m, k) for m in by_load[k]] for k in loads)))
        return [m for m, _ in pairs], [k for _, k in pairs]

    def _split(self, few: list[str], many: Sequence[str], first: int) -> int:
        """``few`` and ``many`` are disjoint and sorted: how many of ``many`` are among the
        first ``first`` members of their merge (binary search on their ranks)."""
        lo, hi = 0, len(many)
        while lo < hi:  # the rank of many[j] in the merge is j + (members of few before it)
            mid = (lo + hi) // 2
            if mid + bisect_left(few, many[mid]) < first:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _set(self, members: Sequence[str], load: int, target: int) -> None:
        if load != target:
            for m in members:
                self.load[m] = load
                self.target[m] = target

    def compute(self, total: int) -> dict[str, MemberAssignment]:
        by_load = self.by_load
        quota, extras = divmod(total, len(self.specs))
        loads = sorted(by_load)
        above = sum(len(by_load[k]) for k in loads if k > quota)
        if above >= extras:
            # The first `extras` members holding more than the quota keep quota + 1.
            heavy, heavy_loads = self._merged([k for k in loads if k > quota + 1])
            bucket = by_load.get(quota + 1, ())
            cut = self._split(heavy, bucket, extras)
            self._set(bucket[cut:], quota + 1, quota)
            for rank, (m, k) in enumerate(zip(heavy, heavy_loads, strict=True)):
                keep = quota + 1 if rank + bisect_left(bucket, m) < extras else quota
                self._set((m,), k, keep)
            for k in loads:
                if k < quota:
                    self._set(by_load[k], k, quota)
        else:
            # Everyone above the quota keeps quota + 1 (those above that give up the rest); the
            # first of the others (in member order) get quota + 1 too.
            for k in loads:
                if k > quota + 1:
                    self._set(by_load[k], k, quota + 1)
            first = extras - above
            light, light_loads = self._merged([k for k in loads if k < quota])
            bucket = by_load.get(quota, ())
            cut = self._split(light, bucket, first)
            self._set(bucket[:cut], quota, quota + 1)
            for rank, (m, k) in enumerate(zip(light, light_loads, strict=True)):
                get = quota + 1 if rank + bisect_left(bucket, m) < first else quota
                self._set((m,), k, get)
        return self._realise()

    def _realise(self) -> dict[str, MemberAssignment]:
        """What :meth:`_Builder._settle_class` does, for the members that change only."""
        specs, target, load = self.specs, self.target, self.load
        out: dict[str, MemberAssignment] = {}
        given_up: dict[TopicId, list[int]] = {}
        takers: list[str] = []
        for m in sorted(target):
            keep = target[m]
            if keep >= load[m]:
                takers.append(m)
                continue
            assignment = specs[m].assignment
            trimmed: dict[TopicId, frozenset[int]] = {}
            for t in sorted(assignment):
                partitions = assignment[t]
                if keep >= len(partitions):
                    trimmed[t] = partitions
                    keep -= len(partitions)
                    continue
                ordered = sorted(partitions)
                if keep:
                    trimmed[t] = frozenset(ordered[:keep])
                given_up.setdefault(t, []).extend(ordered[keep:])
                keep = 0
            out[m] = trimmed
        pool: list[tuple[TopicId, Sequence[int]]] = []
        free = self.free
        for t in sorted(set(given_up).union(t for t, seq in free.items() if seq)):
            extra = given_up.get(t)
            seq = sorted([*free[t], *extra]) if extra else free[t]
            if seq:
                pool.append((t, seq))
        at, start = 0, 0
        for m in takers:
            need = target[m] - load[m]
            assignment = dict(specs[m].assignment)
            while need:
                if at >= len(pool):
                    raise PartitionAssignorError("internal error: partition pool exhausted")
                t, seq = pool[at]
                take = min(need, len(seq) - start)
                run = frozenset(seq[start : start + take])
                before = assignment.get(t)
                assignment[t] = before | run if before else run
                need -= take
                start += take
                if start == len(seq):
                    at, start = at + 1, 0
            out[m] = assignment
        if at != len(pool):
            raise PartitionAssignorError("internal error: partitions left in the pool")
        return out


class _Builder:
    """One assignment computation. Members are referred to by their index in sorted order."""

    def __init__(
        self,
        specs: Mapping[str, MemberSubscription],
        subscription_type: SubscriptionType,
        topics: Mapping[TopicId, TopicMetadata],
        partition_owners: Mapping[TopicId, Mapping[int, str]] | None = None,
    ) -> None:
        self.partition_owners = partition_owners or {}
        given = list(specs)
        self.member_ids = member_ids = sorted(given)
        count = len(member_ids)
        if member_ids == given:  # given sorted (the coordinator does): no lookups
            spec_list = list(specs.values())
        else:
            spec_list = list(map(specs.__getitem__, member_ids))
        self.assignments = list(map(_assignment_of, spec_list))

        # Classes of identical subscriptions, numbered in the order of their first member.
        self.class_members: list[list[int]] = []
        self.class_subscriptions: list[frozenset[TopicId]] = []
        if subscription_type is SubscriptionType.HOMOGENEOUS:
            # Trusted, as in Kafka: comparing thousands of equal subscriptions member by member
            # would cost more than the whole assignment. The result is validated anyway.
            self.class_members.append(list(range(count)))
            self.class_subscriptions.append(spec_list[0].subscribed_topic_ids)
            self.member_class = [0] * count
        else:
            class_of_subscription: dict[frozenset[TopicId], int] = {}
            self.member_class = member_class = [0] * count
            for i, subscription in enumerate(map(_subscribed, spec_list)):
                k = class_of_subscription.get(subscription)
                if k is None:
                    k = class_of_subscription[subscription] = len(self.class_members)
                    self.class_members.append([i])
                    self.class_subscriptions.append(subscription)
                else:
                    self.class_members[k].append(i)
                member_class[i] = k

        # Partition counts of the subscribed topics; a missing topic is the caller's error.
        partition_counts: dict[TopicId, int] = {}
        for k, subscription in enumerate(self.class_subscriptions):
            missing = [t for t in subscription if t not in topics]
            if missing:
                raise PartitionAssignorError(
                    f"member {member_ids[self.class_members[k][0]]!r} is subscribed to topic "
                    f"{min(missing)!r}, which is not in the topic metadata"
                )
            for t in subscription:
                if t not in partition_counts:
                    partition_counts[t] = max(0, topics[t].num_partitions)
        self.partition_counts = {t: n for t, n in partition_counts.items() if n > 0}
        self.topic_ids = sorted(self.partition_counts)

        # Racks are looked at only when some subscribed topic has partition racks.
        self.topics = topics
        self.rack_of: list[str | None] | None = None
        if any(topics[t].partition_racks for t in self.topic_ids):
            self.rack_of = list(map(_rack_of, spec_list))
        self.racks: list[str] = []  # one class: the relevant racks (build)
        self.counted: Counted | None = None
        self.nodes_by_racks: dict[tuple[str, ...], list[int]] = {}  # the classes' members' nodes
        self.from_owners = False
        self.exact: set[TopicId] = set()  # topics whose spec owners are the inverse of current

        self.current: list[Mapping[TopicId, frozenset[int]]] = list(self.assignments)
        self.owned = [False] * count  # True once current[i] is our own (mutable) dict
        self.load = [0] * count
        self.target = [0] * count
        self.held: dict[TopicId, list[tuple[int, frozenset[int]]]] = {}
        self.unassigned: dict[TopicId, Sequence[int]] = {}

    # ------------------------------------------------------------------ driver

    def build(self) -> dict[str, MemberAssignment]:
        one = len(self.class_members) == 1
        if one:
            if self.rack_of is not None:
                self.racks = relevant_racks(self.rack_of, self.topic_ids, self.topics)
            self.from_owners = self._clean_from_owners()
            if not self.from_owners:
                self.counted = None  # the owners are not the members' assignments
        if not one or not (self.from_owners or self._clean_one_class()):
            self._clean()
        if one:
            members = self.class_members[0]
            total = sum(self.partition_counts.values())
            if self.racks:  # the rack plan sets the targets; it reads only the class total
                self.target[0] = total
            else:
                self._set_targets(members, total)
            incoming = [(t, self.unassigned[t]) for t in self.topic_ids if self.unassigned[t]]
            self._settle_class(members, incoming, self.topic_ids)
        else:
            self._assign_classes()
        return dict(zip(self.member_ids, self.current, strict=False))

    def _count_racks(self, load: list[int]) -> bool:
        """One class, racks relevant (``racks``), the spec has the owners: the held partitions
        counted by racks from them (``counted``, :func:`count_owned`, given the members'
        loads ``load``); whether they were."""
        self.counted = count_owned(
            RackNodes(self.racks),
            self.member_ids,
            self.rack_of,  # type: ignore[arg-type]  # racks are relevant: rack_of is set
            self.partition_owners,
            self.topic_ids,
            self.topics,
            load,
        )
        return self.counted is not None

    # ------------------------------------------------------------------ step 1: clean

    def _own(self, i: int) -> dict[TopicId, frozenset[int]]:
        """Member i's assignment as a dict we may change (copied on first write)."""
        if not self.owned[i]:
            self.current[i] = dict(self.current[i])
            self.owned[i] = True
        return self.current[i]  # type: ignore[return-value]

    def _clean_from_owners(self) -> bool:
        """The homogeneous case when the spec's ``partition_owners`` is the inverse of the
        members' assignments (as the coordinator passes it): no per-partition work in Python.
        Member loads are summed; when every member holds only non-empty sets of usable topics
        and the loads add up to the owned partitions, no partition is held twice, and what is
        free per topic follows from its owners (their range checked by C-level passes, or, with
        racks relevant, by :func:`count_owned` as it counts them, which also checks that they
        are members or, for what it takes from the loads, that they add up:
        :meth:`_count_racks`; when it cannot tell, the owners are not used). Same outcome as
        :meth:`_clean_one_class`; returns False (nothing changed) when it cannot decide."""
        owners_of = self.partition_owners
        assignments = self.assignments
        if not owners_of and any(assignments):
            return False
        counts = self.partition_counts
        if not set(chain.from_iterable(assignments)) <= frozenset(self.topic_ids):
            return False
        load = member_loads(assignments)
        if load is None:
            return False
        checked = bool(self.racks and owners_of)
        if checked and not self._count_racks(load):
            return False  # an owner who is no member, or an index out of range
        owned = 0
        unassigned: dict[TopicId, Sequence[int]] = {}
        for t in self.topic_ids:
            n = counts[t]
            owners = owners_of.get(t) or {}
            held = len(owners)
            owned += held
            if not held:
                unassigned[t] = range(n)
            elif held == n:
                # n distinct indexes below n summing to 0+1+...+(n-1) are exactly range(n):
                # that sum is the largest n distinct integers below n can reach, and only
                # range(n) reaches it (cheaper than min and max over the keys).
                if not checked and (max(owners) >= n or sum(owners) != n * (n - 1) // 2):
                    return False
                unassigned[t] = ()
            else:
                free = list(filterfalse(owners.__contains__, range(n)))
                if len(free) + held != n:
                    return False  # an index out of range
                unassigned[t] = free
        if sum(load) != owned:
            return False  # some partition held twice, or owners that are not the inverse
        self.load = load
        self.unassigned = unassigned
        return True

    def _clean_one_class(self) -> bool:
        """The common homogeneous case, with as little per-member work as possible: every
        member holds only non-empty sets of subscribed topics, no partition twice, no index out
        of range. Per topic, the union of what members hold is built directly; sizes add up
        exactly when nothing is held twice. Returns False (nothing changed) otherwise."""
        counts = self.partition_counts
        unions: dict[TopicId, set[int]] = {t: set() for t in self.topic_ids}
        add = {t: u.update for t, u in unions.items()}  # exactly the usable topics
        load: list[int] = []
        record = load.append
        try:
            for assignment in self.assignments:
                size = 0
                for t, partitions in assignment.items():
                    if not partitions:
                        return False
                    add[t](partitions)  # KeyError: unsubscribed or vanished topic
                    size += len(partitions)
                record(size)
        except KeyError:
            return False
        if sum(load) != sum(map(len, unions.values())):
            return False  # some partition is held twice
        unassigned: dict[TopicId, Sequence[int]] = {}
        for t, union in unions.items():
            n = counts[t]
            if not union:
                unassigned[t] = range(n)
            elif len(union) == n:
                if min(union) != 0 or max(union) != n - 1:
                    return False
                unassigned[t] = ()
            else:
                free = list(filterfalse(union.__contains__, range(n)))
                if len(free) + len(union) != n:
                    return False  # an index out of range
                unassigned[t] = free
        self.load = load
        self.unassigned = unassigned
        return True

    def _clean(self) -> None:
        """The general cleanup (step 1). With racks, also the topics whose spec owners can stand
        for the holders of the cleaned assignments (``exact``): every member held only
        non-empty sets of usable topics, none claimed twice or out of range, and the topic has
        as many owners as held partitions — the coordinator's owners, the inverse of the
        targets."""
        owners_of = self.partition_owners
        racked = self.rack_of is not None and bool(owners_of)
        counts = self.partition_counts
        current, load, owned = self.current, self.load, self.owned
        assignments, member_class = self.assignments, self.member_class
        held: dict[TopicId, list[tuple[int, frozenset[int]]]] = {t: [] for t in self.topic_ids}
        # Per class, the subscribed topics that exist and have partitions.
        usable = [frozenset(s & counts.keys()) for s in self.class_subscriptions]
        if len(usable) == 1:
            tidy = all(map(usable[0].issuperset, assignments))
        else:
            tidy = all(map(frozenset.issuperset, [usable[k] for k in member_class], assignments))
        # Fast path (the usual case): every member holds only non-empty sets of usable topics.
        fast = tidy and all(chain.from_iterable(map(_values, assignments)))
        if fast:
            for i, assignment in enumerate(assignments):
                if assignment:
                    for t, partitions in assignment.items():
                        held[t].append((i, partitions))
                    load[i] = sum(map(len, assignment.values()))
        else:
            for i, assignment in enumerate(assignments):
                if not assignment:
                    continue
                valid = usable[member_class[i]]
                kept = {t: p for t, p in assignment.items() if p and t in valid}
                if len(kept) != len(assignment):
                    current[i] = kept
                    owned[i] = True
                for t, partitions in kept.items():
                    held[t].append((i, partitions))
                load[i] = sum(map(len, kept.values()))

        # Per topic: what nobody holds. Sizes add up exactly when no partition is held twice
        # and no index is out of range; otherwise resolve (rare) and recount.
        for t in self.topic_ids:
            n = counts[t]
            entries = held[t]
            if not entries:
                self.unassigned[t] = range(n)
                continue
            sets = [p for _, p in entries]
            free = set(range(n))
            free.difference_update(*sets)
            if sum(map(len, sets)) + len(free) != n:
                entries = held[t] = self._resolve_conflicts(t, n, entries)
                free = set(range(n))
                free.difference_update(*[p for _, p in entries])
            elif fast and racked and len(owners_of.get(t) or ()) == n - len(free):
                self.exact.add(t)  # as many owners as held partitions (checked when used)
            self.unassigned[t] = sorted(free) if len(free) != n else range(n)
        self.held = held

    def _resolve_conflicts(
        self, t: TopicId, n: int, entries: list[tuple[int, frozenset[int]]]
    ) -> list[tuple[int, frozenset[int]]]:
        """Drop out-of-range indexes and second claims (earlier member id wins)."""
        claimed: set[int] = set()
        kept: list[tuple[int, frozenset[int]]] = []
        for i, partitions in entries:
            if claimed.isdisjoint(partitions) and min(partitions) >= 0 and max(partitions) < n:
                valid = partitions
            else:
                valid = frozenset(p for p in partitions if 0 <= p < n and p not in claimed)
                assignment = self._own(i)
                if valid:
                    assignment[t] = valid
                else:
                    del assignment[t]
                self.load[i] -= len(partitions) - len(valid)
            if valid:
                claimed.update(valid)
                kept.append((i, valid))
        return kept

    # ------------------------------------------------------------------ step 2: count

    def _assign_classes(self) -> None:
        class_members = self.class_members
        classes = range(len(class_members))
        size = [len(members) for members in class_members]
        counts = self.partition_counts
        load = self.load

        # Current holdings per class and topic.
        holding: list[dict[TopicId, int]] = [{} for _ in classes]
        member_class = self.member_class
        for t, entries in self.held.items():
            for i, partitions in entries:
                h = holding[member_class[i]]
                h[t] = h.get(t, 0) + len(partitions)
        total = [sum(load[i] for i in members) for members in class_members]

        subscribers: dict[TopicId, list[int]] = {t: [] for t in self.topic_ids}
        for k, subscription in enumerate(self.class_subscriptions):
            for t in subscription:
                if t in counts:
                    subscribers[t].append(k)
        for t in self.topic_ids:
            subscribers[t].sort()

        def topic_order(t: TopicId) -> tuple[float, int, TopicId]:
            members = sum(size[k] for k in subscribers[t])
            return (-(counts[t] / members), members, t)

        order = sorted(self.topic_ids, key=topic_order)
        share = [dict(h) for h in holding]  # the class-level split being computed

        # 2a. Water-fill each topic's unassigned partitions onto its least-loaded subscribers.
        for t in order:
            free = len(self.unassigned[t])
            if not free:
                continue
            ks = subscribers[t]
            if len(ks) == 1:
                k = ks[0]
                share[k][t] = share[k].get(t, 0) + free
                total[k] += free
                continue
            level = water_level([size[k] for k in ks], [total[k] for k in ks], free)
            low = [max(0, level * size[k] - total[k]) for k in ks]
            high = [max(0, (level + 1) * size[k] - total[k]) for k in ks]
            add = fit(low, low, high, free)
            for k, a in zip(ks, add, strict=False):
                if a:
                    share[k][t] = share[k].get(t, 0) + a
                    total[k] += a

        # 2b. Balance: re-split single topics, then move partitions along chains of topics.
        split = Split(size, total, share, subscribers, counts, self.class_subscriptions)
        shared = [t for t in order if len(subscribers[t]) > 1]
        for _ in range(MAX_BALANCE_ROUNDS):
            split.balance_topics(shared)
            if not split.shift_chains():
                break

        # Step 3: realise. Targets first (they decide who gives up what), then the forced
        # releases of each class, then the per-topic pools are handed to receiving classes.
        for k in classes:
            self._set_targets(class_members[k], total[k])
        released: dict[TopicId, list[int]] = {}
        for k in classes:
            for t in sorted(holding[k]):
                excess = holding[k][t] - share[k].get(t, 0)
                if excess > 0:
                    released.setdefault(t, []).extend(
                        self._release_topic(class_members[k], t, excess)
                    )
        incoming: list[list[tuple[TopicId, Sequence[int]]]] = [[] for _ in classes]
        for t in self.topic_ids:
            pool = self.unassigned[t]
            extra = released.get(t)
            if extra:
                pool = sorted([*pool, *extra])
            start = 0
            for k in subscribers[t]:
                gain = share[k].get(t, 0) - holding[k].get(t, 0)
                if gain > 0:
                    incoming[k].append((t, pool[start : start + gain]))
                    start += gain
            if start != len(pool):
                raise PartitionAssignorError(
                    f"internal error: {len(pool) - start} partitions of topic {t!r} left over"
                )
        self.exact.difference_update(released)
        for k in classes:
            usable = sorted(t for t in self.class_subscriptions[k] if t in counts)
            mine = [t for t in usable if t in self.exact and subscribers[t] == [k]]
            self._settle_class(class_members[k], incoming[k], usable, mine)

    def _owned_by(self, topic_ids: Sequence[TopicId], members: list[int]) -> frozenset[TopicId]:
        """Of ``topic_ids`` (only the class of ``members`` subscribes, ``exact``), those whose
        owners are all members of the class (a C-level pass over each topic's owners): their
        owners stand for the holders of the class's cleaned assignments (an index out of range
        shows in the class's count, :meth:`~assignors.racks_uniform._ClassSettle.run`)."""
        ids = set(map(self.member_ids.__getitem__, members))
        owners_of = self.partition_owners
        return frozenset(t for t in topic_ids if ids.issuperset((owners_of.get(t) or {}).values()))

    # ------------------------------------------------------------------ step 3: realise

    def _set_targets(self, members: list[int], class_total: int) -> None:
        """Spread ``class_total`` over ``members``: quota q, and q+1 for ``class_total % n`` of
        them, preferring members that already hold more than q (they then lose nothing), in
        member order. (C-level passes: a join to a big group costs no Python step per member.)"""
        quota, extras = divmod(class_total, len(members))
        target, load = self.target, self.load
        whole = len(members) == len(target)  # the members are range(len(target)): one class
        if whole:
            target[:] = repeat(quota, len(target))
        else:
            for i in members:
                target[i] = quota
        if not extras:
            return
        loads = load if whole else list(map(load.__getitem__, members))
        above = list(islice(compress(members, map(quota.__lt__, loads)), extras))
        for i in above:
            target[i] = quota + 1
        extras -= len(above)
        if not extras:
            return
        targets = target if whole else list(map(target.__getitem__, members))
        for i in islice(compress(members, map(quota.__eq__, targets)), extras):
            target[i] = quota + 1

    def _release_topic(self, members: list[int], t: TopicId, count: int) -> list[int]:
        """Take ``count`` partitions of topic t away from the class: first from members above
        their target, then from any holder; highest indexes first."""
        load, target, current = self.load, self.target, self.current
        out: list[int] = []
        for only_over_target in (True, False):
            for i in members:
                if not count:
                    return out
                partitions = current[i].get(t)
                if not partitions:
                    continue
                take = min(len(partitions), count)
                if only_over_target:
                    take = min(take, load[i] - target[i])
                    if take <= 0:
                        continue
                ordered = sorted(partitions)
                keep = len(ordered) - take
                out.extend(ordered[keep:])
                assignment = self._own(i)
                if keep:
                    assignment[t] = frozenset(ordered[:keep])
                else:
                    del assignment[t]
                load[i] -= take
                count -= take
        if count:
            raise PartitionAssignorError(f"internal error: could not release topic {t!r}")
        return out

    def _settle_class(
        self,
        members: list[int],
        incoming: list[tuple[TopicId, Sequence[int]]],
        topic_ids: Sequence[TopicId],
        owned: Sequence[TopicId] = (),
    ) -> None:
        """Members above target give up their highest partitions; members below target take
        contiguous runs of the class pool (incoming partitions plus what was given up). When
        racks are relevant to the class, :func:`assignors.racks_uniform.settle_class` places them
        instead (same targets); ``owned``: the topics whose spec owners may stand for the holders
        of the class's partitions (:meth:`_owned_by`, when racks are relevant)."""
        load, target, current = self.load, self.target, self.current
        if self.rack_of is not None:
            holders = None
            one = len(self.class_members) == 1
            racks = self.racks if one else None
            if self.from_owners:  # the spec's owners are the exact inverse of `current`
                holders = Holders(self.partition_owners, self.member_ids)
            elif owned:
                rack_of = self.rack_of
                racks = relevant_racks(map(rack_of.__getitem__, members), topic_ids, self.topics)
                if racks and len(owned) == len(topic_ids):
                    # Every topic of the class is its own: its owners are checked to be members
                    # of the class as they are counted (no pass of their own).
                    holders = Holders(
                        self.partition_owners, self.member_ids, frozenset(owned), False
                    )
                else:
                    mine = self._owned_by(owned, members) if racks else None
                    if mine:
                        holders = Holders(self.partition_owners, self.member_ids, mine)
            placed = settle_class(
                members,
                self.rack_of,
                target,
                load,
                current,
                incoming,
                topic_ids,
                self.topics,
                holders,
                racks=racks,
                counted=self.counted,
                nodes_by_racks=self.nodes_by_racks,
            )
            if placed is not None:
                for i, placed_i in placed.items():
                    current[i] = placed_i
                    self.owned[i] = True
                if len(members) == len(load):  # one class: members are range(len(load))
                    load[:] = target
                else:
                    for i in members:
                        load[i] = target[i]
                return
        given_up: dict[TopicId, list[int]] = {}
        if len(members) == len(target):  # one class: members are range(len(target))
            loads, targets = load, target
        else:
            loads = list(map(load.__getitem__, members))
            targets = list(map(target.__getitem__, members))
        below = list(compress(members, map(lt, loads, targets)))
        for i in compress(members, map(lt, targets, loads)):
            keep = target[i]
            assignment = current[i]
            trimmed: dict[TopicId, frozenset[int]] = {}
            for t in sorted(assignment):
                partitions = assignment[t]
                if keep >= len(partitions):
                    trimmed[t] = partitions
                    keep -= len(partitions)
                    continue
                ordered = sorted(partitions)
                if keep:
                    trimmed[t] = frozenset(ordered[:keep])
                given_up.setdefault(t, []).extend(ordered[keep:])
                keep = 0
            current[i] = trimmed
            self.owned[i] = True
            load[i] = target[i]

        if given_up:
            merged = dict(incoming)
            for t, extra in given_up.items():
                merged[t] = sorted([*merged.get(t, ()), *extra])
            pool = [(t, merged[t]) for t in sorted(merged)]
        else:
            pool = incoming
        pool = [(t, seq) for t, seq in pool if len(seq)]

        at, start = 0, 0
        for i in below:
            need = target[i] - load[i]
            assignment = self._own(i)
            while need:
                if at >= len(pool):
                    raise PartitionAssignorError("internal error: partition pool exhausted")
                t, seq = pool[at]
                take = min(need, len(seq) - start)
                run = frozenset(seq[start : start + take])
                before = assignment.get(t)
                assignment[t] = before | run if before else run
                need -= take
                start += take
                if start == len(seq):
                    at, start = at + 1, 0
            load[i] = target[i]
        if at != len(pool):
            raise PartitionAssignorError("internal error: partitions left in the pool")
