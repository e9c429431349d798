"""Rack-aware placement of one class of ``uniform`` (:func:`settle_class`): the plan of
:mod:`assignors.racks` on the types of the class's partitions, then realised member by member —
see the theory of operation there."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from itertools import chain, compress, repeat, tee
from operator import getitem
from typing import Any, NamedTuple

from assignors.api import (
    MemberAssignment,
    MemberSubscription,
    PartitionAssignorError,
    TargetSummary,
    TopicId,
    TopicMetadata,
)
from assignors.native import kernels as _placement  # the C kernels, or None
from assignors.plan import Order, greedy_order, transport
from assignors.racks import Counted, RackNodes, count_owned_by_node, mask_groups, relevant_racks
from assignors.racks_members import Dense, Sparse

__all__ = ["Holders", "settle_class", "settle_from_summary"]

_NOBODY: Mapping[int, object] = {}

Assignment = dict[TopicId, frozenset[int]]

_HELD_KINDS: dict[tuple[str, ...], dict[tuple[frozenset[str], str | None], tuple[int, int]]] = {}
"""Per tuple of relevant racks: (a partition's racks, its holder's rack) -> (mask, node), the
kind a ``TargetSummary.held_by_racks`` key counts for — a function of the racks alone, kept
across calls (at most ``_HELD_KINDS_KEPT`` tuples, and keys per tuple: then started afresh)."""
_HELD_KINDS_KEPT = 1024

_TOO_LITTLE = "internal error: a node received too little"
_TOO_MUCH = "internal error: a node received too much"


def settle_class(
    members: Sequence[int],
    rack_of: Sequence[str | None],
    target: list[int],
    load: Sequence[int],
    current: Sequence[Mapping[TopicId, frozenset[int]]],
    incoming: Sequence[tuple[TopicId, Sequence[int]]],
    topic_ids: Sequence[TopicId],
    topics: Mapping[TopicId, TopicMetadata],
    owners: Holders | None = None,
    held: Mapping[tuple[frozenset[str], str | None], int] | None = None,
    racks: Sequence[str] | None = None,
    counted: Counted | None = None,
    nodes_by_racks: dict[tuple[str, ...], list[int]] | None = None,
) -> dict[int, Assignment] | None:
    """One class of ``uniform`` (members by index, in member order; lists are indexed by
    member index): the class's partitions (what its members hold, ``current`` of sizes
    ``load``, and ``incoming``) are spread over its members as the
    targets say — ``q`` each and ``q + 1`` for ``r`` of them, with ``q, r`` the quotient and
    remainder of the targets' sum — and placed by racks (module doc). Which members get the
    ``r`` extra partitions is part of the plan (more local partitions for a rack with more
    local replicas), so ``target`` is rewritten; within a node the extras go first to members
    holding more than ``q``, in member order, as the rack-blind targets do. ``owners``: who
    holds each partition, when the caller has it (else it is built from ``current``);
    ``held``: the members' partitions counted by (their racks, their member's rack), when the
    caller has them (``TargetSummary.held_by_racks``: then no held partition is visited);
    ``racks``: the :func:`relevant_racks`, when the caller has them; ``counted``: the nodes
    and the held partitions, when the caller counted them (:func:`count_owned`; its nodes are
    those of the relevant racks, and ``owners`` is what it counted); ``nodes_by_racks``: the
    members' nodes (by index) per tuple of relevant racks, kept by the caller for its other
    classes. Returns the new assignment of each member whose assignment changes, or None
    (``target`` untouched) when no rack is relevant."""
    if counted is not None:
        nodes = counted.nodes
    else:
        if racks is None:
            whole = len(members) == len(rack_of)
            racks = relevant_racks(
                rack_of if whole else map(rack_of.__getitem__, members), topic_ids, topics
            )
        if not racks:
            return None
        nodes = RackNodes(racks)
    if counted is not None:
        node_of = counted.node_of
    elif nodes_by_racks is None:
        node_of = nodes.nodes_of(rack_of)
    else:  # shared by the caller's classes with the same relevant racks (read only)
        node_of = nodes_by_racks.get(nodes.racks)  # type: ignore[assignment]
        if node_of is None:
            node_of = nodes_by_racks[nodes.racks] = nodes.nodes_of(rack_of)
    roster = Dense(members, node_of, target, load, current, nodes.count)
    settle = _ClassSettle(roster, topics, nodes, counted)
    return settle.run(incoming, topic_ids, owners, held)


def settle_from_summary(
    specs: Mapping[str, MemberSubscription],
    summary: TargetSummary,
    total: int,
    incoming: Sequence[tuple[TopicId, Sequence[int]]],
    topic_ids: Sequence[TopicId],
    topics: Mapping[TopicId, TopicMetadata],
    owners: Mapping[TopicId, Mapping[int, str]],
    racks: Sequence[str],
) -> dict[str, MemberAssignment] | None:
    """:func:`settle_class` for a homogeneous group from its target summary (``total``
    partitions; the held partitions counted by racks, the members in buckets by rack and load:
    ``held_by_racks``, ``members_by_rack``, both given), member id -> new assignment for the
    members whose assignment changes: only those, and the members whose buckets the plan
    splits, are looked at (:class:`~assignors.racks_members.Sparse`). None when the buckets do
    not hold as many members as ``specs``."""
    assert summary.held_by_racks is not None and summary.members_by_rack is not None
    nodes = RackNodes(racks)
    roster = Sparse(nodes, specs, summary.member_loads, summary.members_by_rack, total)
    if sum(roster.sizes) != len(specs):
        return None  # the buckets do not describe these members
    settle = _ClassSettle(roster, topics, nodes, None)
    out: dict[str, Any] = settle.run(
        incoming, topic_ids, Holders(owners, None), summary.held_by_racks
    )
    return out  # member ids -> plain dicts


class _Table(NamedTuple):
    """What the plan needs of its kinds (mask, holder node) beyond their counts: a function of
    the number of nodes, LOCAL and the kinds alone, so kept across calls (:func:`_table`; the
    plan only reads it)."""

    kinds: list[tuple[int, int]]
    """The kinds, in order."""
    weights: list[list[int]]
    """Per kind: LOCAL at each node of a relevant rack in its mask, plus one at the node holding
    it (stickiness; none for the pool of free partitions, node ``count``); nothing at the last
    node (elsewhere)."""
    order: Order
    """The greedy start's order on the weights (:func:`~assignors.plan.greedy_order`)."""
    held: list[int]
    """The kinds held by some node (not the pool), by index."""
    at: list[int]
    """Their holders' nodes."""


