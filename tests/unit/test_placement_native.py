"""The C kernels of rack-aware placement (assignors/_placement.c) against their Python
references in assignors/racks_range.py, racks_uniform.py and plan.py: the same sets (equal, in the same iteration order,
the very current sets and one-index sets given back where the reference gives them back), the
same refusals, and bad arguments refused with an exception, never a crash."""

from __future__ import annotations

import copy
import gc
import hashlib
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import assignors.plan as plan
import assignors.racks_range as racks_range
import assignors.racks_uniform as racks_uniform
from assignors.api import PartitionAssignorError
from assignors.plan import Order, greedy_order
from assignors.racks_range import Indexes, _deal, _tally

native = racks_range._placement
T = TypeVar("T")


def _deal_python(*args: object) -> list[frozenset[int]]:
    """:func:`_deal` without its C kernel: the Python reference."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(racks_range, "_placement", None)
        return _deal(*args)  # type: ignore[arg-type]


def _tally_python(data: bytes) -> dict[int, int]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(racks_range, "_placement", None)
        return _tally(data)


def test_the_kernels_are_built_and_used() -> None:
    """pip builds the extension (setup.py): a tree without it would run the Python references
    silently, at their speed; a build older than its source would test old kernels."""
    assert native is not None
    assert native.__file__.endswith(".so")
    assert _tally(b"\x02\x00\x02") == {0: 1, 2: 2}
    source = Path(racks_range.__file__).with_name("_placement.c").read_bytes()
    assert hashlib.sha256(source).hexdigest() == native.SOURCE, (
        "assignors/_placement.c changed since the module was built: "
        "rebuild it with `.venv/bin/pip install --no-deps -e .`"
    )


@st.composite
def deals(draw: st.DrawFn) -> tuple[bytes, int, int, bytes, int, int, list[frozenset[int]] | None]:
    """A placement to deal: per member its node, the quota and the members of one more, per
    index its node (fitting the members, or one index moved to another node), and maybe current
    sets: some the runs the reference deals, others near them, empty, or not frozensets."""
    stride = draw(st.integers(1, 5))
    members = draw(st.integers(1, 12))
    node = [draw(st.integers(0, stride - 1)) for _ in range(members)]
    quota = draw(st.integers(0, 9))
    extra = draw(st.integers(0 if quota else 1, members))
    need = [0] * stride
    for j, v in enumerate(node):
        need[v] += quota + (j < extra)
    node_of = [v for v in range(stride) for _ in range(need[v])]
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    rng.shuffle(node_of)
    if node_of and stride > 1 and draw(st.booleans()) and draw(st.booleans()):
        i = rng.randrange(len(node_of))
        node_of[i] = (node_of[i] + 1) % stride  # unfit
    current: list[frozenset[int]] | None = None
    if draw(st.booleans()):
        try:
            runs = _deal_python(
                bytes(node), quota, extra, bytes(node_of), stride, Indexes(len(node_of))
            )
        except PartitionAssignorError:
            runs = [frozenset()] * members
        current = []
        for run in runs:
            kind = rng.randrange(5)
            if kind == 0:
                current.append(run)
            elif kind == 1:
                current.append(frozenset(run) | {len(node_of) + 1})
            elif kind == 2:
                current.append(frozenset(list(run)[1:]))
            elif kind == 3:
                current.append(set(run))  # type: ignore[arg-type]  # not a frozenset
            else:
                current.append(frozenset())
        if draw(st.booleans()):
            current = current[: rng.randrange(members + 1)]
    return bytes(node), quota, extra, bytes(node_of), stride, len(node_of), current


def _outcome(call: Callable[[], T]) -> tuple[str, T | str]:
    try:
        return "ok", call()
    except PartitionAssignorError as e:
        return "refused", str(e)


@settings(max_examples=400, deadline=None)
@given(deals())
def test_deal_is_the_python_reference(
    case: tuple[bytes, int, int, bytes, int, int, list[frozenset[int]] | None],
) -> None:
    node, quota, extra, node_of, stride, n, current = case
    indexes = Indexes(n)
    kind, got = _outcome(lambda: _deal(node, quota, extra, node_of, stride, indexes, current))
    kind_ref, want = _outcome(
        lambda: _deal_python(node, quota, extra, node_of, stride, indexes, current)
    )
    assert kind == kind_ref
    if kind == "refused":
        assert got == want
        return
    assert isinstance(got, list) and isinstance(want, list)
    assert got == want
    assert [list(s) for s in got] == [list(s) for s in want]  # made the same way
    assert all(type(s) is frozenset for s in got)
    for j, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        mine_now = current[j] if current is not None and j < len(current) else None
        if theirs is mine_now:
            assert mine is mine_now
        elif len(theirs) == 1:
            assert mine is indexes.ones()[min(theirs)]
        else:
            assert mine is not mine_now


def test_deal_accepts_a_bytearray_and_leaves_its_sets_untracked() -> None:
    """The nodes of the indexes come as bytes or a bytearray (:func:`_nodes_by_order`); the sets
    it makes hold only integers and are not tracked by the garbage collector (they can be in no
    cycle); given-back current sets are as they were."""
    node, node_of = bytes([0, 1, 0]), bytearray([0, 1, 0, 0, 1, 0, 0, 0])
    with pytest.raises(PartitionAssignorError, match="do not fit"):
        _deal(node, 3, 0, node_of, 2, Indexes(8))  # 8 indexes for 9 places
    node_of = bytearray([0, 1, 0, 0, 1, 0, 0, 0, 1])
    dealt = _deal(node, 3, 0, node_of, 2, Indexes(9))
    assert dealt == [frozenset({0, 2, 3}), frozenset({1, 4, 8}), frozenset({5, 6, 7})]
    assert not any(map(gc.is_tracked, dealt))
    tracked = frozenset({0, 2, 3})
    again = _deal(node, 3, 0, node_of, 2, Indexes(9), [tracked, *dealt[1:]])
    assert again[0] is tracked and gc.is_tracked(tracked)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((b"\x00", -1, 0, b"", 1, [], None, None), ValueError),  # negative quota
        ((b"\x00", 1, 2, b"\x00", 1, [0], None, None), ValueError),  # extra > members
        ((b"\x00", 1, 0, b"\x00", 0, [0], None, None), ValueError),  # no node
        ((b"\x00", 1, 0, b"\x00", 257, [0], None, None), ValueError),  # too many nodes
        ((b"\x00", 1, 0, b"\x00\x00", 1, [0], None, None), ValueError),  # indexes short
        ((b"\x00", 1, 0, b"\x00", 1, [0], [], None), ValueError),  # one-index sets short
        ((b"\x00", 1, 0, b"\x00", 1, [0], None, None), ValueError),  # a run of one, no sets
        ((b"\x00", 2, 0, b"\x00\x00", 1, [0, 1], None, (frozenset(),)), ValueError),
        ((b"\x00", 1, 0, b"\x00", 1, (0,), None, None), TypeError),  # indexes not a list
        (("x", 1, 0, b"\x00", 1, [0], None, None), TypeError),  # nodes not bytes
    ],
)
def test_deal_refuses_bad_arguments(args: tuple[object, ...], error: type[Exception]) -> None:
    with pytest.raises(error):
        native.deal(*args)


def test_deal_answers_none_when_a_node_is_out_of_range() -> None:
    """A member in a node past the last, a node whose indexes are not its members', or a
    member with no index (quota 0 past the ``extra`` first: the Python reference has no empty
    runs): None (the caller's internal error), nothing dealt; an index in a node past the last
    is in no node's pool."""
    ones = [frozenset({0}), frozenset({1})]
    assert native.deal(b"\x02", 1, 0, b"\x00", 2, [0], ones, None) is None
    assert native.deal(b"\x00", 1, 0, b"\x00\x01", 2, [0, 1], ones, None) is None
    assert native.deal(b"\x00", 1, 0, b"\x07\x00", 2, [0, 1], ones, None) == [ones[1]]
    assert native.deal(b"\x00\x00", 0, 1, b"\x00", 1, [0], ones, None) is None  # none for one


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_tally_is_the_python_reference(data: bytes) -> None:
    assert _tally(data) == _tally_python(data)
    assert sorted(_tally(data)) == list(_tally(data))  # ascending


def test_the_kernels_hold_no_references() -> None:
    """Repeated calls leave no reference behind on the integers they were given (refcounts
    as before), given back or dealt."""
    indexes = list(range(1000, 1030))
    before = [sys.getrefcount(i) for i in indexes]
    for _ in range(50):
        out = native.deal(bytes(10), 3, 0, bytes(30), 1, indexes, None, None)
        assert out is not None
        assert native.deal(bytes(10), 3, 0, bytes(30), 1, indexes, None, out) == out
        del out
    assert [sys.getrefcount(i) for i in indexes] == before


def _without_kernel(module: object, call: Callable[[], T]) -> tuple[str, T | str]:
    """``call()`` with ``module``'s C kernel turned off (its Python reference), as an outcome."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "_placement", None)
        return _outcome(call)


@st.composite
def plans(draw: st.DrawFn) -> tuple[list[int], list[int], list[list[int]], int, list[int], Order]:
    """A greedy start to make: supplies, capacities, weights, extras and each node's room for
    them (adding up or not), and a visiting order (the usual one, or shuffled)."""
    nodes = draw(st.integers(1, 6))
    types = draw(st.integers(0, 20))
    supplies = draw(st.lists(st.integers(0, 30), min_size=types, max_size=types))
    weights = [draw(st.lists(st.integers(0, 3), min_size=nodes, max_size=nodes)) for _ in supplies]
    extras = draw(st.integers(0, 10))
    room = draw(st.lists(st.integers(0, 5), min_size=nodes, max_size=nodes))
    total = sum(supplies) - extras + draw(st.integers(-2, 2))
    capacities = (
        [total // nodes + (v < total % nodes) for v in range(nodes)] if total > 0 else [0] * nodes
    )
    order = greedy_order(weights)
    if draw(st.booleans()):
        random.Random(draw(st.integers(0, 2**32 - 1))).shuffle(order)
    return supplies, capacities, weights, extras, room, order


@settings(max_examples=400, deadline=None)
@given(plans())
def test_greedy_is_the_python_reference(
    case: tuple[list[int], list[int], list[list[int]], int, list[int], Order],
) -> None:
    """The rack plan's greedy start: the same flow, extras taken and optimality flag, or the
    same refusal (supplies that do not fit)."""
    supplies, capacities, weights, extras, room, order = case

    def start() -> tuple[list[list[int]], list[int], bool]:
        return plan._greedy(supplies, capacities, weights, extras, list(room), order)

    assert _outcome(start) == _without_kernel(plan, start)


def test_greedy_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="another size"):
        native.greedy([1], [1], [[1, 2]], 0, [0], [(0, 1, 0)])
    with pytest.raises(ValueError, match="out of range"):
        native.greedy([1], [1], [[1]], 0, [0], [(1, 1, 0)])
    with pytest.raises(TypeError, match="triples"):
        native.greedy([1], [1], [[1]], 0, [0], [(0, 1)])
    with pytest.raises(TypeError):
        native.greedy([1], [1], [["x"]], 0, [0], [(0, 1, 0)])
    assert native.greedy([2], [1], [[1]], 0, [0], [(0, 1, 0)]) is None  # cannot place it


class _Roster:
    def __init__(self, needs: dict[object, int], held: dict[object, dict[str, frozenset[int]]]):
        self._needs, self._held = needs, held

    def needs(self, members: list[object]) -> list[int]:
        return [self._needs[m] for m in members]

    def assignments(self, members: list[object]) -> list[dict[str, frozenset[int]]]:
        return [self._held[m] for m in members]


@st.composite
def fills(
    draw: st.DrawFn,
) -> tuple[list[object], _Roster, dict[str, set[int]], dict[object, dict[str, frozenset[int]]]]:
    """Members below their count with what they need and hold, what their node received
    (as many partitions as they need, or one more or one less), and some already in ``out``."""
    count = draw(st.integers(1, 8))
    members: list[object] = (
        list(range(count)) if draw(st.booleans()) else [f"m{i}" for i in range(count)]
    )
    topics = [f"t{k}" for k in range(draw(st.integers(1, 4)))]
    needs = {m: draw(st.integers(1, 5)) for m in members}
    held = {
        m: {
            t: frozenset(draw(st.sets(st.integers(100, 140), max_size=4)))
            for t in topics
            if draw(st.booleans())
        }
        for m in members
    }
    total = sum(needs.values()) + draw(st.sampled_from([0, 0, 0, -1, 1]))
    segments: dict[str, set[int]] = {}
    for p in range(max(total, 0)):
        segments.setdefault(draw(st.sampled_from(topics)), set()).add(p)
    out = {m: {topics[0]: frozenset({999})} for m in members if draw(st.integers(0, 4)) == 0}
    return members, _Roster(needs, held), segments, out


@settings(max_examples=400, deadline=None)
@given(fills())
def test_fill_is_the_python_reference(
    case: tuple[
        list[object], _Roster, dict[str, set[int]], dict[object, dict[str, frozenset[int]]]
    ],
) -> None:
    """Members below their count take runs of what their node received: the same new
    assignments (their topics and sets in the same order), their inputs untouched, or the same
    refusal (too little, too much)."""
    members, roster, segments, out = case
    held_before = copy.deepcopy(roster._held)
    settle = SimpleNamespace(roster=roster)
    mine, theirs = copy.deepcopy(out), copy.deepcopy(out)

    def filled(into: dict[object, dict[str, frozenset[int]]]) -> Callable[[], None]:
        return lambda: racks_uniform._ClassSettle._fill(settle, members, segments, into)  # type: ignore[arg-type]

    assert _outcome(filled(mine)) == _without_kernel(racks_uniform, filled(theirs))
    assert mine == theirs
    assert [(m, list(a), [list(s) for s in a.values()]) for m, a in mine.items()] == [
        (m, list(a), [list(s) for s in a.values()]) for m, a in theirs.items()
    ]
    assert roster._held == held_before


def test_fill_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        native.fill(["a"], [], [{}], [("t", [0])], {})
    with pytest.raises(ValueError, match="no pool"):
        native.fill(["a"], [1], [{}], [], {})
    with pytest.raises(TypeError, match="pairs"):
        native.fill(["a"], [1], [{}], [("t", (0,))], {})
    with pytest.raises(TypeError, match="not a dict"):
        native.fill(["a"], [1], [{}], [("t", [0])], {"a": frozenset()})
    assert native.fill(["a"], [2], [{}], [("t", [0])], {}) == 1  # too little
    assert native.fill(["a"], [1], [{}], [("t", [0, 1])], {}) == 2  # too much


def test_the_kernels_survive_python_code_that_changes_their_arguments() -> None:
    """Python code the kernels may run (an object's comparison inside a current set, an
    ``__index__`` among the weights) that changes the arguments mid-call: an exception or the
    answer for the arguments as they were given, never a crash."""

    class Changing:
        def __init__(self, alias: int, victim: list[object]) -> None:
            self.alias, self.victim = alias, victim

        def __hash__(self) -> int:
            return hash(self.alias)

        def __eq__(self, other: object) -> bool:
            self.victim.clear()
            return False

    current: list[object] = []
    current.append(frozenset({Changing(0, current), 1}))
    with pytest.raises(RuntimeError, match="changed during the call"):
        native.deal(b"\x00", 2, 0, b"\x00\x00", 1, [0, 1], None, current)
    assert current == []
    with pytest.raises(TypeError, match="integers"):
        native.deal(b"\x00", 2, 0, b"\x00\x00", 1, [0, "1"], None, None)

    weights: list[list[object]] = [[1, 0], [0, 1]]

    class Index:
        def __index__(self) -> int:
            weights.clear()
            return 1

    weights[0][0] = Index()
    assert native.greedy([2, 2], [2, 2], weights, 0, [0, 0], [(0, 1, 0), (1, 1, 1)]) == (
        [[2, 0], [0, 2]],
        [0, 0],
        True,
    )
