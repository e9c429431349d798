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
  within a node is greedy. (:mod:`assignors.racks_uniform`, :mod:`assignors.racks_range`.)

Counting. The types are counted in C-level passes, never partition by partition in Python: a
partition's mask is a ``bytes.translate`` (or a lookup in a bytes object) on one byte per
partition; ``uniform`` counts the partitions its members hold from the coordinator's owners
(:func:`count_owned`: per topic, the holders of its partitions in the order of their masks
through one ``itemgetter`` kept with the topic's metadata and their nodes through another, one
byte each, then counted per mask with ``bytes.count``; given the members' loads, the holders
of the partitions local to every relevant rack are not looked up, each node's count of them is
its members' loads less its other counts; in a heterogeneous group, a class whose topics only
it subscribes, :func:`count_owned_by_node`) or, in the incremental path, takes them from the
target summary; ``range`` adds each rack's bits up over the group's topics as the lanes of one
integer.

Why not as Kafka did: the client-side assignors of KIP-881 try a rack-matching pass and then a
rack-blind one, which is neither optimal nor cheap; the server-side rack-aware builders removed by
KAFKA-16694 worked per partition and per member and were too slow. Here the work per partition
is a few C-level lookups, and the optimisation runs on counts.

Everything is deterministic: nodes, types and members are visited in sorted order.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from functools import partial
from itertools import chain, compress, repeat
from operator import itemgetter
from typing import NamedTuple, cast

from assignors.api import TopicId, TopicMetadata

__all__ = [
    "Counted",
    "RackNodes",
    "count_owned",
    "count_owned_by_node",
    "count_rack_local",
    "mask_groups",
    "ones_at",
    "relevant_racks",
]

BYTE = [bytes([b]) for b in range(256)]
"""``BYTE[b]``: the one-byte bytes object of ``b``."""
ONLY = [bytes(b == v for b in range(256)) for v in range(256)]
"""``ONLY[v]``: a ``bytes.translate`` table keeping a 1 where the byte was ``v``, else 0."""
BIT = [bytes(b >> v & 1 for b in range(256)) for v in range(8)]
"""``BIT[v]``: a ``bytes.translate`` table keeping bit ``v`` of each byte."""


