"""Rack-aware placement of one co-partitioned group of ``range`` topics
(:func:`place_ranges`): the plan of :mod:`assignors.racks` on the group's indexes, typed by how
many of its topics are local in each rack — see the theory of operation there. Each index gets
a node: when the keys of the indexes (type and rack-blind owner's node) fit a byte, a
``bytes.translate`` of its key by a table that changes at a few positions
(:func:`_nodes_by_lanes`); otherwise from the indexes sorted by key (:func:`_nodes_by_order`).
Both place every index alike. Then each node's indexes, picked C-level, are dealt to its
members (:func:`_deal`), a member whose run is its current set getting that set back. What one
computation's groups have in common is made once: the members' racks, coded, per list of
subscribers (:class:`MemberRacks`); the nodes per list of relevant racks, and the indexes and
one-index sets per partition count (:class:`Shared`, :class:`Indexes`: groups of as many
partitions share them, as the rack-blind ranges of equal groups share one list)."""

from __future__ import annotations

from array import array
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from itertools import accumulate, chain, compress, islice, repeat
from operator import add, and_, eq, floordiv, mod, mul, ne, not_, rshift, sub

from assignors.api import PartitionAssignorError, TopicId, TopicMetadata
from assignors.native import kernels as _placement  # the C kernels, or None
from assignors.plan import transport
from assignors.racks import BIT, BYTE, ONLY, RackNodes, ones_at, relevant_racks

__all__ = ["Indexes", "MemberRacks", "Shared", "place_ranges"]

_LITTLE_ENDIAN = array("H", [1]).tobytes() == b"\x01\x00"  # arrays are in the machine's order


class MemberRacks:
    """The racks of one list of members, coded once for every co-partitioned group they
    subscribe to: ``names`` the distinct racks of the ``count`` members (sorted, without None)
    and ``codes`` per member of the first ones (``first``: their racks, in order; as many as
    get partitions of some group), the index of its rack in ``names`` (``len(names)`` for a
    member in no rack) — a bytes object when the codes fit a byte. ``everyone``: the racks of
    all the members, when ``first`` does not hold them all (only their set matters); without
    it, the names are the first members' racks (enough when those hold every rack with a
    replica of the members' topics: only racks holding replicas become nodes)."""

    __slots__ = ("codes", "count", "names")

    def __init__(
        self,
        first: Iterable[str | None],
        count: int,
        everyone: Iterable[str | None] | None = None,
    ) -> None:
        listed = list(first)
        found = set(listed if everyone is None else everyone)
        names = sorted(r for r in found if r is not None)
        index: dict[str | None, int] = {r: j for j, r in enumerate(names)}
        index[None] = len(names)
        self.names = names
        self.count = count
        self.codes: bytes | list[int] = (
            bytes(map(index.__getitem__, listed))
            if len(names) < 255
            else list(map(index.__getitem__, listed))
        )


