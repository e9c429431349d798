"""The members of one rack-aware settlement of ``uniform`` (:mod:`assignors.racks_uniform`):
how many each node has, their targets once the plan has fixed each node's share of the extra
partitions, and which members end up above or below their target — in member order.

Two ways to know them. :class:`Dense`: every member by index, lists of their loads, targets
and nodes (the whole computation, ``assign``; C-level passes over every member). :class:`Sparse`:
the members of a homogeneous group from the coordinator's target summary, in buckets of sorted
ids by (rack, load) (``TargetSummary.members_by_rack``; the incremental path,
``assign_changes``): targets are worked out from the buckets — which members of a node take
its extra partitions is a selection of the first ids across a few sorted buckets — and only the
members whose target differs from their load, or whose partitions the plan moves, are looked
at one by one. Both give the same members, the same targets, in the same order (member ids
sort as the indexes do)."""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from heapq import merge
from itertools import chain, compress, filterfalse, islice, repeat
from operator import attrgetter, gt, lt, sub
from typing import Any

from assignors.api import MemberSubscription, TopicId
from assignors.racks import ONLY, RackNodes, ones_at

__all__ = ["Dense", "Sparse"]

_ASSIGNMENT = attrgetter("assignment")


class Dense:
    """Every member of a class by index (in member order), ``node_of``, ``target`` (rewritten)
    and ``initial`` loads as lists indexed by member index; ``load``: a working copy of the
    loads; ``whole``: the class is every member (``members`` is ``range(n)``)."""

    def __init__(
        self,
        members: Sequence[int],
        node_of: list[int],
        target: list[int],
        initial: Sequence[int],
        current: Sequence[Mapping[TopicId, frozenset[int]]],
        count: int,
    ) -> None:
        self.members, self.node_of, self.target, self.current = members, node_of, target, current
        self.initial = initial
        self.load: Any = list(initial)
        self.whole = len(members) == len(target)
        self.by_node = _NodeMembers(
            members, node_of if self.whole else list(map(node_of.__getitem__, members)), count
        )
        self.sizes = self.by_node.sizes
        self.total = sum(target) if self.whole else sum(map(target.__getitem__, members))

    def set_targets(self, quota: int, extras: Sequence[int]) -> None:
        """``quota`` each, ``quota + 1`` for ``extras[v]`` members of node v: those holding
        more than ``quota`` first (they then lose nothing), then the others, in member order."""
        target, by_node = self.target, self.by_node
        if self.whole:  # one C-level store for every member's quota
            target[:] = repeat(quota, len(target))
        else:
            _store(target, self.members, quota)
        heavy: list[int] | None = None  # the members holding more than the quota
        for v, extra in enumerate(extras):
            if extra:
                if heavy is None:
                    heavy = self._heavy(quota)
                self._set_extras(v, heavy, partial(by_node.scan, v), quota, extra)

    def _heavy(self, quota: int) -> list[int]:
        """The class's members holding more than ``quota``, in member order (C-level)."""
        load = self.initial
        if self.whole:  # range(n): no lookups
            codes = _as_bytes(load)
            if codes is not None:  # one byte per load: a table says which are above
                return ones_at(codes.translate(bytes(b > quota for b in range(256))))
            return list(compress(range(len(load)), map(quota.__lt__, load)))
        members = self.members
        return list(compress(members, map(quota.__lt__, map(load.__getitem__, members))))

    def _set_extras(
        self,
        node: int,
        heavy: list[int],
        scan: Callable[[], Iterable[int]],
        quota: int,
        extras: int,
    ) -> None:
        node_of = self.node_of
        chosen = list(
            islice(compress(heavy, map(node.__eq__, map(node_of.__getitem__, heavy))), extras)
        )
        if len(chosen) < extras:
            taken = set(chosen)
            chosen += islice(filterfalse(taken.__contains__, scan()), extras - len(chosen))
        _store(self.target, chosen, quota + 1)

    def needs(self, members: Sequence[int]) -> list[int]:
        """Each member's target less its working load (C-level)."""
        return list(
            map(sub, map(self.target.__getitem__, members), map(self.load.__getitem__, members))
        )

    def assignments(self, members: Sequence[int]) -> list[Mapping[TopicId, frozenset[int]]]:
        """Each member's current assignment (C-level)."""
        return list(map(self.current.__getitem__, members))

    def above(self, node: int | None = None) -> list[int]:
        """The members (of ``node``, or all) whose load is above their target (C-level)."""
        members = self.members if node is None else self.by_node.members(node)
        return self._off_target(members, self.target, self.load)

    def node_members(self, node: int) -> set[int]:
        """Node ``node``'s members."""
        return set(self.by_node.members(node))

    def below(self) -> list[int]:
        """The members whose load is below their target (C-level passes)."""
        return self._off_target(self.members, self.load, self.target)

    def below_by_node(self) -> list[list[int]]:
        """:meth:`below` per node, in member order."""
        by_node: list[list[int]] = [[] for _ in self.sizes]
        node_of = self.node_of
        for i in self.below():
            by_node[node_of[i]].append(i)
        return by_node

    def _off_target(
        self, members: Sequence[int], low: Sequence[int], high: Sequence[int]
    ) -> list[int]:
        """The members whose ``low`` is below their ``high`` (target and load, either way)."""
        if members is self.members and self.whole:  # range(n): no lookups
            found = _less(low, high)
            if found is not None:
                return found
            return list(compress(range(len(low)), map(lt, low, high)))
        return list(
            compress(
                members, map(lt, map(low.__getitem__, members), map(high.__getitem__, members))
            )
        )


