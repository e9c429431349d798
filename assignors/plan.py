"""The rack plan (:func:`transport`): how many partitions of each type each node takes, for
:mod:`assignors.racks`. A transportation problem — types of partitions with supplies, nodes
(racks) with capacities and a shared pool of extras, a gain per (type, node) — solved exactly
on the nodes: a greedy start, then gainful cycles cancelled until none is left. Few nodes, any
number of types; pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from heapq import heapify, heappop, heappush

from assignors.api import PartitionAssignorError
from assignors.native import kernels as _placement  # the C kernels, or None

__all__ = ["greedy_order", "transport"]

Order = list[tuple[int, int, int]]
"""The greedy start's visiting order (:func:`greedy_order`)."""


def transport(
    supplies: Sequence[int],
    capacities: Sequence[int],
    weights: Sequence[Sequence[int]],
    *,
    extras: int = 0,
    extra_room: Sequence[int] = (),
    order: Order | None = None,
    taken: list[int] | None = None,
) -> list[list[int]]:
    """``flow[i][v]`` maximising ``Σ weights[i][v] · flow[i][v]``: type ``i`` sends exactly
    ``supplies[i]``; node ``v`` receives ``capacities[v]`` plus up to ``extra_room[v]`` of the
    ``extras`` units shared by all nodes (every unit is placed: the supplies add up to the
    capacities plus ``extras``). Exact. A greedy start (each type to its best nodes while they
    have room) is kept when every unit reached a node of its best weight — nothing can beat
    that; otherwise a min-cost flow decides. Deterministic. ``order``: ``greedy_order(weights)``
    when the caller keeps it (its weights repeat from call to call); ``taken``: when given, set
    to how many of the extras each node takes (what it receives beyond its capacity: every
    node receives at least its capacity)."""
    nodes = len(capacities)
    if sum(supplies) != sum(capacities) + extras:
        raise PartitionAssignorError("internal error: rack plan supplies and capacities differ")
    room = list(extra_room) if extras else [0] * nodes
    flow, took, optimal = _greedy(supplies, capacities, weights, extras, room, order)
    if not optimal:
        _Cycles(flow, weights, took, room).cancel()
    if taken is not None:
        taken[:] = took
    return flow


class _Cycles:
    """Improves a feasible flow until no gainful cycle is left, which makes it optimal (the
    optimality condition of min-cost flows). Cycles are looked for on the nodes: an edge v -> u
    moves a unit of the type at v that gains most at u (``w[j][u] - w[j][v]``, the best such
    type kept in a heap per pair of nodes), and a vertex for the shared extras lets a node take
    one more extra (v -> extras, if it has room) while another takes one less (extras -> u, if it
    has one). Bellman-Ford over the nodes finds a gainful cycle; it is pushed as far as its
    narrowest step allows. Few nodes, any number of types; deterministic."""

    def __init__(
        self,
        flow: list[list[int]],
        weights: Sequence[Sequence[int]],
        taken: list[int],
        room: Sequence[int],
    ) -> None:
        self.flow, self.w, self.taken, self.room = flow, weights, taken, room
        self.nodes = len(room)
        self.heaps: list[list[list[tuple[int, int]]]] = []
        for v in range(self.nodes):
            held = [i for i, row in enumerate(flow) if row[v]]
            heaps = []
            for u in range(self.nodes):
                heap = [] if u == v else [(weights[i][v] - weights[i][u], i) for i in held]
                heapify(heap)
                heaps.append(heap)
            self.heaps.append(heaps)

    def _held(self, i: int, v: int) -> None:
        """Type i has units at node v (again): it may move from there."""
        row = self.w[i]
        for u in range(self.nodes):
            if u != v:
                heappush(self.heaps[v][u], (row[v] - row[u], i))

    def _best(self, v: int, u: int) -> int | None:
        heap, flow = self.heaps[v][u], self.flow
        while heap and not flow[heap[0][1]][v]:
            heappop(heap)
        return heap[0][1] if heap else None

    def cancel(self) -> None:
        nodes, w, flow, taken, room = self.nodes, self.w, self.flow, self.taken, self.room
        spare = nodes  # the extras' vertex
        vertices = nodes + 1
        for _ in range(_MAX_CYCLES):
            moves = [
                [self._best(v, u) if u != v else None for u in range(nodes)] for v in range(nodes)
            ]
            edges: list[tuple[int, int, int, int]] = []  # (from, to, gain, type or -1)
            for v in range(nodes):
                for u in range(nodes):
                    j = moves[v][u]
                    if j is not None:
                        edges.append((v, u, w[j][u] - w[j][v], j))
                if taken[v] < room[v]:
                    edges.append((v, spare, 0, -1))
                if taken[v]:
                    edges.append((spare, v, 0, -1))
            gain = [0] * vertices
            came: list[tuple[int, int, int, int] | None] = [None] * vertices
            last = -1
            for _round in range(vertices):
                last = -1
                for edge in edges:
                    a, b, g, _j = edge
                    if gain[a] + g > gain[b]:
                        gain[b] = gain[a] + g
                        came[b] = edge
                        last = b
                if last < 0:
                    return  # no gainful cycle: optimal
            # `last` was improved in the final round: walk back into the cycle, then around it.
            at = last
            for _ in range(vertices):
                back = came[at]
                assert back is not None
                at = back[0]
            cycle: list[tuple[int, int, int, int]] = []
            start = at
            while True:
                back = came[at]
                assert back is not None
                cycle.append(back)
                at = back[0]
                if at == start:
                    break
            amount = min(
                flow[j][a] if j >= 0 else (room[a] - taken[a] if b == spare else taken[b])
                for a, b, _g, j in cycle
            )
            if amount <= 0:
                raise PartitionAssignorError("internal error: the rack plan found an empty cycle")
            for a, b, _g, j in cycle:
                if j >= 0:
                    flow[j][a] -= amount
                    if not flow[j][b]:
                        self._held(j, b)
                    flow[j][b] += amount
                elif b == spare:
                    taken[a] += amount
                else:
                    taken[b] -= amount
        raise PartitionAssignorError("internal error: the rack plan did not settle")


