"""Rack-aware assignment, shared by ``uniform`` and ``range``: once balance has decided how many
partitions each member gets, decide *which*, so that as many as possible are read from a replica
in the member's own rack, then that as few as possible move.

Theory of operation
-------------------
Balance is decided first and rack-blind (each member's count; in ``uniform`` also each class's
share of every topic), so racks never make balance worse. Then, for one set of members that
share one pool of partitions (a class of ``uniform``, a co-partitioned group of topics of
``range``):

* **Nodes.** The *relevant* racks — racks that hold a replica of the pool and have a member —
  each make a node; every other member (no rack, or a rack without replicas) is in one more
  node, where nothing is ever local. With no relevant rack the caller's rack-blind result
  stands, unchanged.
* **Types.** ``uniform`` counts its partitions by *type*: the relevant racks they are local to
  (a bit mask over the nodes) and the node of the member holding it now (its current target),
  or none — a handful of types whatever the size of the group. ``range`` counts a partition
  index once per co-partitioned topic it is local in: its type is how many topics of the group
  have a replica in each node's rack.
* **Plan** (:func:`assignors.plan.transport`). A transportation problem between types and nodes: every node
  takes its members' counts (``uniform``: ``q`` each, and which nodes take the ``r`` extra
  partitions is part of the plan), every partition goes somewhere, and the plan maximises
  ``LOCAL·(local replicas) + (partitions kept by their node)`` with ``LOCAL`` larger than any
  number of partitions: locality first, stickiness second. Exact: a greedy start, then gainful
  cycles cancelled on the nodes until none is left (the optimality condition of min-cost flows),
  so the plan's locality is the best any assignment with these counts can reach — in
  particular never below the rack-blind result's.
* **Realise.** ``uniform``: a node keeps, of each type it holds, what the plan leaves it, giving
  up first what its members above their count must give up anyway; members above their count
  give up their highest partitions; what leaves a node, and the free partitions, go to the nodes
  the plan names (in partition order); members below their count take contiguous runs of what
  their node gets, in member order. ``range``: each node takes, of each type, first the indexes
  its own members held rack-blind, then the rest, and deals them in order to its members.
  Locality is decided by the plan (members of one node are interchangeable for it); stickiness
  within a node is greedy.

Why not as Kafka did: the client-side assignors of KIP-881 try a rack-matching pass and then a
rack-blind one, which is neither optimal nor cheap; the server-side rack-aware builders removed by
KAFKA-16694 worked per partition and per member and were too slow. Here the work per partition
is a few C-level lookups, and the optimisation runs on counts.

Everything is deterministic: nodes, types and members are visited in sorted order.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from functools import partial
from itertools import chain, compress, filterfalse, islice, repeat, tee
from operator import add, lt, mul
from typing import Any

from assignors.api import PartitionAssignorError, TopicId, TopicMetadata
from assignors.plan import transport

__all__ = [
    "RackNodes",
    "count_rack_local",
    "relevant_racks",
    "settle_class",
]

_NOBODY: Mapping[int, object] = {}
_BYTE = [bytes([b]) for b in range(256)]
_ONLY = [bytes(b == v for b in range(256)) for v in range(256)]  # translate: v -> 1, else 0


# ---------------------------------------------------------------------- what is local


def count_rack_local(
    rack_id: str | None,
    assignment: Mapping[TopicId, Collection[int]],
    topics: Mapping[TopicId, TopicMetadata],
) -> int:
    """How many of ``assignment``'s partitions have a replica in rack ``rack_id``."""
    if rack_id is None:
        return 0
    local = 0
    for t, partitions in assignment.items():
        metadata = topics.get(t)
        if metadata is not None and metadata.partition_racks:
            racks = metadata.partition_racks
            local += sum(1 for p in partitions if rack_id in racks.get(p, ()))
    return local