def ones_at(flags: bytes) -> list[int]:
    """The indexes of the ones in ``flags`` (bytes of 0 and 1), ascending: found one by one
    when they are few, else by one C-level pass."""
    if flags.count(1) * 32 >= len(flags):
        return list(compress(range(len(flags)), flags))
    found = []
    at = flags.find(1)
    while at >= 0:
        found.append(at)
        at = flags.find(1, at + 1)
    return found


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
    topics, sorted. (The members are visited only once a topic has partition racks; the
    topics only until every member's rack is found.)"""
    wanted: set[str | None] | None = None
    found: set[str] = set()
    for t in topic_ids:
        metadata = topics.get(t)
        if metadata is None or not metadata.partition_racks:
            continue
        if wanted is None:
            wanted = set(member_racks)
            wanted.discard(None)
            if not wanted:
                return []
        found.update(metadata.replica_racks().intersection(wanted))
        if len(found) == len(wanted):
            break
    return sorted(found)


_SHARED: dict[
    tuple[str, ...],
    tuple[
        dict[str, int],
        dict[str, int],
        dict[frozenset[str], int],
        dict[tuple[frozenset[str], ...], bytes],
        str,
    ],
] = {}
"""Per tuple of relevant racks: what :class:`RackNodes` derives from the racks alone (at most
``_SHARED_KEPT`` tuples, and entries per cache: then started afresh)."""
_SHARED_KEPT = 1024
_KEEP_MASK_BYTES = 4096
"""Topics of this many partitions or more keep their partitions' masks (:meth:`RackNodes.mask_bytes`)."""


class RackNodes:
    """The nodes of one computation: one per relevant rack (in sorted order), then one for the
    members in no relevant rack. ``mask_of(topic)`` maps a partition's racks to the bit mask of
    the relevant racks among them (cached per topic)."""

    __slots__ = (
        "_bytes_key",
        "_masks",
        "_of_set",
        "_tables",
        "bit",
        "count",
        "elsewhere",
        "index",
        "racks",
    )

    def __init__(self, racks: Sequence[str]) -> None:
        self.racks = key = tuple(racks)
        shared = _SHARED.get(key)
        if shared is None:
            if len(_SHARED) >= _SHARED_KEPT:
                _SHARED.clear()
            shared = _SHARED[key] = (
                {r: 1 << j for j, r in enumerate(key)},
                {r: j for j, r in enumerate(key)},
                {},
                {},
                "racks.mask_bytes" + repr(key),  # a string: its hash is kept (a tuple's is not)
            )
        # rack -> its bit; rack -> its node; racks -> mask (shared by topics with the same
        # racks); a topic's rack codes -> its masks' translate table (all read only, or caches
        # of functions of the racks alone: shared by every computation on these racks); the
        # key of mask_bytes in a topic's memo.
        self.bit, self.index, self._of_set, self._tables, self._bytes_key = shared
        self.elsewhere = len(key)
        self.count = len(key) + 1
        self._masks: dict[TopicId, dict[frozenset[str] | None, int]] = {}

    def node(self, rack_id: str | None) -> int:
        return self.index.get(rack_id, self.elsewhere)  # type: ignore[arg-type]

    def mask(self, racks: frozenset[str]) -> int:
        """The bit mask of the relevant racks among ``racks``."""
        mask = self._of_set.get(racks)
        if mask is None:
            if len(self._of_set) >= _SHARED_KEPT:
                self._of_set.clear()
            bit = self.bit
            mask = self._of_set[racks] = sum(bit[r] for r in racks if r in bit)
        return mask

    def mask_of(self, metadata: TopicMetadata) -> dict[frozenset[str] | None, int]:
        """racks -> mask, for every set of racks of the topic (missing: 0, local nowhere);
        kept with the topic's metadata per tuple of relevant racks (the same for every
        computation on those racks: the incremental path makes its nodes afresh each call)."""
        masks = self._masks.get(metadata.topic_id)
        if masks is None:
            masks = self._masks[metadata.topic_id] = metadata.memo(
                ("racks.mask_of", self.racks), partial(self._make_mask_of, metadata)
            )
        return masks

    def _make_mask_of(self, metadata: TopicMetadata) -> dict[frozenset[str] | None, int]:
        groups = metadata.partitions_by_racks()
        return dict(zip(groups, map(self.mask, groups), strict=True))

    def masks_by_partition(self, metadata: TopicMetadata) -> Sequence[int]:
        """Each partition's mask, in partition order (a bytes object when it can be:
        :meth:`mask_bytes`)."""
        coded = self.mask_bytes(metadata)
        if coded is not None:
            return coded
        mask_of = self.mask_of(metadata)
        n = metadata.num_partitions
        return list(map(mask_of.get, map(metadata.partition_racks.get, range(n)), repeat(0)))

    def mask_bytes(self, metadata: TopicMetadata) -> bytes | None:
        """Each partition's mask as one byte, in partition order, kept with the topic's metadata
        per tuple of relevant racks (a few partitions' masks are then a few lookups in one
        compact object, not in the topic's map of racks); None when the topic's racks are not
        coded or a mask does not fit in a byte. (A small topic's are made afresh: a translate of
        a few thousand bytes costs less than finding them in the memo.)"""
        if len(self.racks) > 8:
            return None
        if metadata.num_partitions < _KEEP_MASK_BYTES:
            return self._mask_bytes(metadata)
        return metadata.memo(self._bytes_key, partial(self._mask_bytes, metadata))

    def _mask_bytes(self, metadata: TopicMetadata) -> bytes | None:
        coded = metadata.partition_rack_codes()
        if coded is None:
            return None
        codes, racks = coded
        table = self._tables.get(racks)
        if table is None:
            if len(self._tables) >= _SHARED_KEPT:
                self._tables.clear()
            table = self._tables[racks] = bytes(map(self.mask, racks)).ljust(256, b"\0")
        return codes.translate(table)

    def local(self, mask: int, node: int) -> bool:
        return node != self.elsewhere and bool(mask >> node & 1)

    def nodes_of(self, rack_of: Iterable[str | None]) -> list[int]:
        """The node of each member, given their racks (a C-level pass)."""
        return list(map(self.index.get, rack_of, repeat(self.elsewhere)))  # type: ignore[arg-type]


_NOBODY_CODE = 255
""":func:`count_owned_by_node` codes each held partition by its holder's node in one byte: up
to 254 nodes (255 is the code of an index that no member holds)."""


def mask_groups(nodes: RackNodes, metadata: TopicMetadata) -> dict[int, tuple[int, ...]]:
    """mask -> the partitions of the topic with that mask, ascending; masks ascending (kept
    with the topic's metadata, per tuple of relevant racks: the same on every call)."""
    return metadata.memo(("racks.masks", nodes.racks), partial(_mask_groups, nodes, metadata))


def _mask_groups(nodes: RackNodes, metadata: TopicMetadata) -> dict[int, tuple[int, ...]]:
    mask_of = nodes.mask_of(metadata)
    merged: dict[int, list[tuple[int, ...]]] = {}
    for racks, group in metadata.partitions_by_racks().items():
        merged.setdefault(mask_of[racks], []).append(group)
    return {
        m: groups[0] if len(groups) == 1 else tuple(sorted(chain.from_iterable(groups)))
        for m, groups in sorted(merged.items())
    }


_Getter = Callable[[Mapping[int, str]], tuple[str, ...]]


class _ByMask(NamedTuple):
    """A topic's partitions by mask, as :func:`count_owned_by_node` reads their holders."""

    order: tuple[int, ...]
    """The partitions in the order of their masks (masks ascending, each mask's partitions
    ascending)."""
    bounds: tuple[tuple[int, int, int], ...]
    """Each mask with the slice of ``order`` it has, ``(mask, start, stop)``."""
    head: tuple[tuple[int, int, int], ...]
    """``bounds`` but the last mask's."""
    get_all: _Getter
    """The holders of ``order``, from the topic's owners."""
    get_head: _Getter
    """The holders of the partitions of ``head``."""
    get_last: _Getter
    """The holders of the last mask's partitions."""


def _partitions_by_mask(nodes: RackNodes, metadata: TopicMetadata) -> _ByMask:
    """The topic's partitions by mask (:class:`_ByMask`), kept with the topic's metadata like
    :func:`mask_groups` (under :func:`_order_key`)."""
    groups = mask_groups(nodes, metadata)
    order = tuple(chain.from_iterable(groups.values()))
    bounds = []
    start = 0
    for m, group in groups.items():
        bounds.append((m, start, start + len(group)))
        start += len(group)
    cut = bounds[-1][1]
    return _ByMask(
        order,
        tuple(bounds),
        tuple(bounds[:-1]),
        _getter(order),
        _getter(order[:cut]),
        _getter(order[cut:]),
    )


def _getter(partitions: tuple[int, ...]) -> _Getter:
    """An ``itemgetter`` of ``partitions``, giving a tuple even of one partition or none (an
    ``itemgetter`` of one key gives the value)."""
    if len(partitions) > 1:
        return itemgetter(*partitions)
    return lambda owned: tuple(map(owned.__getitem__, partitions))


def _order_key(nodes: RackNodes) -> str:
    """The key of :func:`_partitions_by_mask` in a topic's memo, per tuple of relevant racks:
    a string (``repr`` tells every tuple of strings apart), whose hash Python keeps, where a
    tuple's is computed again on every lookup (twice per topic per call)."""
    return "racks.order" + repr(nodes.racks)


def count_owned(
    nodes: RackNodes,
    ids: Sequence[str],
    rack_of: Sequence[str | None],
    owners: Mapping[TopicId, Mapping[int, str]],
    topic_ids: Iterable[TopicId],
    topics: Mapping[TopicId, TopicMetadata],
    loads: Sequence[int] | None = None,
) -> Counted | None:
    """The partitions of ``topic_ids`` that ``owners`` (topic -> partition -> member id, as the
    coordinator gives it) names, counted by (mask, node of the member; ``ids`` and
    ``rack_of``: the members and their racks, by index): what
    :func:`settle_class` would count from the members' assignments, in C-level passes — per
    topic, the holders of its partitions in the order of their masks (one ``itemgetter``,
    kept with the topic's metadata, on the topic's owners) and at once their nodes, one byte
    each (one ``itemgetter`` of the holders on the members' nodes; lookups one by one through
    ``map`` when some partition is free), cut into each mask's slice; then per mask the nodes
    counted with ``bytes.count``. Indexes are checked on the way: as many indexes must be
    found among the topic's partitions as the topic has owners (an index out of range is
    never found). None when it cannot tell: an index out of range, an owner not in ``ids``,
    more than 254 nodes, or (with ``loads``) counts that do not add up.

    ``loads``: each member's number of partitions, from its assignment, when the caller has
    them. Then, in the topics held whole, the holders of the partitions local to every
    relevant rack (with 2-3 replicas over 3 racks, about half of them) are not looked up: each
    node holds of them what its members hold less what was counted of the other masks. Their
    indexes are still checked (found in the owners, by an ``itemgetter`` of their own, kept
    with the topic's metadata beside one of the other partitions: the nodes are looked up
    for no more holders than they need, and no tuple of all the holders is made); their owners
    are not checked to be members, but the loads must add up to the owners named (None
    otherwise), which an owner who is no member breaks unless some member holds its partition
    all the same — and then those counts, taken from the members' own assignments, are
    right."""
    return count_owned_by_node(
        nodes, ids, nodes.nodes_of(rack_of), owners, topic_ids, topics, loads
    )


def count_owned_by_node(
    nodes: RackNodes,
    ids: Sequence[str],
    node_of: list[int],
    owners: Mapping[TopicId, Mapping[int, str]],
    topic_ids: Iterable[TopicId],
    topics: Mapping[TopicId, TopicMetadata],
    loads: Sequence[int] | None = None,
) -> Counted | None:
    """:func:`count_owned`, given the members' nodes (``node_of``, by index) rather than
    their racks."""
    if nodes.count >= _NOBODY_CODE:
        return None
    node_by_member = dict(zip(ids, node_of, strict=True))
    code = cast("dict[str | None, int]", node_by_member)  # the same dict, None added for now
    code[None] = _NOBODY_CODE
    # Per mask, its holders' nodes, one byte each, per topic: a topic's holders in the order
    # of their masks (one itemgetter on its owners) and at once their nodes (one itemgetter
    # on the members' nodes: no Python-level call per holder), cut into each mask's slice.
    by_mask: defaultdict[int, list[bytes]] = defaultdict(list)
    expected = 0  # the owners named: every one of them must be found
    key = _order_key(nodes)
    # With the loads, the mask local everywhere (the highest: last in each topic's order) is
    # not looked up where every partition of the topic is held (`unseen` of them).
    everywhere = (1 << nodes.elsewhere) - 1 if loads is not None and nodes.elsewhere else -1
    unseen = 0
    try:
        for t in topic_ids:
            owned = owners.get(t)
            if not owned:
                continue
            expected += len(owned)
            metadata = topics[t]
            order, bounds, head, get_all, get_head, get_last = metadata.memo(
                key, _partitions_by_mask, nodes, metadata
            )
            holders = None
            try:
                if bounds[-1][0] == everywhere:
                    # Its holders not looked up, but its indexes checked all the same (a
                    # KeyError where one is out of range: every partition is held else).
                    last = len(get_last(owned))
                    holders = get_head(owned)
                    unseen += last
                    bounds = head
                else:
                    holders = get_all(owned)
            except KeyError:  # some partition free (or an index out of range)
                pass
            if holders is None:
                held = bytes(map(code.__getitem__, map(owned.get, order)))
            elif len(holders) > 1:
                held = bytes(itemgetter(*holders)(code))
            else:  # (an itemgetter of one key gives the value, not a tuple)
                held = bytes(map(code.__getitem__, holders))
            for m, start, stop in bounds:
                by_mask[m].append(held[start:stop])  # (all of it: held itself)
    except KeyError:  # an owner who is no member
        return None
    del code[None]
    counts: Counter[tuple[int, int]] = Counter()
    found = 0
    for m, parts in by_mask.items():
        held = b"".join(parts)
        for v in range(nodes.count):
            k = held.count(v)
            if k:
                counts[(m, v)] = k
                found += k
    if found + unseen != expected:
        return None  # an index out of range (never found among the partitions)
    if unseen:
        assert loads is not None
        if sum(loads) != expected:
            return None  # the owners are not the members' assignments
        # Each node's partitions local everywhere: its members' load less its other counts.
        held_by = _node_loads(node_of, loads, nodes.count)
        for (_m, v), k in counts.items():
            held_by[v] -= k
        if min(held_by) < 0:
            return None
        for v, k in enumerate(held_by):
            if k:
                counts[(everywhere, v)] += k
    return Counted(nodes, node_of, node_by_member, counts)


def _node_loads(node_of: Sequence[int], loads: Sequence[int], count: int) -> list[int]:
    """The sum of the loads of each node's members (C-level passes over one byte per member;
    the most populous node's by difference)."""
    codes = bytes(node_of)
    sizes = [codes.count(v) for v in range(count)]
    biggest = sizes.index(max(sizes))
    out = [
        sum(compress(loads, codes.translate(ONLY[v]))) if n and v != biggest else 0
        for v, n in enumerate(sizes)
    ]
    out[biggest] = sum(loads) - sum(out)
    return out


class Counted:
    """A class's held partitions counted by the caller (:func:`count_owned`): the nodes of the
    relevant racks, each member's node (by index), each member id's node, and the partitions
    by (mask, node of their member)."""

    __slots__ = ("by_member", "counts", "node_of", "nodes")

    def __init__(
        self,
        nodes: RackNodes,
        node_of: list[int],
        by_member: dict[str, int],
        counts: Counter[tuple[int, int]],
    ) -> None:
        self.nodes, self.node_of, self.by_member, self.counts = nodes, node_of, by_member, counts