_MAX_CYCLES = 1_000_000


def greedy_order(weights: Sequence[Sequence[int]]) -> Order:
    """The types in the order the greedy start visits them, ``(type, its best weight, its first
    best node)`` (-1 without nodes): by best weight, highest first, then in order (the sort is
    stable, also reversed). A function of the weights alone."""
    if not weights or not weights[0]:
        return [(i, 0, -1) for i in range(len(weights))]
    best_of = list(map(max, weights))
    return [
        (i, best_of[i], weights[i].index(best_of[i]))
        for i in sorted(range(len(weights)), key=best_of.__getitem__, reverse=True)
    ]


def _greedy(
    supplies: Sequence[int],
    capacities: Sequence[int],
    weights: Sequence[Sequence[int]],
    extras: int,
    extra_room: Sequence[int],
    order: Order | None = None,
) -> tuple[list[list[int]], list[int], bool]:
    """A feasible start: each type to its best nodes while they have room (their capacity,
    then their share of the extras), types whose best is highest first (``order``, made here
    unless given). Returns the flow, the extras each node took, and whether every unit reached
    a node of its best weight (then nothing can beat it). The C kernel ``_placement.greedy``
    does it where it was built (the incremental ``uniform`` path plans on every change of a
    racked group: 10,000 × 100,000, 10 topics, a leave, about 1.5 µs less); the Python below
    is the reference it is tested against."""
    if _placement is not None:
        placed = _placement.greedy(
            supplies,
            capacities,
            weights,
            extras,
            extra_room,
            greedy_order(weights) if order is None else order,
        )
        if placed is None:
            raise PartitionAssignorError(_CANNOT_PLACE)
        return placed
    nodes = len(capacities)
    room = list(capacities)
    spare = list(extra_room)
    taken = [0] * nodes
    flow = [[0] * nodes for _ in supplies]
    best_everywhere = True
    # Each type's nodes by weight, highest first, then in order (sorts are stable, also
    # reversed); the first of its best nodes is the loop's first.
    for i, best, v in greedy_order(weights) if order is None else order:
        s = supplies[i]
        if not s:
            continue
        row = weights[i]
        placed = flow[i]
        if v >= 0:
            free = room[v]
            if free >= s:  # takes the whole type
                room[v] = free - s
                placed[v] = s
                continue
            more = s - free
            if extras >= more and spare[v] >= more:  # the whole type, with extras
                room[v] = 0
                spare[v] -= more
                extras -= more
                taken[v] += more
                placed[v] = s
                continue
        for v in sorted(range(nodes), key=row.__getitem__, reverse=True):
            free = room[v]
            take = s if s < free else free
            if extras and s > take:  # the node's share of the extras, too
                more = min(s - take, spare[v], extras)
                spare[v] -= more
                extras -= more
                taken[v] += more
                take += more
                free += more
            if take:
                room[v] = free - take
                placed[v] = take
                s -= take
                if row[v] != best:
                    best_everywhere = False
                if not s:
                    break
        if s:
            raise PartitionAssignorError(_CANNOT_PLACE)
    return flow, taken, best_everywhere


_CANNOT_PLACE = "internal error: the rack plan cannot place everything"