def relevant_racks(
    member_racks: Iterable[str | None],
    topic_ids: Iterable[TopicId],
    topics: Mapping[TopicId, TopicMetadata],
) -> list[str]:
    """The racks that some member is in and that hold a replica of some partition of the
    topics, sorted. (The topics are looked at first: without partition racks the members are
    not visited.)"""
    held: set[str] = set()
    for t in topic_ids:
        metadata = topics.get(t)
        if metadata is not None and metadata.partition_racks:
            held.update(*metadata.partitions_by_racks())
    if not held:
        return []
    return sorted(held.intersection(member_racks))


class RackNodes:
    """The nodes of one computation: one per relevant rack (in sorted order), then one for the
    members in no relevant rack. ``mask_of(topic)`` maps a partition's racks to the bit mask of
    the relevant racks among them (cached per topic)."""

    __slots__ = ("_masks", "_of_set", "_tables", "bit", "count", "elsewhere", "racks")

    def __init__(self, racks: Sequence[str]) -> None:
        self.racks = tuple(racks)
        self.bit = {r: 1 << j for j, r in enumerate(self.racks)}
        self.elsewhere = len(self.racks)
        self.count = len(self.racks) + 1
        self._masks: dict[TopicId, dict[frozenset[str] | None, int]] = {}
        self._of_set: dict[frozenset[str], int] = {}  # shared by topics with the same racks
        self._tables: dict[tuple[frozenset[str], ...], bytes] = {}

    def node(self, rack_id: str | None) -> int:
        return self.racks.index(rack_id) if rack_id in self.bit else self.elsewhere

    def mask(self, racks: frozenset[str]) -> int:
        """The bit mask of the relevant racks among ``racks``."""
        mask = self._of_set.get(racks)
        if mask is None:
            bit = self.bit
            mask = self._of_set[racks] = sum(bit[r] for r in racks if r in bit)
        return mask

    def mask_of(self, metadata: TopicMetadata) -> dict[frozenset[str] | None, int]:
        """racks -> mask, for every set of racks of the topic (missing: 0, local nowhere)."""
        masks = self._masks.get(metadata.topic_id)
        if masks is None:
            groups = metadata.partitions_by_racks()
            masks = self._masks[metadata.topic_id] = dict(
                zip(groups, map(self.mask, groups), strict=True)
            )
        return masks

    def masks_by_partition(self, metadata: TopicMetadata) -> Sequence[int]:
        """Each partition's mask, in partition order (a bytes object when it can be)."""
        coded = metadata.partition_rack_codes()
        if coded is not None and len(self.racks) <= 8:  # a mask fits in a byte
            codes, racks = coded
            table = self._tables.get(racks)
            if table is None:
                table = self._tables[racks] = bytes(map(self.mask, racks)).ljust(256, b"\0")
            return codes.translate(table)
        mask_of = self.mask_of(metadata)
        n = metadata.num_partitions
        return list(map(mask_of.get, map(metadata.partition_racks.get, range(n)), repeat(0)))

    def local(self, mask: int, node: int) -> bool:
        return node != self.elsewhere and bool(mask >> node & 1)


# ---------------------------------------------------------------------- uniform: one class