_TABLES: dict[tuple[int, int, tuple[tuple[int, int], ...]], _Table] = {}
"""(number of nodes, LOCAL, the kinds as counted) -> :class:`_Table`, kept across calls (at
most ``_HELD_KINDS_KEPT``: then started afresh)."""


def _table(key: tuple[int, int, tuple[tuple[int, int], ...]]) -> _Table:
    """The :class:`_Table` of ``key``: (number of nodes, LOCAL, the kinds as counted, in any
    order); kept in ``_TABLES`` (where callers look first)."""
    count, big, counted = key
    kinds = sorted(counted)
    racked = range(count - 1)  # the nodes of relevant racks (the last is elsewhere)
    local: dict[int, list[int]] = {}  # mask -> LOCAL gain per node
    weights = []
    for m, h in kinds:
        row = local.get(m)
        if row is None:
            row = local[m] = [big if m >> v & 1 else 0 for v in racked]
            row.append(0)
        row = row.copy()
        if h < count:  # not the pool of free partitions
            row[h] += 1
        weights.append(row)
    held = [k for k, (_m, h) in enumerate(kinds) if h < count]
    if len(_TABLES) >= _HELD_KINDS_KEPT:
        _TABLES.clear()
    found = _TABLES[key] = _Table(
        kinds, weights, greedy_order(weights), held, [kinds[k][1] for k in held]
    )
    return found


class Holders:
    """Who holds the partitions, as the coordinator gives it (``GroupSpec.partition_owners``:
    topic -> partition -> member id), and the member ids by index: holders are looked up with
    C-level passes, never per member."""

    __slots__ = ("checked", "ids", "only", "owners")

    def __init__(
        self,
        owners: Mapping[TopicId, Mapping[int, str]],
        ids: Sequence[str] | None,
        only: Collection[TopicId] | None = None,
        checked: bool = True,
    ) -> None:
        """``ids``: the member ids by index (None: members are named by their ids); ``only``:
        the topics whose owners are the class's holders (None: every topic) — the others' are
        read from the members' assignments; ``checked``: False when ``only`` is every topic of
        the class and its owners are yet to be checked to be members of the class (they are as
        they are counted; if they are not, every holder is read from the members'
        assignments)."""
        self.owners, self.ids, self.only, self.checked = owners, ids, only, checked