class Sparse:
    """The members of a homogeneous group from its target summary: ``by_rack`` (rack -> load
    -> the sorted ids of the members of that rack holding that many partitions), ``loads``
    (member id -> load), ``specs`` (member id -> its input). ``target``, ``node_of``,
    ``current`` and ``load`` (the working loads) are looked up member by member, when asked;
    the targets and nodes of the members found above or below their count are written from
    their buckets as they are found (C-level passes over the bucket slices, not one lookup per
    member). The members below their count are found per node, from its buckets and the light
    members it chose to take its extra partitions."""

    def __init__(
        self,
        nodes: RackNodes,
        specs: Mapping[str, MemberSubscription],
        loads: Mapping[str, int],
        by_rack: Mapping[str | None, Mapping[int, Sequence[str]]],
        total: int,
    ) -> None:
        self.specs, self.initial, self.by_rack, self.total = specs, loads, by_rack, total
        # Their attributes set here: no __init__ call each (what they need is in their docs).
        self.node_of = node_of = _NodeOf()
        node_of.specs, node_of.index, node_of.elsewhere = specs, nodes.index, nodes.elsewhere
        self.current = current = _Assignments()
        current.specs = specs
        self.load = load = _Written()
        load.initial, load.written = loads, set()
        # The buckets: (node, rack, load, ids).
        self.buckets: list[tuple[int, str | None, int, Sequence[str]]] = []
        sizes = [0] * nodes.count
        index, elsewhere = node_of.index, nodes.elsewhere
        for rack, by_load in by_rack.items():
            v = index.get(rack, elsewhere)  # type: ignore[arg-type]
            for k, ids in by_load.items():
                if ids:
                    self.buckets.append((v, rack, k, ids))
                    sizes[v] += len(ids)
        self.sizes = sizes
        self.quota = 0
        self.taken: dict[tuple[str | None, int], int] = {}  # bucket -> its first ids taking q + 1
        # Per node, its members holding q or less that take q + 1, in order.
        self.others_of: dict[int, list[str]] = {}
        self.target = target = _Targets()
        target.specs, target.initial, target.by_rack, target.taken = (
            specs,
            loads,
            by_rack,
            self.taken,
        )
        target.quota = 0

    def set_targets(self, quota: int, extras: Sequence[int]) -> None:
        """As :meth:`Dense.set_targets`, from the buckets: the members holding more than
        ``quota`` that take ``quota + 1`` are the first ids across the node's buckets above
        ``quota`` (a prefix of each); the others, the first ids across the rest."""
        self.quota = self.target.quota = quota
        for v, extra in enumerate(extras):
            if not extra:
                continue
            # The node's buckets above the quota and the others (a loop: in Python 3.11 each
            # comprehension is a call of its own).
            heavy: list[tuple[str | None, int, Sequence[str]]] = []
            light: list[Sequence[str]] = []
            for w, r, k, ids in self.buckets:
                if w == v:
                    if k > quota:
                        heavy.append((r, k, ids))
                    else:
                        light.append(ids)
            left = extra
            if heavy:
                taken = _first([ids for _r, _k, ids in heavy], extra)
                for (r, k, _ids), n in zip(heavy, taken, strict=True):
                    if n:
                        self.taken[(r, k)] = n
                left -= sum(taken)
            if left:
                chosen = self.others_of[v] = list(
                    islice(light[0] if len(light) == 1 else merge(*light), left)
                )
                self.target.update(dict.fromkeys(chosen, quota + 1))  # written: none missing

    def needs(self, members: Sequence[str]) -> list[int]:
        """Each member's target less its working load (the summary's, unless written: no
        lookup through ``load``)."""
        loads = map(self.load.get, members, map(self.initial.__getitem__, members))
        return list(map(sub, map(self.target.__getitem__, members), loads))

    def assignments(self, members: Sequence[str]) -> list[Mapping[TopicId, frozenset[int]]]:
        """Each member's current assignment, from its spec (C-level)."""
        return list(map(_ASSIGNMENT, map(self.specs.__getitem__, members)))

    def above(self, node: int | None = None) -> list[str]:
        """The members (of ``node``, or all) whose load is above their target: among those
        holding more than ``quota + 1``, those holding ``quota + 1`` that do not take it, and
        those whose load changed. Their targets are written as they are found (a bucket's first
        ids take ``quota + 1``, the rest ``quota``: C-level, no lookup per member later)."""
        quota, taken, target, node_of = self.quota, self.taken, self.target, self.node_of
        found: list[Iterable[str]] = []
        for v, r, k, ids in self.buckets:
            if k > quota and (node is None or v == node):
                n = taken.get((r, k), 0)
                rest = ids[n:] if n else ids
                found.append(rest)
                target.update(dict.fromkeys(rest, quota))
                node_of.update(dict.fromkeys(rest, v))
                if k > quota + 1 and n:
                    first = ids[:n]
                    found.append(first)
                    target.update(dict.fromkeys(first, quota + 1))
                    node_of.update(dict.fromkeys(first, v))
        if not found and not self.load.written:
            return []
        return self._off_target(found, node, gt)

    def node_members(self, node: int) -> set[str]:
        """Node ``node``'s members, from its buckets."""
        return set(chain.from_iterable(ids for v, _r, _k, ids in self.buckets if v == node))

    def below_by_node(self) -> list[list[str]]:
        """The members whose load is below their target, per node: among those holding less
        than ``quota``, those that take ``quota + 1`` holding less, and those whose load
        changed."""
        quota, changed = self.quota, self.load.written
        found: dict[int, list[Sequence[str]]] = {}
        for v, chosen in self.others_of.items():
            found[v] = [chosen]
        for v, _r, k, ids in self.buckets:
            if k < quota:
                found.setdefault(v, []).append(ids)
        by_node: list[list[str]] = [[]] * len(self.sizes)  # the empty list only read
        for v in range(len(by_node)) if changed else found:
            by_node[v] = self._off_target(found.get(v, ()), v, lt)
        return by_node

    def _off_target(
        self, found: Sequence[Iterable[str]], node: int | None, off: Callable[[int, int], bool]
    ) -> list[str]:
        """In member order: the members of ``found`` whose load is unchanged (they are off
        their target by the buckets they are in: a C-level pass), and those whose load changed
        (of ``node``, if given) when ``off(load, target)``."""
        changed = self.load.written
        if not changed and len(found) == 1:  # one bucket's ids, sorted
            return list(found[0])
        sure = set(chain.from_iterable(found))
        if changed:
            sure.difference_update(changed)
            load, target, node_of = self.load, self.target, self.node_of
            sure.update(
                m
                for m in changed
                if (node is None or node_of[m] == node) and off(load[m], target[m])
            )
        return sorted(sure)