Assignment = dict[TopicId, frozenset[int]]


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
    ``racks``: the :func:`relevant_racks`, when the caller has them. Returns the new
    assignment of each member whose assignment changes, or None (``target`` untouched) when no
    rack is relevant."""
    if racks is None:
        racks = relevant_racks((rack_of[i] for i in members), topic_ids, topics)
    if not racks:
        return None
    settle = _ClassSettle(members, rack_of, target, load, current, topics, RackNodes(racks))
    return settle.run(incoming, topic_ids, owners, held)


class Holders:
    """Who holds the partitions, as the coordinator gives it (``GroupSpec.partition_owners``:
    topic -> partition -> member id), and the member ids by index: holders are looked up with
    C-level passes, never per member."""

    __slots__ = ("ids", "owners")

    def __init__(self, owners: Mapping[TopicId, Mapping[int, str]], ids: Sequence[str]) -> None:
        self.owners, self.ids = owners, ids


Segments = dict[TopicId, list[int]]
"""Partitions by topic (each list ascending once sorted)."""
Moving = dict[TopicId, Sequence[int]]
"""Partitions by topic that leave a node: a tuple is ascending (the free partitions of a
mask), a list is sorted when dealt."""


class _ClassSettle:
    """One rack-aware settlement of a class (see :func:`settle_class`). Work per partition is
    C-level (lookups through ``map``, slices, sorts); Python loops run per member, per type
    and per topic, and per partition only for what members above their count give up."""

    def __init__(
        self,
        members: Sequence[int],
        rack_of: Sequence[str | None],
        target: list[int],
        load: Sequence[int],
        current: Sequence[Mapping[TopicId, frozenset[int]]],
        topics: Mapping[TopicId, TopicMetadata],
        nodes: RackNodes,
    ) -> None:
        self.members, self.target, self.current = members, target, current  # target: rewritten
        self.topics, self.nodes = topics, nodes
        index = {r: j for j, r in enumerate(nodes.racks)}
        self.node_of: list[int] = list(map(index.get, rack_of, repeat(nodes.elsewhere)))  # type: ignore[arg-type]
        self.load = load
        self.pool = nodes.count  # the "holder node" of free partitions
        self.whole = len(members) == len(target)  # the class is every member: range(n)
        self.by_mask: dict[TopicId, dict[int, tuple[int, ...]]] = {}

    def masks(self, t: TopicId) -> dict[int, tuple[int, ...]]:
        """mask -> the partitions of topic t with that mask, ascending."""
        out = self.by_mask.get(t)
        if out is None:
            metadata = self.topics[t]
            mask_of = self.nodes.mask_of(metadata)
            merged: dict[int, list[tuple[int, ...]]] = {}
            for racks, group in metadata.partitions_by_racks().items():
                merged.setdefault(mask_of[racks], []).append(group)
            out = self.by_mask[t] = {
                m: groups[0] if len(groups) == 1 else tuple(sorted(chain.from_iterable(groups)))
                for m, groups in sorted(merged.items())
            }
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
    ) -> dict[int, Assignment]:
        nodes = self.nodes
        holder = self._holders(topic_ids, owners)
        counts, free = self._count(incoming, holder, held)
        kinds = sorted(counts)
        by_node = _NodeMembers(
            self.members,
            self.node_of if self.whole else list(map(self.node_of.__getitem__, self.members)),
            nodes.count,
        )
        quota, extras = divmod(sum(map(self.target.__getitem__, self.members)), len(self.members))
        size = by_node.sizes
        big = sum(counts.values()) + 1
        weights = [
            [big * nodes.local(m, v) + (v == h) for v in range(nodes.count)] for m, h in kinds
        ]
        flow = transport(
            [counts[k] for k in kinds],
            [quota * n for n in size],
            weights,
            extras=extras,
            extra_room=size,
        )
        plan = {k: flow[j] for j, k in enumerate(kinds)}
        if self.whole:  # one C-level store for every member's quota
            self.target[:] = repeat(quota, len(self.target))
        for v in range(nodes.count):
            extra = sum(f[v] for f in flow) - quota * size[v]
            self._set_targets(partial(by_node.scan, v), quota, extra, stored=self.whole)

        out: dict[int, Assignment] = {}
        load = list(self.load)
        moving: dict[tuple[int, int], Moving] = {}  # (mask, from node) -> partitions
        receiving: dict[int, Segments] = {v: {} for v in range(nodes.count)}
        for v in range(nodes.count):
            excess = {
                m: counts[(m, h)] - plan[(m, h)][v]
                for m, h in kinds
                if h == v and counts[(m, h)] > plan[(m, h)][v]
            }
            if excess:
                self._give_up(v, by_node.members(v), excess, load, out, moving, holder)
        # Members still above their count give up their highest partitions; they stay in their
        # node (the plan keeps them there).
        node_of, target = self.node_of, self.target
        for i in self._above(self.members, load):
            self._trim(i, load[i] - target[i], out, receiving[node_of[i]])
            load[i] = target[i]
        for (m, t), seq in free.items():
            moving.setdefault((m, self.pool), {})[t] = seq
        for m, h in kinds:
            segments = moving.get((m, h))
            if not segments:
                continue
            wanted = [(v, n) for v, n in enumerate(plan[(m, h)]) if v != h and n]
            _deal(segments, wanted, receiving)
        below: dict[int, list[int]] = {v: [] for v in range(nodes.count)}
        for i in self._below(self.members, load):
            below[node_of[i]].append(i)
        for v in range(nodes.count):
            self._fill(below[v], receiving[v], load, out)
        return out

    # ------------------------------------------------------------------ counting

    def _holders(self, topic_ids: Sequence[TopicId], owners: Holders | None) -> _Lookup:
        """partition -> index of the class member holding it (None: no member of the class),
        per topic."""
        node_of = self.node_of
        if owners is not None:
            ids = owners.ids
            return _Lookup(
                topic_ids,
                owners.owners,
                ids,
                lambda: dict(zip(ids, node_of, strict=True)),
                self.nodes.count,
            )
        held: dict[TopicId, dict[int, int]] = {t: {} for t in topic_ids}
        for i in self.members:
            for t, partitions in self.current[i].items():
                held[t].update(dict.fromkeys(partitions, i))
        members = self.members
        return _Lookup(
            topic_ids, held, None, lambda: {i: node_of[i] for i in members}, self.nodes.count
        )

    def _count(
        self,
        incoming: Sequence[tuple[TopicId, Sequence[int]]],
        holder: _Lookup,
        held: Mapping[tuple[frozenset[str], str | None], int] | None,
    ) -> tuple[Counter[tuple[int, int]], dict[tuple[int, TopicId], Sequence[int]]]:
        """(mask, holder node or pool) -> partitions of the class; and the free (incoming)
        partitions by (mask, topic), ascending."""
        counts: Counter[tuple[int, int]] = Counter()
        nodes = self.nodes
        topics = holder.topics()
        if held is not None:  # counted by the caller, by racks
            for (racks, rack), k in held.items():
                counts[(nodes.mask(racks), nodes.node(rack))] += k
        elif sum(self.topics[t].num_partitions for t in topics) < 16 * len(topics):
            # Small topics: the members' holdings are few; look each held partition up.
            self._count_by_member(counts)
        else:
            # Per mask, the holders of its partitions of every topic in one C-level pass (one
            # byte per partition: its holder's node), counted per node.
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
                        counts[(m, v)] += k
        free: dict[tuple[int, TopicId], Sequence[int]] = {}
        for t, seq in incoming:
            groups = self.masks(t)
            if len(seq) == self.topics[t].num_partitions:  # the whole topic is free
                for m, group in groups.items():
                    free[(m, t)] = group  # ascending
                continue
            mask_of = nodes.masks_by_partition(self.topics[t])
            some: dict[int, list[int]] = {}
            for p, m in zip(seq, map(mask_of.__getitem__, seq), strict=True):
                some.setdefault(m, []).append(p)
            free.update(((m, t), ps) for m, ps in some.items())
        for (m, _t), seq in free.items():
            counts[(m, self.pool)] += len(seq)
        return counts, free

    def _count_by_member(self, counts: Counter[tuple[int, int]]) -> None:
        """(mask, node) -> partitions held, member by member (for groups of small topics)."""
        node_of, current, nodes = self.node_of, self.current, self.nodes
        masks: dict[TopicId, Sequence[int]] = {}
        for i in self.members:
            v = node_of[i]
            for t, partitions in current[i].items():
                mask_of = masks.get(t)
                if mask_of is None:
                    mask_of = masks[t] = nodes.masks_by_partition(self.topics[t])
                for m in map(mask_of.__getitem__, partitions):
                    counts[(m, v)] += 1

    # ------------------------------------------------------------------ realising

    def _set_targets(
        self, scan: Callable[[], Iterable[int]], quota: int, extras: int, stored: bool
    ) -> None:
        """``quota`` each of the node's members (``scan()`` iterates them in member order;
        ``stored``: set already); ``quota + 1`` for ``extras`` of them: those holding more than
        ``quota`` first (they then lose nothing), in member order. (Lazy: a node whose extras
        are found early is not scanned further.)"""
        target, load = self.target, self.load
        if not stored:
            _store(target, scan(), quota)
        if not extras:
            return
        members, loads = tee(scan())
        chosen = list(
            islice(compress(members, map(quota.__lt__, map(load.__getitem__, loads))), extras)
        )
        if len(chosen) < extras:
            taken = set(chosen)
            chosen += islice(filterfalse(taken.__contains__, scan()), extras - len(chosen))
        _store(target, chosen, quota + 1)

    def _above(self, members: Sequence[int], load: Sequence[int]) -> list[int]:
        """The members holding more than their target (C-level passes)."""
        target = self.target
        if members is self.members and self.whole:  # range(n): no lookups
            return list(compress(range(len(target)), map(lt, target, load)))
        return list(
            compress(
                members, map(lt, map(target.__getitem__, members), map(load.__getitem__, members))
            )
        )

    def _below(self, members: Sequence[int], load: Sequence[int]) -> list[int]:
        """The members holding less than their target (C-level passes)."""
        target = self.target
        if members is self.members and self.whole:  # range(n): no lookups
            return list(compress(range(len(target)), map(lt, load, target)))
        return list(
            compress(
                members, map(lt, map(load.__getitem__, members), map(target.__getitem__, members))
            )
        )

    def _own(self, i: int, out: dict[int, Assignment]) -> Assignment:
        mine = out.get(i)
        if mine is None:
            mine = out[i] = dict(self.current[i])
        return mine

    def _drop(self, i: int, t: TopicId, gone: Collection[int], out: dict[int, Assignment]) -> None:
        mine = self._own(i, out)
        left = mine[t].difference(gone)
        if left:
            mine[t] = left
        else:
            del mine[t]

    def _give_up(
        self,
        node: int,
        members: list[int],
        excess: dict[int, int],
        load: list[int],
        out: dict[int, Assignment],
        moving: dict[tuple[int, int], Moving],
        holder: _Lookup,
    ) -> None:
        """Take ``excess[mask]`` partitions of each mask away from the node: first from its
        members above their count (their highest partitions), then from any of its members
        (highest partitions of the mask first)."""

        def release(i: int, t: TopicId, m: int, gone: list[int]) -> None:
            parts = moving.setdefault((m, node), {})
            parts[t] = [*parts.get(t, ()), *gone]  # a list: sorted when dealt
            self._drop(i, t, gone, out)
            load[i] -= len(gone)
            excess[m] -= len(gone)
            if not excess[m]:
                del excess[m]

        for i in self._above(members, load):
            budget = load[i] - self.target[i]
            assignment = out.get(i, self.current[i])
            for t in sorted(assignment, reverse=True):
                by: dict[int, list[int]] = {}
                for p in sorted(assignment[t], reverse=True):
                    m = self.mask(t, p)
                    if excess.get(m, 0) > len(by.get(m, ())) and budget:
                        by.setdefault(m, []).append(p)
                        budget -= 1
                for m, gone in by.items():
                    release(i, t, m, gone)
                if not excess or budget <= 0:
                    break
            if not excess:
                return
        for m in sorted(excess):
            for t in sorted(holder.topics(), reverse=True):
                group = self.masks(t).get(m, ())
                if not group:
                    continue
                taken: dict[int, list[int]] = {}
                need = excess[m]
                for p, j in zip(reversed(group), holder.members(t, reversed(group)), strict=True):
                    if j is None or self.node_of[j] != node:
                        continue
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

    def _trim(self, i: int, extra: int, out: dict[int, Assignment], into: Segments) -> None:
        """Member i gives up its ``extra`` highest partitions (topics in order, then indexes)."""
        mine = self._own(i, out)
        keep = sum(map(len, mine.values())) - extra
        for t in sorted(mine):
            partitions = mine[t]
            if keep >= len(partitions):
                keep -= len(partitions)
                continue
            ordered = sorted(partitions)
            into.setdefault(t, []).extend(ordered[keep:])
            if keep:
                mine[t] = frozenset(ordered[:keep])
            else:
                del mine[t]
            keep = 0

    def _fill(
        self,
        members: list[int],
        segments: Segments,
        load: list[int],
        out: dict[int, Assignment],
    ) -> None:
        """Members below their count (``members``, in member order) take contiguous runs of
        what the node received (topics in order, partitions ascending)."""
        pool = [(t, sorted(segments[t])) for t in sorted(segments) if segments[t]]
        if not pool:
            return
        target, current = self.target, self.current
        at, start = 0, 0
        t, seq = pool[0]
        end = len(seq)
        for i in members:
            need = target[i] - load[i]
            mine = out.get(i)
            if mine is None:
                held = current[i]
                mine = out[i] = dict(held) if held else {}
            load[i] = target[i]
            while need:
                if at == len(pool):
                    raise PartitionAssignorError("internal error: a node received too little")
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
            raise PartitionAssignorError("internal error: a node received too much")


class _NodeMembers:
    """The class's members of each node (``nodes_of``: each member's node, in member order):
    how many, and, when asked, which (C-level passes over one byte per member)."""

    __slots__ = ("_codes", "_lists", "_members", "sizes")

    def __init__(self, members: Sequence[int], nodes_of: Sequence[int], count: int) -> None:
        self._members = members
        self._lists: dict[int, list[int]] = {}
        if count < 256:
            self._codes: bytes | None = bytes(nodes_of)
            self.sizes = [self._codes.count(v) for v in range(count)]
        else:
            self._codes = None
            for v in range(count):
                self._lists[v] = list(compress(members, map(v.__eq__, nodes_of)))
            self.sizes = [len(self._lists[v]) for v in range(count)]

    def scan(self, v: int) -> Iterable[int]:
        """Node v's members, in member order (lazily)."""
        codes = self._codes
        if codes is None:
            return self._lists[v]
        return compress(self._members, codes.translate(_ONLY[v]))

    def members(self, v: int) -> list[int]:
        """Node v's members, in member order."""
        found = self._lists.get(v)
        if found is None:
            found = self._lists[v] = list(self.scan(v))
        return found


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