Segments = dict[TopicId, list[int]]
"""Partitions by topic (each list ascending once sorted)."""
Moving = dict[TopicId, Sequence[int]]
"""Partitions by topic that leave a node: a tuple is ascending (the free partitions of a
mask), a list is sorted when dealt."""


class _ClassSettle:
    """One rack-aware settlement of a class (see :func:`settle_class`) over its ``roster``
    (:mod:`assignors.racks_members`: its members, their loads, targets and nodes). Work per
    partition is C-level (lookups through ``map``, slices, sorts); Python loops run per type
    and per topic, per member only for the members whose target differs from their load, and
    per partition only for what members above their count give up."""

    def __init__(
        self,
        roster: Dense | Sparse,
        topics: Mapping[TopicId, TopicMetadata],
        nodes: RackNodes,
        counted: Counted | None,
    ) -> None:
        self.roster = roster
        # Indexed by member (an index, or an id with Sparse): lists or mappings.
        self.target: Any = roster.target
        self.current: Any = roster.current
        self.node_of: Any = roster.node_of
        self.topics, self.nodes, self.counted = topics, nodes, counted
        self.pool = nodes.count  # the "holder node" of free partitions
        self.by_mask: dict[TopicId, dict[int, tuple[int, ...]]] = {}
        self.flow: list[list[int]] = []  # the plan: per kind, what each node takes
        self.kinds: Sequence[tuple[int, int]] = ()
        self.kind_at: dict[tuple[int, int], int] = {}  # kind -> its row (made when needed)

    def masks(self, t: TopicId) -> dict[int, tuple[int, ...]]:
        """mask -> the partitions of topic t with that mask, ascending (kept with the topic's
        metadata, per tuple of relevant racks: the same on every call)."""
        out = self.by_mask.get(t)
        if out is None:
            out = self.by_mask[t] = mask_groups(self.nodes, self.topics[t])
        return out

    def mask(self, t: TopicId, p: int) -> int:
        metadata = self.topics[t]
        return self.nodes.mask_of(metadata).get(metadata.partition_racks.get(p, frozenset()), 0)

    # ------------------------------------------------------------------ the whole run

    def run(
        self,
        incoming: Sequence[tuple[TopicId, Sequence[int]]],
        topic_ids: Sequence[TopicId],
        owners: Holders | None,
        held: Mapping[tuple[frozenset[str], str | None], int] | None,
    ) -> dict[Any, Assignment]:
        """Member (index, or id with Sparse) -> its new assignment, for the members whose
        assignment changes."""
        nodes, roster = self.nodes, self.roster
        some = owners is not None and owners.only is not None
        use = owners
        if some and self.counted is None and owners.only.issuperset(topic_ids):  # type: ignore[union-attr]
            self.counted = self._count_owners(topic_ids, owners)  # type: ignore[arg-type]
            if self.counted is None and not owners.checked:  # type: ignore[union-attr]
                # Some owner may be no member of the class: the members' assignments instead.
                some, use = False, None
        # The holders: for the count when nobody counted the held partitions, else only when a
        # node gives partitions up (made then).
        counting = self.counted is None and held is None
        holder = self._holders(topic_ids, use) if counting else None
        counts, free = self._count(incoming, holder, held)
        if some and sum(counts.values()) != roster.total:
            # An owner that is no member of the class, or an index out of range (not every
            # held partition was found): the holders from the members' assignments instead.
            self.counted = None
            use = None
            holder = self._holders(topic_ids, None)
            counts, free = self._count(incoming, holder, held)
        key = (nodes.count, sum(counts.values()) + 1, tuple(counts))
        table = _TABLES.get(key) or _table(key)
        kinds = table.kinds
        quota, extras = divmod(roster.total, sum(roster.sizes))
        size = roster.sizes
        supplies = list(map(counts.__getitem__, kinds))
        shares = list(map(quota.__mul__, size))
        taken: list[int] = []  # the extras each node takes
        flow = transport(
            supplies,
            shares,
            table.weights,
            extras=extras,
            extra_room=size,
            order=table.order,
            taken=taken,
        )
        roster.set_targets(quota, taken)
        self.flow, self.kinds = flow, kinds  # for _swap

        out: dict[Any, Assignment] = {}
        load: Any = roster.load
        moving: dict[tuple[int, int], Moving] = {}  # (mask, from node) -> partitions
        receiving: list[Segments] = list(map(dict, repeat((), len(size))))  # per node
        excess: dict[int, dict[int, int]] = {}  # node -> mask -> what the plan takes from it
        pool = self.pool
        kept = sum(map(getitem, map(flow.__getitem__, table.held), table.at))
        if kept != sum(map(supplies.__getitem__, table.held)):  # some node gives some up
            for k, h in zip(table.held, table.at, strict=True):
                placed = flow[k]
                if supplies[k] > placed[h]:
                    excess.setdefault(h, {})[kinds[k][0]] = supplies[k] - placed[h]
        if excess and holder is None:
            holder = self._holders(topic_ids, use)
        for v in sorted(excess):
            self._give_up(v, excess[v], load, out, moving, holder)  # type: ignore[arg-type]
        # Members still above their count give up their highest partitions; they stay in their
        # node (the plan keeps them there). Their working loads stay above their targets (the
        # members below them are all that is looked at from here on).
        node_of = self.node_of
        above: list[Any] = roster.above()
        if above:
            for i, need, assignment in zip(
                above, roster.needs(above), roster.assignments(above), strict=True
            ):
                mine = out.get(i)
                if mine is None:
                    mine = out[i] = dict(assignment)
                _trim(mine, -need, receiving[node_of[i]])
        for (m, t), seq in free.items():
            moving.setdefault((m, pool), {})[t] = seq
        for m, h in sorted(moving):  # in the order of the kinds
            row = flow[kinds.index((m, h))]
            wanted = list(compress(enumerate(row), row))  # the nodes taking some
            if h < pool:  # what a node gives up: not to itself
                wanted = [(v, n) for v, n in wanted if v != h]
            _deal(moving[(m, h)], wanted, receiving)
        by_node: list[list[Any]] = roster.below_by_node()
        for v, below in enumerate(by_node):
            if below:
                self._fill(below, receiving[v], out)
        return out

    # ------------------------------------------------------------------ counting

    def _holders(self, topic_ids: Sequence[TopicId], owners: Holders | None) -> _Lookup:
        """partition -> index of the class member holding it (None: no member of the class),
        per topic."""
        node_of, counted = self.node_of, self.counted
        if owners is not None and owners.only is not None:
            return self._some_holders(topic_ids, owners)
        if owners is not None:
            ids = owners.ids
            return _Lookup(
                topic_ids,
                owners.owners,
                ids,
                (lambda: dict(counted.by_member))
                if counted is not None
                else lambda: dict(zip(ids or (), node_of, strict=True)),
                self.nodes.count,
            )
        members = self.roster.members  # type: ignore[union-attr]  # Sparse has the owners
        held: dict[TopicId, dict[int, int]] = {t: {} for t in topic_ids}
        for i in members:
            for t, partitions in self.current[i].items():
                held[t].update(dict.fromkeys(partitions, i))
        return _Lookup(
            topic_ids, held, None, lambda: {i: node_of[i] for i in members}, self.nodes.count
        )

    def _some_holders(self, topic_ids: Sequence[TopicId], owners: Holders) -> _Lookup:
        """:meth:`_holders` when the owners stand for the holders of some topics only
        (``owners.only``): the other topics' holders from the members' assignments."""
        ids, only = owners.ids, owners.only
        assert ids is not None and only is not None
        members, node_of = self.roster.members, self.node_of  # type: ignore[union-attr]
        by_topic: dict[TopicId, Mapping[int, str]] = {
            t: owned for t in only if (owned := owners.owners.get(t))
        }
        rest: dict[TopicId, dict[int, str]] = {t: {} for t in topic_ids if t not in only}
        if rest:
            for i in members:
                for t, partitions in self.current[i].items():
                    if t in rest:
                        rest[t].update(dict.fromkeys(partitions, ids[i]))
            by_topic.update(rest)
        return _Lookup(
            topic_ids,
            by_topic,
            ids,
            lambda: {ids[i]: node_of[i] for i in members},
            self.nodes.count,
        )

    def _count_owners(self, topic_ids: Sequence[TopicId], owners: Holders) -> Counted | None:
        """The class's held partitions counted from the owners (every topic of the class in
        ``owners.only``), as :func:`~assignors.racks.count_owned` does for a whole group."""
        ids, members = owners.ids, self.roster.members  # type: ignore[union-attr]
        assert ids is not None
        return count_owned_by_node(
            self.nodes,
            list(map(ids.__getitem__, members)),
            list(map(self.node_of.__getitem__, members)),
            owners.owners,
            topic_ids,
            self.topics,
        )

    def _count(
        self,
        incoming: Sequence[tuple[TopicId, Sequence[int]]],
        holder: _Lookup | None,
        held: Mapping[tuple[frozenset[str], str | None], int] | None,
    ) -> tuple[dict[tuple[int, int], int], dict[tuple[int, TopicId], Sequence[int]]]:
        """(mask, holder node or pool) -> partitions of the class; and the free (incoming)
        partitions by (mask, topic), ascending. ``holder``: given when the held partitions are
        neither ``counted`` nor ``held``."""
        nodes = self.nodes
        topics = holder.topics() if holder is not None else ()
        counts: dict[tuple[int, int], int] = {}
        if self.counted is not None:  # counted by the caller, by (mask, node)
            counts.update(self.counted.counts)
        elif held is not None:  # counted by the caller, by racks
            kinds = _HELD_KINDS.get(nodes.racks)
            if kinds is None:
                if len(_HELD_KINDS) >= _HELD_KINDS_KEPT:
                    _HELD_KINDS.clear()
                kinds = _HELD_KINDS[nodes.racks] = {}
            found = list(map(kinds.get, held))
            if None not in found:  # every key known
                counts.update(zip(found, held.values(), strict=True))  # type: ignore[arg-type]
            if len(counts) != len(held):  # some key unknown, or two keys of one kind
                counts.clear()
                for key, k in held.items():
                    kind = kinds.get(key)
                    if kind is None:
                        if len(kinds) >= _HELD_KINDS_KEPT:
                            kinds.clear()
                        kind = kinds[key] = (nodes.mask(key[0]), nodes.node(key[1]))
                    counts[kind] = counts.get(kind, 0) + k
        elif sum(self.topics[t].num_partitions for t in topics) < 16 * len(topics):
            # Small topics: the members' holdings are few; look each held partition up.
            self._count_by_member(counts)
        else:
            # Per mask, the holders of its partitions of every topic in one C-level pass (one
            # byte per partition: its holder's node), counted per node.
            assert holder is not None
            by_mask: dict[int, list[Iterable[int]]] = {}
            for t in topics:
                if holder.holds(t):
                    for m, group in self.masks(t).items():
                        by_mask.setdefault(m, []).append(holder.holders(t, group))
            for m, parts in by_mask.items():
                codes = holder.node_codes(chain.from_iterable(parts))
                for v in range(nodes.count):
                    k = codes.count(v)
                    if k:
                        counts[(m, v)] = counts.get((m, v), 0) + k
        free: dict[tuple[int, TopicId], Sequence[int]] = {}
        for t, seq in incoming:
            metadata = self.topics[t]
            if len(seq) == metadata.num_partitions:  # the whole topic is free
                for m, group in self.masks(t).items():
                    free[(m, t)] = group  # ascending
                continue
            coded = nodes.mask_bytes(metadata)
            if coded is not None:  # each partition's mask kept in a byte: looked up
                mask_of: Sequence[int] = list(map(coded.__getitem__, seq))
            elif len(seq) * 64 < metadata.num_partitions:  # a few: each looked up
                by_racks = nodes.mask_of(metadata)
                racks_of = metadata.partition_racks
                mask_of = list(map(by_racks.get, map(racks_of.get, seq), repeat(0)))
            else:
                mask_of = nodes.masks_by_partition(metadata)
                mask_of = list(map(mask_of.__getitem__, seq))
            distinct = set(mask_of)
            if len(distinct) == 1:  # one mask: all of them, as they are (ascending)
                free[(mask_of[0], t)] = seq
                continue
            if len(distinct) <= 8:  # per mask, its partitions in one C-level pass (in order)
                for m in distinct:
                    free[(m, t)] = list(compress(seq, map(m.__eq__, mask_of)))
                continue
            some: dict[int, list[int]] = {}
            for p, m in zip(seq, mask_of, strict=True):
                some.setdefault(m, []).append(p)
            free.update(((m, t), ps) for m, ps in some.items())
        for (m, _t), seq in free.items():
            counts[(m, self.pool)] = counts.get((m, self.pool), 0) + len(seq)
        return counts, free

    def _count_by_member(self, counts: dict[tuple[int, int], int]) -> None:
        """(mask, node) -> partitions held, member by member (for groups of small topics)."""
        node_of, current, nodes = self.node_of, self.current, self.nodes
        masks: dict[TopicId, Sequence[int]] = {}
        for i in self.roster.members:  # type: ignore[union-attr]  # Sparse: counted by racks
            v = node_of[i]
            for t, partitions in current[i].items():
                mask_of = masks.get(t)
                if mask_of is None:
                    mask_of = masks[t] = nodes.masks_by_partition(self.topics[t])
                for m in map(mask_of.__getitem__, partitions):
                    counts[(m, v)] = counts.get((m, v), 0) + 1

    # ------------------------------------------------------------------ realising

    def _own(self, i: Any, out: dict[Any, Assignment]) -> Assignment:
        mine = out.get(i)
        if mine is None:
            mine = out[i] = dict(self.current[i])
        return mine

    def _drop(self, i: Any, t: TopicId, gone: Collection[int], out: dict[Any, Assignment]) -> None:
        mine = self._own(i, out)
        left = mine[t].difference(gone)
        if left:
            mine[t] = left
        else:
            del mine[t]

    def _give_up(
        self,
        node: int,
        excess: dict[int, int],
        load: Any,
        out: dict[Any, Assignment],
        moving: dict[tuple[int, int], Moving],
        holder: _Lookup,
    ) -> None:
        """Take ``excess[mask]`` partitions of each mask away from the node: first from its
        members above their count (their highest partitions), then, from those, partitions of
        masks the plan keeps in the node instead where the swap is alike to every node it
        touches (:meth:`_swap`), then from any of its members (highest partitions of the mask
        first)."""

        def release(i: Any, t: TopicId, m: int, gone: list[int]) -> None:
            parts = moving.setdefault((m, node), {})
            parts[t] = [*parts.get(t, ()), *gone]  # a list: sorted when dealt
            self._drop(i, t, gone, out)
            load[i] -= len(gone)
            excess[m] -= len(gone)
            if not excess[m]:
                del excess[m]

        above = self.roster.above(node)

        def surplus(take: Callable[[int, int], bool]) -> bool:
            """The members above their count give up their highest partitions whose mask
            ``take(mask, how many of it this topic gives already)`` accepts, up to their count;
            True when the node has given up all it must."""
            for i in above:
                budget = load[i] - self.target[i]
                assignment = out.get(i, self.current[i])
                for t in sorted(assignment, reverse=True):
                    by: dict[int, list[int]] = {}
                    for p in sorted(assignment[t], reverse=True):
                        m = self.mask(t, p)
                        if budget > 0 and take(m, len(by.get(m, ()))):
                            by.setdefault(m, []).append(p)
                            budget -= 1
                    for m, gone in by.items():
                        release(i, t, m, gone)
                    if not excess or budget <= 0:
                        break
                if not excess:
                    return True
            return False

        if surplus(lambda m, n: excess.get(m, 0) > n):
            return
        # What those members give up beyond it would go to the node's members below their count,
        # which the last step below takes from others of its members: where it is alike, it goes
        # out of the node instead, in place of as many of those others' (each such swap saves
        # two moves; balance and locality are the plan's).
        planned = set(excess)  # the masks the plan takes (those swapped in are not swapped out)
        if surplus(lambda m, _n: m not in planned and self._swap(node, m, excess, planned)):
            return
        # The node's members, to pick its holders out of each topic's partitions in C-level
        # passes (a node of a few members may have to look far to find theirs).
        in_node = self.roster.node_members(node).__contains__
        for m in sorted(excess):
            for t in sorted(holder.topics(), reverse=True):
                group = self.masks(t).get(m, ())
                if not group:
                    continue
                taken: dict[Any, list[int]] = {}  # holder -> what it gives up
                need = excess[m]
                held, tested = tee(holder.members(t, reversed(group)))
                for p, j in compress(zip(reversed(group), held, strict=True), map(in_node, tested)):
                    if p in out.get(j, self.current[j]).get(t, ()):  # not given up already
                        taken.setdefault(j, []).append(p)
                        need -= 1
                        if not need:
                            break
                for j, gone in taken.items():
                    release(j, t, m, gone)
                if m not in excess:
                    break
        if excess:
            raise PartitionAssignorError(
                "internal error: a node could not give up what the plan says"
            )

    def _swap(self, node: int, m: int, excess: dict[int, int], planned: set[int]) -> bool:
        """Change the plan so that the node gives up one more partition of mask ``m`` (which
        it keeps) and one less of a mask it gives up, when some node receiving that mask has a
        replica in its rack exactly when it has one of ``m`` (the LOCAL gain it receives is the
        same) and so does the node itself (the same for what it keeps); ``excess`` follows.
        Both kinds are held in the node, so stickiness weighs them alike: the plan stays
        optimal. Only the ``planned`` masks of ``excess`` are swapped out. False when none is
        alike."""
        flow, at, racked = self.flow, self.kind_at, (1 << self.nodes.elsewhere) - 1
        if not at:
            at.update(zip(self.kinds, range(len(self.kinds)), strict=True))
        for gone in sorted(planned.intersection(excess)):
            diff = (gone ^ m) & racked  # the nodes of racks where the two masks differ
            if diff >> node & 1:
                continue
            row = flow[at[(gone, node)]]
            for u, n in enumerate(row):
                if n and u != node and not diff >> u & 1:
                    row[u] -= 1
                    row[node] += 1
                    kept = flow[at[(m, node)]]
                    kept[node] -= 1
                    kept[u] += 1
                    excess[gone] -= 1
                    if not excess[gone]:
                        del excess[gone]
                    excess[m] = excess.get(m, 0) + 1
                    return True
        return False

    def _fill(
        self,
        members: list[Any],
        segments: Segments,
        out: dict[Any, Assignment],
    ) -> None:
        """Members below their count (``members``, in member order) take contiguous runs of
        what the node received (topics in order, partitions ascending); their working loads
        are left as they were (this is the last step)."""
        if not segments:
            return
        pool = [(t, sorted(segments[t])) for t in sorted(segments) if segments[t]]
        if not pool:
            return
        roster = self.roster
        needs, held_now = roster.needs(members), roster.assignments(members)
        if _placement is not None:  # the loop below, in C (about 3 µs less for ten members)
            unfit = _placement.fill(list(members), needs, held_now, pool, out)
            if unfit:
                raise PartitionAssignorError(_TOO_LITTLE if unfit == 1 else _TOO_MUCH)
            return
        at, start = 0, 0
        t, seq = pool[0]
        end = len(seq)
        for i, need, held in zip(members, needs, held_now, strict=True):
            mine = out.get(i)
            if mine is None:
                mine = out[i] = dict(held) if held else {}
            if start + need < end:  # within the topic at hand (the usual case)
                run = frozenset(seq[start : start + need])
                before = mine.get(t)
                mine[t] = before | run if before else run
                start += need
                continue
            while need:
                if at == len(pool):
                    raise PartitionAssignorError(_TOO_LITTLE)
                take = min(need, end - start)
                run = frozenset(seq[start : start + take])
                before = mine.get(t)
                mine[t] = before | run if before else run
                need -= take
                start += take
                if start == end:
                    at, start = at + 1, 0
                    if at < len(pool):
                        t, seq = pool[at]
                        end = len(seq)
        if at != len(pool):
            raise PartitionAssignorError(_TOO_MUCH)