def _as_bytes(values: Sequence[int]) -> bytes | None:
    """``values`` as bytes, or None when some value is not in 0..255."""
    try:
        return bytes(values)
    except ValueError:
        return None


def _less(low: Sequence[int], high: Sequence[int]) -> list[int] | None:
    """The indexes i with ``low[i] < high[i]``, ascending, by C-level passes: both lists as
    bytes, spread into 16-bit lanes of two integers; ``high + 255 - low`` in each lane (no
    borrow: each lane stays within 0..510) reaches the lane's high byte exactly when
    ``low < high``. None when some value is not in 0..255."""
    a, b = _as_bytes(low), _as_bytes(high)
    if a is None or b is None:
        return None
    n = len(a)
    lanes = bytearray(2 * n)
    lanes[::2] = a
    x = int.from_bytes(lanes, "little")
    lanes[::2] = b
    y = int.from_bytes(lanes, "little") + int.from_bytes(b"\xff\x00" * n, "little") - x
    return ones_at(y.to_bytes(2 * n, "little")[1::2])


def _first(lists: Sequence[Sequence[str]], k: int) -> list[int]:
    """How many of each list (sorted, disjoint) are among the ``k`` smallest of them all: a
    binary search per list on the rank of its elements (the number of smaller elements across
    the lists)."""
    sizes = list(map(len, lists))
    if k >= sum(sizes):
        return sizes
    if len(lists) == 1:
        return [k]
    counts = []
    for ids in lists:
        lo, hi = 0, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if sum(bisect_left(other, ids[mid]) for other in lists) < k:
                lo = mid + 1
            else:
                hi = mid
        counts.append(lo)
    return counts