def _store(values: list[int], indexes: Iterable[int], value: int) -> None:
    """``values[i] = value`` for every i of ``indexes`` (a C-level pass)."""
    deque(map(values.__setitem__, indexes, repeat(value)), maxlen=0)


def _deal(
    segments: Moving, wanted: Sequence[tuple[int, int]], receiving: dict[int, Segments]
) -> None:
    """Hand ``segments`` (topics in order, partitions ascending) out in turn: ``n`` to node
    ``v`` for each ``(v, n)`` of ``wanted``; they must add up."""
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


# ---------------------------------------------------------------------- range: one group


def place_ranges(
    members: Sequence[str],
    counts: Sequence[int],
    group: Sequence[TopicId],
    num_partitions: int,
    rack_of: Mapping[str, str | None],
    topics: Mapping[TopicId, TopicMetadata],
) -> list[frozenset[int]] | None:
    """The partition indexes of each member (in order; ``counts[j]`` each, summing to
    ``num_partitions``) of a co-partitioned group of ``range`` topics, placed by racks: a
    member's index counts once per topic of the group whose partition has a replica in the
    member's rack. The plan keeps indexes in the node of their rack-blind owner where it can,
    and each node deals its indexes, ascending, to its members in order: a node that keeps
    exactly its members' rack-blind ranges gives them back unchanged. None when no rack is
    relevant (the rack-blind ranges stand)."""
    racks = relevant_racks((rack_of[m] for m in members), group, topics)
    if not racks:
        return None
    nodes = RackNodes(racks)
    index = {r: j for j, r in enumerate(nodes.racks)}
    node: list[int] = [index.get(rack_of[m], nodes.elsewhere) for m in members]  # type: ignore[arg-type]
    n = num_partitions
    # Per index its type: how many topics of the group have a replica in each node's rack (the
    # per-topic masks, summed), and the node of the member whose rack-blind range holds it.
    # The weights of an index, as one integer: digit v (base topics + 1) counts the topics
    # whose partition has a replica in node v's rack; summed over the topics, C-level.
    base = len(group) + 1
    racks_n = len(nodes.racks)
    codes: list[int] | None = None
    for t in group:
        masks = nodes.masks_by_partition(topics[t])
        encode = {m: sum(base**v for v in range(racks_n) if m >> v & 1) for m in set(masks)}
        mine = list(map(encode.__getitem__, masks))
        codes = mine if codes is None else list(map(add, codes, mine))
    assert codes is not None  # a group has topics
    weight_of = {
        c: (*(c // base**v % base for v in range(racks_n)), 0) for c in set(codes)
    }  # the last node is "elsewhere": never local
    weight_ids = {c: j for j, c in enumerate(sorted(weight_of, key=weight_of.__getitem__))}
    kinds = [weight_of[c] for c in sorted(weight_of, key=weight_ids.__getitem__)]
    capacities = [0] * nodes.count
    for j, c in enumerate(counts):
        capacities[node[j]] += c
    # Type: the weights alone (rack-blind owners are preferred when dealing, below).
    per_kind = Counter(map(weight_ids.__getitem__, codes))
    big = n + 1
    flow = transport(
        [per_kind[j] for j in range(len(kinds))],
        capacities,
        [[big * weight[v] for v in range(nodes.count)] for weight in kinds],
    )
    # Indexes by (kind, node of their rack-blind owner), ascending: a node takes first the
    # indexes of the kind its own members held rack-blind, then what is left, in order.
    stride = nodes.count
    owner_node: Iterable[int] = (
        b"".join(map(mul, map(_BYTE.__getitem__, node), counts))  # a byte per node
        if nodes.count < 256
        else chain.from_iterable(map(repeat, node, counts))
    )
    keys = list(map(add, map(stride.__mul__, map(weight_ids.__getitem__, codes)), owner_node))
    order = sorted(range(n), key=keys.__getitem__)
    by_key = Counter(keys)
    placed: list[list[int]] = [[] for _ in range(nodes.count)]
    start = 0
    for j in range(len(kinds)):
        own = []
        for v in range(nodes.count):
            size = by_key.get(j * stride + v, 0)
            own.append(order[start : start + size])
            start += size
        wanted = flow[j]
        rest: list[int] = []
        for v in range(nodes.count):
            take = min(wanted[v], len(own[v]))
            placed[v] += own[v][:take]
            rest += own[v][take:]
        rest.sort()
        at = 0
        for v in range(nodes.count):
            need = wanted[v] - min(wanted[v], len(own[v]))
            placed[v] += rest[at : at + need]
            at += need
    out: list[frozenset[int]] = [frozenset()] * len(members)
    dealt = [0] * nodes.count
    pools = [sorted(p) for p in placed]
    for j, c in enumerate(counts):
        v = node[j]
        out[j] = frozenset(pools[v][dealt[v] : dealt[v] + c])
        dealt[v] += c
    if dealt != list(map(len, pools)):
        raise PartitionAssignorError("internal error: a node's indexes do not fit its members")
    return out