def place_ranges(
    members: MemberRacks,
    group: Sequence[TopicId],
    num_partitions: int,
    topics: Mapping[TopicId, TopicMetadata],
    shared: Shared | None = None,
    current: Sequence[frozenset[int]] | None = None,
) -> list[frozenset[int]] | None:
    """The partition indexes of the members (in order, their racks coded in ``members``) of a
    co-partitioned group of ``range`` topics of ``num_partitions`` each that get some: as many
    as rack-blind (with ``q, r`` the quotient and remainder of the partitions by the members,
    the first ``r`` get ``q + 1``, the others ``q``; members beyond the partition count get
    none and are left out), placed by racks: a member's index counts once per topic of the
    group whose partition has a replica in the member's rack. The plan keeps indexes in the
    node of their rack-blind owner where it can, and each node deals its indexes, ascending,
    to its members in order: a node that keeps exactly its members' rack-blind ranges gives
    them back unchanged. None when no rack is relevant (the rack-blind ranges stand).
    ``shared``: what the caller's groups share (:class:`Shared`), if it has several;
    ``current``: per member (in order, at least those that get some), its current set of the
    group's topics, given back where the member's indexes are the same (:func:`_deal`)."""
    racks = relevant_racks(members.names, group, topics)
    if not racks:
        return None
    if shared is None:
        shared = Shared()
    n = num_partitions
    codes = members.codes
    quota, extra = divmod(n, members.count)
    getting = members.count if quota else extra
    if len(codes) < getting:
        raise PartitionAssignorError("internal error: members' racks coded for fewer members")
    nodes = shared.nodes(racks)
    stride = nodes.count
    node_of_code = [*nodes.nodes_of(members.names), nodes.elsewhere]
    node: bytes | list[int]
    owner_node: Sequence[int]
    if stride < 256 and isinstance(codes, bytes):
        node = codes[:getting].translate(bytes(node_of_code).ljust(256, b"\0"))
        first, after = node[:extra], node[extra:]
        capacities = [(quota + 1) * first.count(v) + quota * after.count(v) for v in range(stride)]
        owner_node = _repeated(first, quota + 1) + _repeated(after, quota)
    else:
        node = list(map(node_of_code.__getitem__, codes[:getting]))
        counts = [quota + 1] * extra + [quota] * (getting - extra)
        capacities = [0] * stride
        for j, c in enumerate(counts):
            capacities[node[j]] += c
        owner_node = list(chain.from_iterable(map(repeat, node, counts)))
    # Per index its type: how many topics of the group have a replica in each relevant rack's
    # node (the last node, "elsewhere", is never local), coded as one integer whose order is
    # that of the counts (rack by rack); its key: the type's code and the node of the index's
    # rack-blind owner (code · nodes + node). Keys below 256 come as one byte per index.
    base = len(group) + 1
    masks = [nodes.masks_by_partition(topics[t]) for t in group]
    lanes = _index_key_lanes(nodes, masks, owner_node, base)
    keys: bytes | list[int]
    counted: Mapping[int, int]  # key -> its indexes
    if lanes is not None and lanes[1] == 1:
        keys = lanes[0]
        counted = _tally(keys)
    else:
        keys = _lanes(*lanes) if lanes else _keys_one_by_one(nodes, masks, owner_node, base)
        counted = Counter(keys)
    found = sorted(counted)  # a type's keys are consecutive
    found_sizes = list(map(counted.__getitem__, found))
    types = list(map(floordiv, found, repeat(stride)))
    steps = list(map(ne, types[1:], types))
    ranks = list(accumulate(steps, initial=0))  # per key, its type's rank
    firsts = [0, *compress(range(1, len(types)), steps)]  # of each type
    codes_of_types = list(map(types.__getitem__, firsts))  # the types, ascending
    cumulative = list(accumulate(found_sizes, initial=0))
    ends = [*firsts[1:], len(found)]
    supplies = list(
        map(sub, map(cumulative.__getitem__, ends), map(cumulative.__getitem__, firsts))
    )
    # A type's gain in the node of a relevant rack: one per topic local there (the plan is
    # the same for any positive multiple); none "elsewhere".
    per_rack = [
        list(map(mod, map(floordiv, codes_of_types, repeat(base**v)), repeat(base)))
        for v in reversed(range(len(racks)))
    ]
    flow = transport(supplies, capacities, list(zip(*per_rack, repeat(0), strict=False)))
    node_of: bytes | bytearray | list[int]
    if type(keys) is bytes:
        # sizes[j · nodes + v]: the indexes of the j-th type whose rack-blind owner is in v
        sizes = [0] * (len(codes_of_types) * stride)
        at_type = map(mul, ranks, repeat(stride))
        owners = map(mod, found, repeat(stride))
        deque(map(sizes.__setitem__, map(add, at_type, owners), found_sizes), maxlen=0)
        node_of = _nodes_by_lanes(keys, stride, codes_of_types, sizes, flow)
    else:
        node_of = _nodes_by_order(keys, stride, codes_of_types, found, ranks, counted, flow)
    return _deal(node, quota, extra, node_of, stride, shared.indexes(n), current)


