"""Step 2 of ``uniform`` for groups of several classes: how many partitions of each topic each
class of members gets (:mod:`assignors.uniform` "Theory of operation"). Pure arithmetic on
class-level shares; nothing here looks at a partition or a member.

A :class:`Split` holds the shares being balanced: ``balance_topics`` re-splits single topics
whose most-loaded holder class is two or more partitions per member above its least-loaded
subscriber class (each re-split strictly lowers the sum of squared member loads, so the passes
converge), and ``shift_chains`` moves partitions along chains of topics when that narrows the
gap (the overlapping 9/10/11 layouts single-topic balancing cannot fix). ``water_level`` and
``fit`` are the one-topic split both use, and the first water-filling of the free partitions.
"""

from __future__ import annotations

from assignors.api import PartitionAssignorError, TopicId

__all__ = ["MAX_BALANCE_ROUNDS", "Split", "fit", "water_level"]

MAX_BALANCE_PASSES = 64
"""Upper bound on the passes over the shared topics in one round of single-topic balancing."""
MAX_BALANCE_ROUNDS = 16
"""Upper bound on the rounds of (single-topic balancing, chain shifts)."""
MAX_CHAIN_SHIFTS = 256
"""Upper bound on the chain shifts per round; each costs one search of the subscription graph."""
WORK_PER_INCIDENCE = 64
"""Balancing work allowed per (class, subscribed topic) pair; see :class:`_Split`."""


