"""The members' loads (how many partitions each holds) from their assignments, by C-level
passes: what ``uniform`` needs of every member before it places anything."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate, chain, compress, repeat
from operator import itemgetter, methodcaller, ne, sub

from assignors.api import TopicId
from assignors.racks import ones_at

__all__ = ["member_loads"]

_values = methodcaller("values")


def member_loads(assignments: Sequence[Mapping[TopicId, frozenset[int]]]) -> list[int] | None:
    """Each member's number of partitions, or None if some member holds an empty set.
    (C-level passes: the sizes of all sets in one list, summed per member through prefix sums.)"""
    try:  # dict.values is several times cheaper than a methodcaller (the coordinator's dicts)
        sizes = list(map(len, chain.from_iterable(map(dict.values, assignments))))  # type: ignore[arg-type]
    except TypeError:  # some other Mapping
        sizes = list(map(len, chain.from_iterable(map(_values, assignments))))
    if 0 in sizes:
        return None
    topics = list(map(len, assignments))
    ones = topics.count(1)
    if ones == len(topics):  # one topic each (the usual case with few topics)
        return sizes
    if len(topics) == 1:
        return [sum(sizes)]
    if ones * 8 >= len(topics) * 7:
        # Nearly one topic each (a rack-aware target, some members across two topics): runs
        # of single-topic members are slices of the sizes; the others are summed.
        loads: list[int] = []
        at = done = 0
        for i in _not_one(topics):
            loads += sizes[at : at + i - done]
            at += i - done
            k = topics[i]
            loads.append(sum(sizes[at : at + k]))
            at += k
            done = i + 1
        loads += sizes[at:]
        return loads
    # Prefix sums of the sizes, read at each member's end (one itemgetter) and subtracted.
    prefix = [0, *accumulate(sizes)]
    at_ends = itemgetter(*accumulate(topics))(prefix)
    return list(map(sub, at_ends, chain((0,), at_ends)))


_NOT_ONE = bytes(b != 1 for b in range(256))


def _not_one(counts: list[int]) -> Iterable[int]:
    """The positions of the counts other than 1, ascending (through a bytes object when every
    count fits a byte)."""
    try:
        return ones_at(bytes(counts).translate(_NOT_ONE))
    except ValueError:  # some count above 255
        return compress(range(len(counts)), map(ne, counts, repeat(1)))
