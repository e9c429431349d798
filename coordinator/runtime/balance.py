"""Which node should lead each coordinator partition: spread evenly over the live nodes, moved
a few at a time. Pure and deterministic (the controller node runs it on what PostgreSQL says;
docs/ha.md "Who leads what").

Rules, in order:

1. A partition whose target is a live node keeps it (moving a partition costs its groups a
   fail-over's worth of NOT_COORDINATOR and a load); so does one whose target is a node
   expected back (``returning``: its registration ran out while the controller could not
   reach PostgreSQL either, as in an outage of PostgreSQL, so it is given the time to come
   back and take its own partitions again rather than have them moved twice).
2. A partition without a target, or whose target is neither live nor expected back, gets the
   live node with the fewest partitions (its current leader if that one is live and among the
   fewest; ties: the lowest node id). Such a partition is down until someone loads it, so
   there is no limit.
3. While the most loaded node has two partitions more than the least loaded one, one of its
   partitions moves there — at most ``max_moving`` partitions in motion at once (a partition
   is in motion while its target is a live node other than its live leader), so the rest keep
   serving while a few are handed over. A partition an operator moved (``pinned``) is never
   moved by the balancer, unless its node is gone. In the end every node has ``floor(P/n)`` or
   ``ceil(P/n)`` partitions. Nothing is moved so while a node is expected back: the load
   evens out once it is back or given up.

Who is expected back is the node's to decide (``coordinator/cluster/node.py``): the nodes whose
registration ran out during an outage of PostgreSQL, and, while a node starts, the nodes the
partitions are still targeted at (:func:`awaited`): when a whole cluster starts again, the
first node up keeps each partition for the node that led it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Placement", "awaited", "balance"]


@dataclass(frozen=True, slots=True)
class Placement:
    """One partition as the balancer sees it."""

    leader: int | None
    """The node holding its lease now (None: nobody, or an expired lease)."""
    target: int | None
    """The node that should lead it (None: not decided yet)."""
    pinned: bool = False
    """Put there by an operator (``kip848 cluster move``)."""


def balance(
    placements: Sequence[Placement],
    live: Sequence[int],
    *,
    max_moving: int = 2,
    returning: Collection[int] = (),
) -> list[int | None]:
    """The new target of every partition (index = partition). ``live``: the node ids that may
    lead; ``returning``: nodes not live but expected back (rules 1 and 3). With no live node
    every target is kept (nothing to decide)."""
    if not live:
        return [p.target for p in placements]
    nodes = sorted(set(live))
    alive = set(nodes)
    kept = alive | set(returning)
    targets: list[int | None] = [p.target if p.target in kept else None for p in placements]
    load = dict.fromkeys(nodes, 0)
    for t in targets:
        if t in load:
            load[t] += 1

    def fewest(prefer: int | None) -> int:
        low = min(load.values())
        if prefer in alive and load[prefer] == low:
            return prefer
        return min(n for n in nodes if load[n] == low)

    for p, placement in enumerate(placements):  # rule 2
        if targets[p] is None:
            node = fewest(placement.leader)
            targets[p] = node
            load[node] += 1
    if kept != alive:
        return targets  # rule 3 waits for the nodes expected back

    def moving() -> int:
        return sum(
            1
            for p, placement in enumerate(placements)
            if placement.leader in alive and targets[p] != placement.leader
        )

    in_motion = moving()
    for _ in range(len(placements)):  # rule 3; each pass moves one partition
        if in_motion >= max_moving:
            break
        src = max(nodes, key=lambda n: (load[n], -n))
        dst = min(nodes, key=lambda n: (load[n], n))
        if load[src] - load[dst] < 2:
            break
        movable = [
            p
            for p, placement in enumerate(placements)
            if targets[p] == src and not placement.pinned
        ]
        if not movable:
            break
        # Prefer one its node does not lead yet (nothing to hand over), then the highest number.
        p = max(movable, key=lambda q: (placements[q].leader != src, q))
        targets[p] = dst
        load[src] -= 1
        load[dst] += 1
        in_motion = moving()
    return targets


def awaited(placements: Sequence[Placement], live: Collection[int]) -> set[int]:
    """The nodes some partition is targeted at that are not live: when a whole cluster starts
    again, the nodes that led the partitions before, not back yet (a node that left for good
    was given up and its partitions targeted elsewhere before; a fresh store targets none)."""
    return {p.target for p in placements if p.target is not None and p.target not in live}


def counts(targets: Sequence[int | None], live: Sequence[int]) -> Mapping[int, int]:
    """Partitions per live node (for logs and ``kip848 cluster describe``)."""
    out = dict.fromkeys(sorted(set(live)), 0)
    for t in targets:
        if t in out:
            out[t] += 1
    return out