class _Lookup:
    """Holders of partitions per topic (C-level passes): ``members(t, partitions)`` maps each
    partition to the index of the class member holding it, ``nodes(t, partitions)`` to that
    member's node; None when no member of the class holds it."""

    __slots__ = ("_by_topic", "_ids", "_index", "_make_node", "_node", "_nodes", "_topics")

    def __init__(
        self,
        topic_ids: Sequence[TopicId],
        by_topic: Mapping[TopicId, Mapping[int, object]],
        ids: Sequence[str] | None,
        node: Callable[[], dict[Any, int]],
        nodes: int,
    ) -> None:
        """``by_topic``: partition -> member id (``ids``: the ids by index) or index;
        ``node``: builds the map of what ``by_topic`` names -> its node, of ``nodes`` (when
        first needed; None, nobody in the class, is added as ``nodes``)."""
        self._topics = sorted(topic_ids)
        self._by_topic, self._ids, self._nodes = by_topic, ids, nodes
        self._make_node = node
        self._node: dict[Any, int] | None = None
        self._index: dict[str, int] | None = None

    def holders(self, t: TopicId, partitions: Iterable[int]) -> Iterable[Any]:
        """Who holds each partition (as ``node_codes`` takes them); None: nobody."""
        return map(self._by_topic.get(t, _NOBODY).get, partitions)

    def node_codes(self, holders: Iterable[Any]) -> bytes | list[int]:
        """The node of each holder (the number of nodes: nobody in the class); one byte each
        when the nodes fit."""
        node = self._node
        if node is None:
            node = self._node = self._make_node()
            node[None] = self._nodes
        codes = map(node.__getitem__, holders)
        return bytes(codes) if self._nodes < 256 else list(codes)

    def topics(self) -> list[TopicId]:
        """The class's topics, in order."""
        return self._topics

    def holds(self, t: TopicId) -> bool:
        """Does anyone hold a partition of topic t?"""
        return bool(self._by_topic.get(t))

    def members(self, t: TopicId, partitions: Iterable[int]) -> Iterable[int | None]:
        found = map(self._by_topic.get(t, _NOBODY).get, partitions)
        if self._ids is None:
            return found  # type: ignore[return-value]
        if self._index is None:  # built once, when first needed (rarely)
            self._index = dict(zip(self._ids, range(len(self._ids)), strict=True))
        return map(self._index.get, found)  # type: ignore[arg-type]


