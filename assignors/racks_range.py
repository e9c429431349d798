"""Rack-aware placement of one co-partitioned group of ``range`` topics
(:func:`place_ranges`): the plan of :mod:`assignors.racks` on the group's indexes, typed by how
many of its topics are local in each rack — see the theory of operation there. When the keys
of the indexes (type and rack-blind owner's node) fit a byte, each index's node is a
``bytes.translate`` of its key by a table that changes at a few positions
(:func:`_placed_by_lanes`); otherwise the indexes are sorted by key (:func:`_placed_by_order`).
Both place every index alike."""

from __future__ import annotations

from array import array
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate, chain, compress, repeat
from operator import add, and_, mul, rshift

from assignors.api import PartitionAssignorError, TopicId, TopicMetadata
from assignors.plan import transport
from assignors.racks import BIT, BYTE, ONLY, RackNodes, relevant_racks

__all__ = ["place_ranges"]

_LITTLE_ENDIAN = array("H", [1]).tobytes() == b"\x01\x00"  # arrays are in the machine's order


def place_ranges(
    members: Sequence[str],
    group: Sequence[TopicId],
    num_partitions: int,
    rack_of: Mapping[str, str | None],
    topics: Mapping[TopicId, TopicMetadata],
) -> list[frozenset[int]] | None:
    """The partition indexes of the members (in order) of a co-partitioned group of ``range``
    topics of ``num_partitions`` each that get some: as many as rack-blind (with ``q, r`` the
    quotient and remainder of the partitions by the members, the first ``r`` get ``q + 1``, the
    others ``q``; members beyond the partition count get none and are left out), placed by
    racks: a member's index counts once per topic of the group whose partition has a replica
    in the member's rack. The plan keeps indexes in the node of their rack-blind owner where
    it can, and each node deals its indexes, ascending, to its members in order: a node that
    keeps exactly its members' rack-blind ranges gives them back unchanged. None when no rack
    is relevant (the rack-blind ranges stand)."""
    racks = relevant_racks(map(rack_of.__getitem__, members), group, topics)
    if not racks:
        return None
    n = num_partitions
    quota, extra = divmod(n, len(members))
    getting = members if quota else members[:extra]
    counts = [quota + 1] * extra + [quota] * (len(getting) - extra)
    nodes = RackNodes(racks)
    node = nodes.nodes_of(map(rack_of.__getitem__, getting))
    stride = nodes.count
    owner_node: Sequence[int]
    if stride < 256:
        coded = bytes(node)
        first, after = coded[:extra], coded[extra:]
        capacities = [(quota + 1) * first.count(v) + quota * after.count(v) for v in range(stride)]
        owner_node = _repeated(first, quota + 1) + _repeated(after, quota)
    else:
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
    if lanes is not None and lanes[1] == 1:
        keys = lanes[0]
        tally = _tally(keys)
    else:
        keys = _lanes(*lanes) if lanes else _keys_one_by_one(nodes, masks, owner_node, base)
        tally = sorted(Counter(keys).items())
    types = [k // stride for k, _ in tally]
    codes = list(dict.fromkeys(types))  # the types, ascending
    rank = dict(zip(codes, range(len(codes)), strict=True))
    # sizes[j · nodes + v]: the indexes of the j-th type whose rack-blind owner is in node v
    sizes = [0] * (len(codes) * stride)
    for (k, size), code in zip(tally, types, strict=True):
        sizes[rank[code] * stride + k % stride] = size
    racks_n = len(nodes.racks)
    big = n + 1
    flow = transport(
        [sum(sizes[j * stride : (j + 1) * stride]) for j in range(len(codes))],
        capacities,
        [
            [*(big * (c // base ** (racks_n - 1 - v) % base) for v in range(racks_n)), 0]
            for c in codes
        ],
    )
    if type(keys) is bytes:
        placed = _placed_by_lanes(keys, stride, codes, sizes, flow)
    else:
        placed = _placed_by_order(keys, stride, sizes, flow)
    return _deal_ranges(node, counts, placed)


def _placed_by_order(
    keys: Sequence[int], stride: int, sizes: Sequence[int], flow: Sequence[Sequence[int]]
) -> list[list[int]]:
    """Each node's indexes (unsorted): of each type, first the indexes its own members held
    rack-blind (the lowest ones, as many as the plan leaves it), then what the plan sends it
    of the rest of the type, in index order — on the indexes sorted by key."""
    order = sorted(range(len(keys)), key=keys.__getitem__)
    placed: list[list[int]] = [[] for _ in range(stride)]
    start = 0
    for j, wanted in enumerate(flow):
        own = sizes[j * stride : (j + 1) * stride]
        if own == wanted:  # every index stays in its node
            for v, size in enumerate(own):
                if size:
                    placed[v] += order[start : start + size]
                    start += size
            continue
        rest: list[int] = []
        for v, size in enumerate(own):
            take = min(wanted[v], size)
            placed[v] += order[start : start + take]
            rest += order[start + take : start + size]
            start += size
        rest.sort()
        at = 0
        for v, size in enumerate(own):
            need = wanted[v] - min(wanted[v], size)
            if need:
                placed[v] += rest[at : at + need]
                at += need
    return placed


def _placed_by_lanes(
    keys: bytes,
    stride: int,
    codes: Sequence[int],
    sizes: Sequence[int],
    flow: Sequence[Sequence[int]],
) -> list[list[int]]:
    """What :func:`_placed_by_order` places (each node's indexes, here ascending), without
    sorting the indexes: each index's node as one byte, ``bytes.translate`` of its key by a
    table that changes only at a few positions. Where a node keeps only the lowest ``take``
    indexes of a key, the indexes after the ``take``-th move (from there on the key's entry is
    the type's receiving node); a type's moving indexes go, in index order, to the nodes the
    plan names (at the position where one has its share, the entries of the type's moving keys
    change to the next). Positions are bisections on ``bytes.count``; then one pass per node
    keeps its indexes (``itertools.compress``)."""
    n = len(keys)
    table = bytearray(k % stride for k in range(256))  # key -> node: the owner's, at first
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
    node_of = b"".join(pieces)
    everyone = list(range(n))
    return [
        list(compress(everyone, node_of.translate(ONLY[v]))) if v in node_of else []
        for v in range(stride)
    ]


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
    then added up, and the racks' combined, in lanes wide enough for the keys."""
    racks_n, stride, n = len(nodes.racks), nodes.count, len(owner_node)
    scale = [base ** (racks_n - 1 - v) * stride for v in range(racks_n)]
    top = base**racks_n * stride  # every key is below
    width = next((w for w in (1, 2, 8) if top <= 256**w), 0)
    if not width or type(owner_node) is not bytes or any(type(m) is not bytes for m in masks):
        return None
    # Chunks of fewer than 256 topics, each folded in byte-wide lanes, then widened.
    chunks = [b"".join(masks[i : i + 255]) for i in range(0, len(masks), 255)]  # type: ignore[arg-type]
    total = _widen(owner_node, width)
    for v in range(racks_n):
        for chunk in chunks:
            bits = int.from_bytes(chunk.translate(BIT[v]), "little")
            blocks, size = len(chunk) // n, 8 * n
            while blocks > 1:  # add the upper half of the topics' lanes onto the lower
                keep = (blocks + 1) // 2
                bits = (bits & ((1 << size * keep) - 1)) + (bits >> size * keep)
                blocks = keep
            total += _widen(bits.to_bytes(n, "little"), width) * scale[v]
    return total.to_bytes(n * width, "little"), width


def _repeated(lanes: bytes, times: int) -> bytes:
    """Each byte of ``lanes`` ``times`` times over, in order (one integer product: each byte
    widened to a lane of ``times`` bytes, times ``0x0101…01``)."""
    if times <= 1:
        return lanes if times else b""
    ones = int.from_bytes(b"\x01" * times, "little")
    return (_widen(lanes, times) * ones).to_bytes(len(lanes) * times, "little")


def _tally(data: bytes) -> list[tuple[int, int]]:
    """The distinct bytes of ``data``, ascending, each with how often it occurs (C-level: a
    ``bytes.translate`` deleting each in turn)."""
    out = []
    while data:
        left = data.translate(None, BYTE[data[0]])
        out.append((data[0], len(data) - len(left)))
        data = left
    out.sort()
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


def _deal_ranges(
    node: list[int], counts: Sequence[int], placed: list[list[int]]
) -> list[frozenset[int]]:
    """Each node's indexes, ascending, dealt to its members in order (``counts[j]`` to member
    j, of node ``node[j]``; C-level: per node, its members' runs are slices of its indexes)."""
    out: list[frozenset[int]] = [frozenset()] * len(node)
    everyone = range(len(node))
    coded = bytes(node) if len(placed) < 256 else None
    for v, pool in enumerate(placed):
        pool.sort()
        if coded is not None:
            mine = list(compress(everyone, coded.translate(ONLY[v])))
        else:
            mine = list(compress(everyone, map(v.__eq__, node)))
        sizes = list(map(counts.__getitem__, mine))
        if sum(sizes) != len(pool):
            raise PartitionAssignorError("internal error: a node's indexes do not fit its members")
        if not pool:
            continue
        runs: Iterable[Iterable[int]]
        if sizes.count(sizes[0]) == len(sizes):  # one size (q or q + 1 each): consecutive
            runs = zip(*[iter(pool)] * sizes[0], strict=True)  # groups of that size
        else:
            ends = list(accumulate(sizes))
            runs = map(pool.__getitem__, map(slice, [0, *ends[:-1]], ends))
        deque(map(out.__setitem__, mine, map(frozenset, runs)), maxlen=0)
    return out