class Split:
    """The class-level split being balanced: ``share[k][t]`` partitions of topic t go to class k
    (``size[k]`` members, ``total[k]`` partitions in all). Member loads within a class differ by
    at most one, so class k's members carry ``total[k] // size[k]`` or one more.

    All balancing work is charged to ``budget`` (in units of one class-topic incidence visited),
    :data:`WORK_PER_INCIDENCE` times the size of the subscription graph: an adversarial group
    ends up slightly less balanced rather than slow. Typical groups use a small fraction."""

    def __init__(
        self,
        size: list[int],
        total: list[int],
        share: list[dict[TopicId, int]],
        subscribers: dict[TopicId, list[int]],
        counts: dict[TopicId, int],
        subscriptions: list[frozenset[TopicId]],
    ) -> None:
        self.size, self.total, self.share = size, total, share
        self.subscribers, self.counts = subscribers, counts
        self.class_topics = [sorted(t for t in sub if t in counts) for sub in subscriptions]
        incidences = sum(len(ks) for ks in subscribers.values())
        self.budget = WORK_PER_INCIDENCE * incidences + 10_000

    def balance_topics(self, shared: list[TopicId]) -> None:
        """Re-split each topic whose most-loaded holder class carries 2+ more per member than its
        least-loaded subscriber class, keeping every class as close to its share as the optimal
        split allows. Each re-split strictly lowers the sum of squared member loads."""
        size, total, share, counts = self.size, self.total, self.share, self.counts
        for _ in range(MAX_BALANCE_PASSES):
            changed = False
            for t in shared:
                ks = self.subscribers[t]
                self.budget -= len(ks)
                if self.budget < 0:
                    return
                floor = min(total[k] // size[k] for k in ks)
                ceiling = max((-(-total[k] // size[k]) for k in ks if share[k].get(t)), default=0)
                if ceiling - floor <= 1:
                    continue
                now = [share[k].get(t, 0) for k in ks]
                base = [total[k] - x for k, x in zip(ks, now, strict=False)]
                level = water_level([size[k] for k in ks], base, counts[t])
                low = [max(0, level * size[k] - b) for k, b in zip(ks, base, strict=False)]
                high = [max(0, (level + 1) * size[k] - b) for k, b in zip(ks, base, strict=False)]
                start = [min(max(x, lo), hi) for x, lo, hi in zip(now, low, high, strict=False)]
                new = fit(start, low, high, counts[t])
                if new != now:
                    changed = True
                    for k, b, x in zip(ks, base, new, strict=False):
                        share[k][t] = x
                        total[k] = b + x
            if not changed:
                return

    def shift_chains(self) -> bool:
        """Move partitions along chains "class a gives topic t to class b, b gives topic u to
        class c, ..." from a heavy class to a class two or more partitions per member lighter
        (the 9/10/11 case single-topic balancing cannot see). Returns True if anything moved."""
        size, total, share = self.size, self.total, self.share
        moved = False
        for _ in range(MAX_CHAIN_SHIFTS):
            path = self._find_chain()
            if path is None:
                return moved
            source, target, edges = path
            gap = total[source] * size[target] - total[target] * size[source]
            # Half of what would equalise the two classes: never overshoots.
            step = max(1, gap // (2 * (size[source] + size[target])))
            step = min([step] + [share[k][t] for k, t, _ in edges])
            for k, t, to in edges:
                share[k][t] -= step
                share[to][t] = share[to].get(t, 0) + step
            total[source] -= step
            total[target] += step
            moved = True
        return moved

    def _find_chain(self) -> tuple[int, int, list[tuple[int, TopicId, int]]] | None:
        """A chain from a heavy class to one 2+ partitions per member lighter, or None.

        Sources are tried heaviest first and share one visited set: a class already reached
        from a heavier source leads nowhere useful for a lighter one (everything beyond it was
        explored and found too heavy), so the whole search visits each edge once."""
        size, total, share = self.size, self.total, self.share
        classes = range(len(size))
        floors = [total[k] // size[k] for k in classes]
        lowest = min(floors)
        sources = sorted((-(-total[k] // size[k]), k) for k in classes if total[k])
        parent: dict[int, tuple[int, TopicId]] = {}
        expanded: set[TopicId] = set()
        for ceiling, source in reversed(sources):
            if ceiling - lowest < 2 or self.budget < 0:
                return None
            if source in parent:
                continue
            parent[source] = (source, "")
            frontier = [source]
            best = source
            while frontier:
                following: list[int] = []
                for k in frontier:
                    for t in self.class_topics[k]:
                        if t in expanded or not share[k].get(t):
                            continue
                        expanded.add(t)
                        subscribers = self.subscribers[t]
                        self.budget -= len(subscribers)
                        for other in subscribers:
                            if other not in parent:
                                parent[other] = (k, t)
                                following.append(other)
                                if floors[other] < floors[best]:
                                    best = other
                    self.budget -= len(self.class_topics[k])
                frontier = following
            if ceiling - floors[best] >= 2:
                edges: list[tuple[int, TopicId, int]] = []
                k = best
                while k != source:
                    previous, t = parent[k]
                    edges.append((previous, t, k))
                    k = previous
                edges.reverse()
                return source, best, edges
        return None


def water_level(sizes: list[int], loads: list[int], units: int) -> int:
    """The highest level L such that raising every member of the given classes (``sizes[j]``
    members holding ``loads[j]`` partitions in all, spread evenly) to at least L partitions takes
    no more than ``units`` partitions."""

    def need(level: int) -> int:
        return sum(max(0, level * n - b) for n, b in zip(sizes, loads, strict=False))

    low = min(b // n for n, b in zip(sizes, loads, strict=False))  # need(low) == 0
    high = (units + sum(loads)) // sum(sizes) + 1  # need(high) > units
    while high - low > 1:
        mid = (low + high) // 2
        if need(mid) <= units:
            low = mid
        else:
            high = mid
    return low


def fit(start: list[int], low: list[int], high: list[int], total: int) -> list[int]:
    """Adjust ``start`` (already within [low, high]) so that it sums to ``total``, changing the
    earliest classes first."""
    out = list(start)
    gap = total - sum(out)
    if gap > 0:
        for j, (x, hi) in enumerate(zip(out, high, strict=False)):
            step = min(gap, hi - x)
            if step > 0:
                out[j] = x + step
                gap -= step
                if not gap:
                    break
    elif gap < 0:
        for j, (x, lo) in enumerate(zip(out, low, strict=False)):
            step = min(-gap, x - lo)
            if step > 0:
                out[j] = x - step
                gap += step
                if not gap:
                    break
    if gap:
        raise PartitionAssignorError("internal error: cannot split a topic among its subscribers")
    return out