def _trim(mine: Assignment, extra: int, into: Segments) -> None:
    """A member (its new assignment ``mine``) gives up its ``extra`` highest partitions (topics
    in order, then indexes) into ``into``: taken from its last topics, so only the topics it
    gives up from are sorted (the last topic alone when it has enough)."""
    t = max(mine)
    if extra > len(mine[t]):  # its last topics whole, while it has to give more
        for t in sorted(mine, reverse=True):
            partitions = mine[t]
            if extra <= len(partitions):
                break
            into.setdefault(t, []).extend(partitions)  # sorted when dealt
            del mine[t]
            extra -= len(partitions)
    partitions = mine[t]
    if extra == len(partitions):  # the whole topic
        into.setdefault(t, []).extend(partitions)
        del mine[t]
    elif extra == 1:
        p = max(partitions)
        into.setdefault(t, []).append(p)
        mine[t] = partitions.difference((p,))
    else:
        ordered = sorted(partitions)
        keep = len(ordered) - extra
        into.setdefault(t, []).extend(ordered[keep:])
        mine[t] = frozenset(ordered[:keep])


def _deal(
    segments: Moving, wanted: Sequence[tuple[int, int]], receiving: Sequence[Segments]
) -> None:
    """Hand ``segments`` (topics in order, partitions ascending) out in turn: ``n`` to node
    ``v`` for each ``(v, n)`` of ``wanted``; they must add up. (One node takes them as they
    are: what a node receives is sorted when its members take it.)"""
    if len(wanted) == 1:
        v, n = wanted[0]
        if sum(map(len, segments.values())) != n:
            raise PartitionAssignorError("internal error: the rack plan moves other than it has")
        into = receiving[v]
        for t, seq in segments.items():
            into.setdefault(t, []).extend(seq)
        return
    pieces = [
        (t, seq if type(seq) is tuple else sorted(seq))
        for t in sorted(segments)
        if (seq := segments[t])
    ]
    at, start = 0, 0
    for v, n in wanted:
        into = receiving[v]
        while n:
            if at >= len(pieces):
                raise PartitionAssignorError("internal error: the rack plan moves too much")
            t, seq = pieces[at]
            take = min(n, len(seq) - start)
            into.setdefault(t, []).extend(seq[start : start + take])
            n -= take
            start += take
            if start == len(seq):
                at, start = at + 1, 0
    if at != len(pieces):
        raise PartitionAssignorError("internal error: the rack plan left partitions behind")