class _Targets(dict[str, int]):
    """Each member's target, worked out from the roster's buckets when first asked (kept):
    ``quota + 1`` for the first ids of a bucket above the quota that the plan's extras take,
    else ``quota`` (the members holding ``quota`` or less that take ``quota + 1`` are written
    when chosen). It holds the roster's parts, not the roster (no reference cycle: the roster
    and the members' inputs it holds are freed by reference counting once the computation
    ends, without waiting for a garbage collection)."""

    __slots__ = ("by_rack", "initial", "quota", "specs", "taken")
    specs: Mapping[str, MemberSubscription]
    initial: Mapping[str, int]
    by_rack: Mapping[str | None, Mapping[int, Sequence[str]]]
    taken: dict[tuple[str | None, int], int]
    quota: int

    def __missing__(self, member: str) -> int:
        quota, k = self.quota, self.initial[member]
        extra = False
        if k > quota:
            rack = self.specs[member].rack_id
            n = self.taken.get((rack, k), 0)
            extra = bool(n) and bisect_left(self.by_rack[rack][k], member) < n
        value = self[member] = quota + 1 if extra else quota
        return value


class _Assignments(dict[str, Mapping[TopicId, frozenset[int]]]):
    """Each member's assignment from its spec, kept when first asked."""

    __slots__ = ("specs",)
    specs: Mapping[str, MemberSubscription]

    def __missing__(self, key: str) -> Mapping[TopicId, frozenset[int]]:
        value = self[key] = self.specs[key].assignment
        return value


class _NodeOf(dict[str, int]):
    """Each member's node from its spec's rack, kept when first asked."""

    __slots__ = ("elsewhere", "index", "specs")
    specs: Mapping[str, MemberSubscription]
    index: dict[str, int]
    elsewhere: int

    def __missing__(self, key: str) -> int:
        value = self[key] = self.index.get(self.specs[key].rack_id, self.elsewhere)  # type: ignore[arg-type]
        return value


class _Written(dict[str, int]):
    """The working loads: the summary's, until written; ``written``: the members written."""

    __slots__ = ("initial", "written")
    initial: Mapping[str, int]
    written: set[str]

    def __missing__(self, key: str) -> int:
        value = self.initial[key]
        dict.__setitem__(self, key, value)  # kept, not counted as written
        return value

    def __setitem__(self, key: str, value: int) -> None:
        self.written.add(key)
        super().__setitem__(key, value)


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
        return compress(self._members, codes.translate(ONLY[v]))

    def members(self, v: int) -> list[int]:
        """Node v's members, in member order."""
        found = self._lists.get(v)
        if found is None:
            found = self._lists[v] = list(self.scan(v))
        return found


def _store(values: list[int], indexes: Iterable[int], value: int) -> None:
    """``values[i] = value`` for every i of ``indexes`` (a C-level pass)."""
    deque(map(values.__setitem__, indexes, repeat(value)), maxlen=0)