def _nodes_by_order(
    keys: Sequence[int],
    stride: int,
    codes: Sequence[int],
    found: Sequence[int],
    ranks: Sequence[int],
    counted: Mapping[int, int],
    flow: Sequence[list[int]],
) -> bytes | bytearray | list[int]:
    """Each index's node (``keys``: per index its key; ``found``: the keys, ascending, and
    ``ranks`` the rank of each one's type; ``counted``: per key its indexes): of each type, a node keeps the indexes its own
    members held rack-blind (the lowest ones, as many as the plan leaves it), and the rest of
    the type go, in index order, to the nodes the plan sends them to. A type the plan sends
    to one node goes there whole: each index's node is its key's (C-level); only the indexes
    of the types the plan splits are visited, in index order."""
    supplies = list(map(sum, flow))
    whole = list(map(list.count, flow, supplies))  # 1: the plan sends the type to one node
    split = list(compress(range(len(flow)), map(not_, whole)))
    unset = 255 if stride < 256 else -1  # (a node of a split type, not known yet)
    target = [unset] * len(flow)
    sent = map(list.index, compress(flow, whole), compress(supplies, whole))
    deque(map(target.__setitem__, compress(range(len(flow)), whole), sent), maxlen=0)
    node_of_key = dict(zip(found, map(target.__getitem__, ranks), strict=True))
    node_of: bytes | bytearray | list[int]
    if stride < 256:
        coded = bytes(map(node_of_key.__getitem__, keys))
        if not split:
            return coded
        left = ones_at(coded.translate(ONLY[unset]))
        node_of = bytearray(coded)
    else:
        node_of = list(map(node_of_key.__getitem__, keys))
        if not split:
            return node_of
        left = list(compress(range(len(keys)), map(eq, node_of, repeat(unset))))
    keep: dict[int, int] = {}  # key of a split type -> how many more of its indexes stay
    moving: dict[int, list[int]] = {}  # code of a split type -> its moving indexes
    for j in split:
        keep.update(zip(range(codes[j] * stride, (codes[j] + 1) * stride), flow[j], strict=True))
        moving[codes[j]] = []
    for i in left:
        key = keys[i]
        if keep[key]:
            keep[key] -= 1
            node_of[i] = key % stride
        else:
            moving[key // stride].append(i)
    for j in split:
        wanted = flow[j]
        own = map(counted.get, range(codes[j] * stride, (codes[j] + 1) * stride), repeat(0))
        receivers = list(
            chain.from_iterable(map(repeat, range(stride), map(sub, wanted, map(min, wanted, own))))
        )
        if len(receivers) != len(moving[codes[j]]):
            raise PartitionAssignorError(_UNFIT)
        for i, v in zip(moving[codes[j]], receivers, strict=True):
            node_of[i] = v
    return node_of


def _nodes_by_lanes(
    keys: bytes,
    stride: int,
    codes: Sequence[int],
    sizes: Sequence[int],
    flow: Sequence[Sequence[int]],
) -> bytes:
    """What :func:`_nodes_by_order` gives (each index's node, one byte each), without
    sorting the indexes: each index's node is ``bytes.translate`` of its key by a table that
    changes only at a few positions. Where a node keeps only the lowest ``take`` indexes of a
    key, the indexes after the ``take``-th move (from there on the key's entry is the type's
    receiving node); a type's moving indexes go, in index order, to the nodes the plan names
    (at the position where one has its share, the entries of the type's moving keys change to
    the next). Positions are bisections on ``bytes.count``."""
    table = bytearray(_owner_table(stride))  # key -> node: the owner's, at first
    # Events by position: (position, 0, type, node): the type's moving indexes from there on
    # go to the node; (position, 1, type, key): the key's indexes from there on move.
    events: list[tuple[int, int, int, int]] = []
    moving: list[list[tuple[int, int]]] = []  # per type: (key, where its indexes move)
    for j, wanted in enumerate(flow):
        own = sizes[j * stride : (j + 1) * stride]
        keyed: list[tuple[int, int]] = []
        moving.append(keyed)
        if own == wanted:  # every index stays in its node
            continue
        for v, size in enumerate(own):
            take = min(wanted[v], size)
            if take < size:
                key = codes[j] * stride + v
                cut = _position(keys, [(key, 0)], take)
                keyed.append((key, cut))
                events.append((cut, 1, j, key))
        passed = 0
        for v, size in enumerate(own):
            need = wanted[v] - min(wanted[v], size)
            if need:
                events.append((_position(keys, keyed, passed), 0, j, v))
                passed += need
    events.sort()
    receiver = [0] * len(flow)
    pieces: list[bytes] = []
    at = 0
    for position, kind, j, value in events:
        if position > at:
            pieces.append(keys[at:position].translate(table))
            at = position
        if kind:
            table[value] = receiver[j]
        else:
            receiver[j] = value
            for key, cut in moving[j]:
                if cut <= position:
                    table[key] = value
    pieces.append(keys[at:].translate(table))
    return b"".join(pieces)


def _position(keys: bytes, moving: Sequence[tuple[int, int]], count: int) -> int:
    """The position just after the ``count``-th index (0 for none; there are at least
    ``count``) whose key is one of ``moving``'s at or after its position: a bisection on
    ``bytes.count``."""
    if not count:
        return 0
    low, high, before = 0, len(keys), 0  # before: the count below low (< count <= below high)
    while high - low > 1:
        middle = (low + high) // 2
        seen = before + sum(keys.count(key, max(cut, low), middle) for key, cut in moving)
        if seen >= count:
            high = middle
        else:
            low, before = middle, seen
    return high


def _index_keys(
    nodes: RackNodes,
    group: Sequence[TopicId],
    n: int,
    topics: Mapping[TopicId, TopicMetadata],
    owner_node: Sequence[int],
    base: int,
) -> list[int]:
    """Per index of a co-partitioned group of ``n`` partitions per topic, with ``c_v`` the
    number of the group's topics whose partition has a replica in the ``v``-th relevant rack:
    ``Σ c_v · base^(racks - 1 - v)`` (``base``: more than the topics), times the number of
    nodes, plus ``owner_node`` (per index): :func:`_index_key_lanes` read as integers, or,
    where it has none, the same sums index by index."""
    masks = [nodes.masks_by_partition(topics[t]) for t in group]
    lanes = _index_key_lanes(nodes, masks, owner_node, base)
    if lanes is not None:
        return _lanes(*lanes)
    return _keys_one_by_one(nodes, masks, owner_node, base)


def _keys_one_by_one(
    nodes: RackNodes, masks: Sequence[Sequence[int]], owner_node: Sequence[int], base: int
) -> list[int]:
    """The keys of :func:`_index_keys` index by index (keys beyond 8 bytes, or more than 8
    relevant racks)."""
    racks_n, stride, n = len(nodes.racks), nodes.count, len(owner_node)
    scale = [base ** (racks_n - 1 - v) * stride for v in range(racks_n)]
    keys = list(owner_node)
    for v in range(racks_n):
        counted = [0] * n
        for m in masks:
            counted = list(map(add, counted, map(and_, map(rshift, m, repeat(v)), repeat(1))))
        keys = list(map(add, keys, map(mul, counted, repeat(scale[v]))))
    return keys


def _index_key_lanes(
    nodes: RackNodes, masks: Sequence[Sequence[int]], owner_node: Sequence[int], base: int
) -> tuple[bytes, int] | None:
    """The keys of :func:`_index_keys` (``masks``: the topics' masks by partition, one per
    index) as unsigned little-endian lanes of 1, 2 or 8 bytes (the bytes, the width), or None
    when they need wider lanes, there are more than 8 relevant racks, or the owners' nodes are
    not bytes. C-level: per rack, one bit per partition of every topic (``bytes.translate`` on
    the masks), added up over the topics as the byte-wide lanes of one integer folded in
    halves (by chunks of fewer than 256 topics: no carry crosses a lane), the chunks' counts
    then added up, and the racks' combined, in lanes wide enough for the keys. One or two
    topics whose keys fit a byte: both masks in one byte, one ``bytes.translate``
    (:func:`_pair_table`)."""
    racks_n, stride, n = len(nodes.racks), nodes.count, len(owner_node)
    scale = [base ** (racks_n - 1 - v) * stride for v in range(racks_n)]
    top = base**racks_n * stride  # every key is below
    width = next((w for w in (1, 2, 8) if top <= 256**w), 0)
    if not width or type(owner_node) is not bytes or any(type(m) is not bytes for m in masks):
        return None
    if width == 1 and len(masks) <= 2 and racks_n <= 4:  # each index's masks fit one byte
        table = _pair_table(racks_n, len(masks), base, stride)
        pair = int.from_bytes(masks[0], "little")
        if len(masks) == 2:  # the first's mask above the second's, in every byte
            pair = (pair << racks_n) + int.from_bytes(masks[1], "little")
        coded = pair.to_bytes(n, "little").translate(table)
        total = int.from_bytes(coded, "little") + int.from_bytes(owner_node, "little")
        return total.to_bytes(n, "little"), 1
    # Chunks of fewer than 256 topics, each folded in byte-wide lanes, then widened.
    chunks = [b"".join(masks[i : i + 255]) for i in range(0, len(masks), 255)]  # type: ignore[arg-type]
    total = _widen(owner_node, width)
    for v in range(0, racks_n, 4):  # four racks at once, then two, then each alone
        for chunk in chunks:
            parts: list[tuple[int, int, int]] = []  # (rack, its counts in byte lanes, blocks)
            blocks = len(chunk) // n
            if v + 1 == racks_n:
                parts.append((v, int.from_bytes(chunk.translate(BIT[v]), "little"), blocks))
            else:  # each rack's bit in its own quarter of each byte
                four = int.from_bytes(chunk.translate(_FOUR_BITS[v]), "little")
                four, blocks = _fold(four, blocks, n, 1)  # each quarter counts up to 2 (< 4)
                quarters = int.from_bytes(b"\x33" * (blocks * n), "little")
                for k, two in enumerate((four & quarters, four >> 2 & quarters)):
                    # racks v + k and v + k + 2 in the low and the high half of each byte
                    two, halves = _fold(two, blocks, n, _NIBBLE_FOLDS - 1)
                    nibbles = int.from_bytes(b"\x0f" * (halves * n), "little")
                    parts.append((v + k, two & nibbles, halves))
                    if v + k + 2 < racks_n:
                        parts.append((v + k + 2, two >> 4 & nibbles, halves))
            for rack, bits, left in parts:
                bits = _fold(bits, left, n, left)[0]
                total += _widen(bits.to_bytes(n, "little"), width) * scale[rack]
    return total.to_bytes(n * width, "little"), width


def _fold(bits: int, blocks: int, n: int, times: int) -> tuple[int, int]:
    """``bits`` as ``blocks`` blocks of ``n`` byte-wide lanes, the upper half of the blocks
    added onto the lower up to ``times`` times (until one is left): the result, and its
    blocks."""
    size = 8 * n
    while blocks > 1 and times:
        keep = (blocks + 1) // 2
        bits = (bits & ((1 << size * keep) - 1)) + (bits >> size * keep)
        blocks, times = keep, times - 1
    return bits, blocks


_FOUR_BITS = [
    bytes(sum((b >> v + k & 1) << 2 * k for k in range(4)) for b in range(256)) for v in range(8)
]
"""``_FOUR_BITS[v]``: a ``bytes.translate`` table putting bits ``v`` to ``v + 3`` of each byte
in its four quarters (two bits each), lowest first."""

_NIBBLE_FOLDS = 3
"""Folds a rack's count takes in half a byte (one of them in a quarter): it then counts up to
8 blocks (< 16: no carry crosses into the other half)."""


@cache
def _owner_table(stride: int) -> bytes:
    """The ``bytes.translate`` table from a key to its owner's node (the key modulo the
    nodes)."""
    return bytes(k % stride for k in range(256))


@cache
def _pair_table(racks: int, topics: int, base: int, stride: int) -> bytes:
    """For one or two topics' masks over ``racks`` relevant racks in one byte (the first's
    above the second's): the ``bytes.translate`` table to the keys of :func:`_index_keys`
    without the owner's node (each fits a byte: the keys do)."""
    scale = [base ** (racks - 1 - v) * stride for v in range(racks)]
    return bytes(
        sum(((x >> v & 1) + (x >> racks + v & 1)) * scale[v] for v in range(racks))
        for x in range(1 << racks * topics)
    ).ljust(256, b"\0")


def _repeated(lanes: bytes, times: int) -> bytes:
    """Each byte of ``lanes`` ``times`` times over, in order (one integer product: each byte
    widened to a lane of ``times`` bytes, times ``0x0101…01``)."""
    if times <= 1:
        return lanes if times else b""
    ones = int.from_bytes(b"\x01" * times, "little")
    return (_widen(lanes, times) * ones).to_bytes(len(lanes) * times, "little")


def _tally(data: bytes) -> dict[int, int]:
    """The distinct bytes of ``data``, each with how often it occurs: one pass of the C kernel
    ``_placement.tally``; the Python below (C-level: a ``bytes.translate`` deleting each
    distinct byte in turn) is the reference it is tested against."""
    if _placement is not None:
        return _placement.tally(data)
    out = {}
    while data:
        left = data.translate(None, BYTE[data[0]])
        out[data[0]] = len(data) - len(left)
        data = left
    return out


def _widen(lanes: bytes, width: int) -> int:
    """The integer whose ``width``-byte little-endian lanes hold the bytes of ``lanes``."""
    if width == 1:
        return int.from_bytes(lanes, "little")
    wide = bytearray(len(lanes) * width)
    wide[::width] = lanes
    return int.from_bytes(wide, "little")


def _lanes(data: bytes, width: int) -> list[int]:
    """The unsigned little-endian ``width``-byte integers of ``data`` (1, 2 or 8 bytes)."""
    if width == 1:
        return list(data)
    values = array("H" if width == 2 else "Q")
    values.frombytes(data)
    if not _LITTLE_ENDIAN:
        values.byteswap()
    return values.tolist()


def _deal(
    node: bytes | list[int],
    quota: int,
    extra: int,
    node_of: bytes | bytearray | list[int],
    stride: int,
    indexes: Indexes,
    current: Sequence[frozenset[int]] | None = None,
) -> list[frozenset[int]]:
    """Each node's indexes (``node_of``: per index its node), ascending, dealt to its members
    in order (``node``: per member that gets some, its node; the first ``extra`` get
    ``quota + 1``, the others ``quota``): per node, its members' runs are consecutive groups
    of its indexes (one index: the shared one-index set), and the members take the next run
    of their node's in member order (C-level: ``map(next, …)``; with the nodes as bytes, each
    node's indexes picked by ``itertools.compress``). With ``current`` (per member its current
    set) and runs of two or more, a member whose run is its current set gets that very set
    back (:func:`_kept_or_made`): in a group that a leave or a join left as it was, no set is
    made, and the garbage collector is not woken by thousands of new ones. (Runs of one index
    are the shared one-index sets: nothing to save.)

    With the nodes as bytes, the C kernel ``_placement.deal`` deals them (one counting pass
    finds each node's indexes; each member's run is compared with its current set and made into
    a set there, the same sets made the same way): 10,000 × 100,000 heterogeneous, 10 topics,
    FULL about 40% less CPU, leaves and joins about a third less. The Python below is the
    reference it is tested against (and what runs where it was not built)."""
    if _placement is not None and type(node) is bytes and not isinstance(node_of, list):
        dealt = _placement.deal(
            node,
            quota,
            extra,
            node_of,
            stride,
            indexes.all(),
            indexes.ones() if quota <= 1 else None,
            current if current is None or type(current) is list else list(current),
        )
        if dealt is None:
            raise PartitionAssignorError(_UNFIT)
        return dealt
    pools: list[Iterable[int]] = []
    counts: list[tuple[int, int]] = []  # per node: its members of quota + 1, of quota
    if isinstance(node, bytes) and isinstance(node_of, bytes | bytearray):
        for v in range(stride):
            held = node_of.count(v)
            pools.append(compress(indexes.all(), node_of.translate(ONLY[v])) if held else ())
            counts.append(_fitting(held, node.count(v, 0, extra), node.count(v, extra), quota))
    else:
        lists: list[list[int]] = [[] for _ in range(stride)]
        deque(map(list.append, map(lists.__getitem__, node_of), indexes.all()), maxlen=0)
        before, after = Counter(node[:extra]), Counter(node[extra:])
        for v, mine in enumerate(lists):
            pools.append(mine)
            counts.append(_fitting(len(mine), before[v], after[v], quota))
    iterators = list(map(iter, pools))
    if current is not None and quota > 1 and len(current) >= len(node):
        runs = [  # each member's run as a tuple (passed on at once: zip reuses it)
            chain(
                islice(zip(*[pool] * (quota + 1), strict=False), firsts),
                islice(zip(*[pool] * quota, strict=False), others),
            )
            for pool, (firsts, others) in zip(iterators, counts, strict=True)
        ]
        out = list(map(_kept_or_made, current, map(next, map(runs.__getitem__, node))))
    else:
        made = [
            chain(_runs(pool, quota + 1, firsts, indexes), _runs(pool, quota, others, indexes))
            for pool, (firsts, others) in zip(iterators, counts, strict=True)
        ]
        out = list(map(next, map(made.__getitem__, node)))
    if len(out) != len(node):  # (a node out of runs: excluded by the counts above)
        raise PartitionAssignorError(_UNFIT)
    return out


def _fitting(held: int, firsts: int, others: int, quota: int) -> tuple[int, int]:
    """A node's ``firsts`` members of ``quota + 1`` and ``others`` of ``quota``, checked to
    take exactly its ``held`` indexes (an internal error otherwise)."""
    if firsts * (quota + 1) + others * quota != held:
        raise PartitionAssignorError(_UNFIT)
    return firsts, others


def _kept_or_made(current: frozenset[int], run: tuple[int, ...]) -> frozenset[int]:
    """``current`` when it is ``run`` (a frozenset as long, holding all of it), else a new set
    of the run, made as :func:`_runs` makes it (one Python call per member beats C-level passes
    that compare, then deal again)."""
    if type(current) is frozenset and len(current) == len(run) and current.issuperset(run):
        return current
    return frozenset(dict.fromkeys(run) if 5 <= len(run) <= 7 else run)


def _runs(pool: Iterator[int], size: int, count: int, indexes: Indexes) -> Iterable[frozenset[int]]:
    """The next ``count`` runs of ``size`` indexes of ``pool``, as frozensets. Runs of five to
    seven indexes pass through a dict (``dict.fromkeys``): a frozenset made from a dict is sized
    for it at once (16 slots), while one made from a tuple outgrows its inline table of eight
    at the fifth index and is rehashed into 32 — twice the memory, which the garbage collector
    then reads at every pass (10,000 × 100,000 heterogeneous, 10 topics: FULL 8% faster).
    Smaller runs stay inline, larger ones get 32 slots or more either way."""
    if size == 1:
        return map(indexes.ones().__getitem__, islice(pool, count))
    runs = islice(zip(*[pool] * size, strict=False), count)
    return map(frozenset, map(dict.fromkeys, runs) if 5 <= size <= 7 else runs)


class Indexes:
    """The indexes of ``n`` partitions and each index alone as a frozenset, made on first use
    and shared by the co-partitioned groups of ``n`` partitions of one computation (their
    results hold the same integers and one-index sets)."""

    __slots__ = ("_all", "_ones", "n")

    def __init__(self, n: int) -> None:
        self.n = n
        self._all: list[int] | None = None
        self._ones: list[frozenset[int]] | None = None

    def all(self) -> list[int]:
        if self._all is None:
            self._all = list(range(self.n))
        return self._all

    def ones(self) -> list[frozenset[int]]:
        if self._ones is None:
            self._ones = list(map(frozenset, zip(self.all())))
        return self._ones


class Shared:
    """What the co-partitioned groups of one computation share, made on first use: per
    partition count its :class:`Indexes`, per list of relevant racks its
    :class:`~assignors.racks.RackNodes` (the masks of each layout of racks, cached there, serve
    every group on those racks)."""

    __slots__ = ("_indexes", "_nodes")

    def __init__(self) -> None:
        self._indexes: dict[int, Indexes] = {}
        self._nodes: dict[tuple[str, ...], RackNodes] = {}

    def indexes(self, n: int) -> Indexes:
        made = self._indexes.get(n)
        if made is None:
            made = self._indexes[n] = Indexes(n)
        return made

    def nodes(self, racks: Sequence[str]) -> RackNodes:
        key = tuple(racks)
        made = self._nodes.get(key)
        if made is None:
            made = self._nodes[key] = RackNodes(key)
        return made


_UNFIT = "internal error: a node's indexes do not fit its members"
