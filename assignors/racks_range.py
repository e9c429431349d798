"""Rack-aware placement of one co-partitioned group of ``range`` topics
(:func:`place_ranges`): the plan of :mod:`assignors.racks` on the group's indexes, typed by how
many of its topics are local in each rack — see the theory of operation there."""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate, chain, compress, repeat
from operator import add, and_, floordiv, mod, mul, ne, rshift, sub

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
        if quota + (extra > 0) == 1:  # one index each: the owners' nodes are the members'
            owner_node = coded
        else:
            owner_node = b"".join(map(mul, map(BYTE.__getitem__, node), counts))
    else:
        capacities = [0] * stride
        for j, c in enumerate(counts):
            capacities[node[j]] += c
        owner_node = list(chain.from_iterable(map(repeat, node, counts)))
    # Per index its type: how many topics of the group have a replica in each relevant rack's
    # node (the last node, "elsewhere", is never local), coded as one integer whose order is
    # that of the counts (rack by rack); its key: the type's code and the node of the index's
    # rack-blind owner (code · nodes + node).
    base = len(group) + 1
    keys = _index_keys(nodes, group, n, topics, owner_node, base)
    order = sorted(range(n), key=keys.__getitem__)
    ranked = list(map(keys.__getitem__, order))
    cuts = [0, *compress(range(1, n), map(ne, ranked[1:], ranked[:-1])), n]
    firsts = list(map(ranked.__getitem__, cuts[:-1]))  # the keys, ascending, each once
    types = list(map(floordiv, firsts, repeat(stride)))
    codes = list(dict.fromkeys(types))  # the types, ascending
    rank = dict(zip(codes, range(len(codes)), strict=True))
    # sizes[j · nodes + v]: the indexes of the j-th type whose rack-blind owner is in node v
    sizes = [0] * (len(codes) * stride)
    cells = map(
        add, map(stride.__mul__, map(rank.__getitem__, types)), map(mod, firsts, repeat(stride))
    )
    deque(map(sizes.__setitem__, cells, map(sub, cuts[1:], cuts[:-1])), maxlen=0)
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
    # A node takes first the indexes of each type its own members held rack-blind, then what
    # is left of the type, in order.
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
    return _deal_ranges(node, counts, placed)


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
    nodes, plus ``owner_node`` (per index). C-level: per rack, one bit per partition of every
    topic (``bytes.translate`` on the masks), added up over the topics as the byte-wide lanes
    of one integer folded in halves (by chunks of fewer than 256 topics: no carry crosses a
    lane), the chunks' counts then added up, and the racks' combined, in lanes wide enough
    for the keys."""
    racks_n, stride = len(nodes.racks), nodes.count
    masks = [nodes.masks_by_partition(topics[t]) for t in group]
    scale = [base ** (racks_n - 1 - v) * stride for v in range(racks_n)]
    top = base**racks_n * stride  # every key is below
    width = next((w for w in (1, 2, 8) if top <= 256**w), 0)
    if width and type(owner_node) is bytes and all(type(m) is bytes for m in masks):
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
        return _lanes(total.to_bytes(n * width, "little"), width)
    # Keys beyond 8 bytes, or more than 8 relevant racks: the same sums, index by index.
    keys = list(owner_node)
    for v in range(racks_n):
        counted = [0] * n
        for m in masks:
            counted = list(map(add, counted, map(and_, map(rshift, m, repeat(v)), repeat(1))))
        keys = list(map(add, keys, map(mul, counted, repeat(scale[v]))))
    return keys


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
