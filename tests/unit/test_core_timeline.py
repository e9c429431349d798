"""UndoLog / TDict: every logged write can be undone exactly (coordinator/core/timeline.py)."""

from __future__ import annotations

import copy
import gc
import weakref
from typing import Any

import pytest
from builders import commit, join
from hypothesis import given, settings
from hypothesis import strategies as st

from assignors.uniform import UniformAssignor
from coordinator.core.commands import SequentialIds
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import IllegalStateError
from coordinator.core.timeline import TDict, UndoLog
from coordinator.core.topics import NewTopic, TopicRegistry
from coordinator.factory import new_shard


class Box:
    __slots__ = ("a", "b")

    def __init__(self) -> None:
        self.a = 1
        self.b = "x"


def plain(d: Any) -> Any:
    """A TDict tree as plain dicts (for exact comparisons)."""
    if isinstance(d, dict):
        return {k: plain(v) for k, v in d.items()}
    return d


def test_rollback_restores_sets_overwrites_deletes_and_re_adds() -> None:
    log = UndoLog()
    d = log.new_dict()
    d["keep"] = 1
    d["gone"] = 2
    d["changed"] = 3
    log.release(log.mark())
    assert len(log) == 0

    m = log.mark()
    d["changed"] = 30
    d["changed"] = 300
    del d["gone"]
    d["new"] = 4
    d["gone"] = 22  # re-added with another value
    del d["new"]
    d["new"] = 5
    d.discard("keep")
    d.discard("absent")  # no-op, not logged
    d.increment("counter", 2)
    d.increment("counter", -2)  # reaches zero: removed
    assert plain(d) == {"changed": 300, "gone": 22, "new": 5}
    log.rollback(m)
    assert plain(d) == {"keep": 1, "gone": 2, "changed": 3}
    assert len(log) == 0


def test_rollback_restores_nested_dicts_and_attributes() -> None:
    log = UndoLog()
    outer = log.new_dict()
    inner = TDict(log)
    inner[1] = "m1"
    outer["t"] = inner
    box = Box()
    log.release(log.mark())
    before = (plain(outer), box.a, box.b)

    m = log.mark()
    outer["t"][1] = "m2"
    outer["t"][2] = "m3"
    fresh = TDict(log)
    fresh[0] = "z"
    outer["u"] = fresh
    del outer["t"][1]
    log.set_attr(box, "a", 2)
    log.set_attr(box, "a", 3)
    log.set_attr(box, "b", None)
    del outer["t"]
    assert plain(outer) == {"u": {0: "z"}}
    assert (box.a, box.b) == (3, None)

    log.rollback(m)
    assert (plain(outer), box.a, box.b) == before
    assert outer["t"] is inner  # the same object is back, not a copy


def test_rollback_to_an_intermediate_mark() -> None:
    log = UndoLog()
    d = log.new_dict()
    d["a"] = 1
    m1 = log.mark()
    d["b"] = 2
    m2 = log.mark()
    d["c"] = 3
    d["a"] = 10
    log.rollback(m2)
    assert plain(d) == {"a": 1, "b": 2}
    log.rollback(m1)
    assert plain(d) == {"a": 1}
    log.rollback(0)
    assert plain(d) == {}
    assert log.mark() == 0


def test_marks_are_absolute_across_release() -> None:
    log = UndoLog()
    d = log.new_dict()
    d["a"] = 1
    d["b"] = 2
    assert log.mark() == 2
    log.release(1)  # forget the first entry only
    assert len(log) == 1
    assert log.mark() == 2
    d["c"] = 3
    m = log.mark()
    assert m == 3
    d["c"] = 4
    log.rollback(m)
    assert d["c"] == 3
    log.rollback(1)  # still possible: released only up to 1
    assert plain(d) == {"a": 1}


def test_release_then_rollback_to_an_older_mark_raises() -> None:
    log = UndoLog()
    d = log.new_dict()
    old = log.mark()
    d["a"] = 1
    d["b"] = 2
    log.release(log.mark())
    with pytest.raises(ValueError, match=r"cannot roll back to 0: released up to 2"):
        log.rollback(old)
    assert plain(d) == {"a": 1, "b": 2}  # nothing was undone
    log.rollback(log.mark())  # the current mark is fine
    assert plain(d) == {"a": 1, "b": 2}


def test_release_beyond_the_log_is_clamped() -> None:
    log = UndoLog()
    d = log.new_dict()
    d["a"] = 1
    log.release(10)
    assert len(log) == 0
    assert log.mark() == 1
    log.release(0)  # older than the base: nothing to do
    assert log.mark() == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda d: d.pop("a"),
        lambda d: d.pop("zz", None),
        lambda d: d.popitem(),
        lambda d: d.setdefault("b", 2),
        lambda d: d.update({"b": 2}),
        lambda d: d.update(b=2),
        lambda d: d.clear(),
    ],
    ids=["pop", "pop_default", "popitem", "setdefault", "update", "update_kwargs", "clear"],
)
def test_forbidden_mutators_raise_and_change_nothing(call: Any) -> None:
    log = UndoLog()
    d = log.new_dict()
    d["a"] = 1
    n = len(log)
    with pytest.raises(TypeError, match="TDict: use item assignment, del, discard or increment"):
        call(d)
    assert plain(d) == {"a": 1}
    assert len(log) == n


def test_in_place_union_cannot_bypass_the_log() -> None:
    """``d |= other`` is a mutator too: it must either be refused like ``update`` or be undone
    by a rollback. It must never change a TDict silently behind the log's back."""
    log = UndoLog()
    d = log.new_dict()
    d["a"] = 1
    m = log.mark()
    try:
        d |= {"a": 2, "b": 3}
    except TypeError:
        assert plain(d) == {"a": 1}
        return
    log.rollback(m)
    assert plain(d) == {"a": 1}


def test_deleting_a_missing_key_raises_and_logs_nothing() -> None:
    log = UndoLog()
    d = log.new_dict()
    with pytest.raises(KeyError):
        del d["nope"]
    assert len(log) == 0


def test_reads_are_plain_dict_reads() -> None:
    log = UndoLog()
    d = log.new_dict()
    d["a"] = 1
    assert d.get("a") == 1 and d.get("b") is None and "a" in d and len(d) == 1
    assert dict(d) == {"a": 1} and list(d.items()) == [("a", 1)]
    assert isinstance(d, dict)
    assert len(log) == 1  # reads log nothing


def test_disabled_log_records_nothing() -> None:
    log = UndoLog()
    d = log.new_dict()
    box = Box()
    log.enabled = False
    d["a"] = 1
    d["a"] = 2
    d["b"] = 3
    del d["b"]
    d.increment("c", 1)
    d.discard("c")
    log.set_attr(box, "a", 5)
    assert len(log) == 0
    assert log.mark() == 0
    assert plain(d) == {"a": 2}
    assert box.a == 5
    log.rollback(0)  # nothing to undo
    assert plain(d) == {"a": 2} and box.a == 5
    log.enabled = True
    d["a"] = 9
    log.rollback(0)
    assert plain(d) == {"a": 2}


# ------------------------------------------------------------------------ property

KEYS = st.sampled_from(["a", "b", "c", "d"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers(-3, 3)),
        st.tuples(st.just("del"), KEYS, st.just(0)),
        st.tuples(st.just("inc"), KEYS, st.integers(-2, 2)),
        st.tuples(st.just("nested"), KEYS, st.integers(0, 3)),
        st.tuples(st.just("attr"), st.just("a"), st.integers(0, 9)),
        st.tuples(st.just("mark"), st.just(""), st.just(0)),
    ),
    max_size=40,
)


def apply_ops(log: UndoLog, d: TDict, box: Box, ops: list[tuple[str, str, int]]) -> list[Any]:
    """Run ``ops`` on ``d`` and ``box``; the (mark, state, attribute) at each "mark" op, at the
    start and at the end."""
    states: list[tuple[int, Any, int]] = [(log.mark(), copy.deepcopy(plain(d)), box.a)]
    for op, key, value in ops:
        if op == "set":
            d[key] = value
        elif op == "del":
            d.discard(key)
        elif op == "inc":
            if not isinstance(d.get(key, 0), int):
                continue
            d.increment(key, value)
        elif op == "nested":
            inner = d.get(key)
            if not isinstance(inner, TDict):
                inner = TDict(log)
                d[key] = inner
            inner[value] = value
        elif op == "attr":
            log.set_attr(box, "a", value)
        else:
            states.append((log.mark(), copy.deepcopy(plain(d)), box.a))
    states.append((log.mark(), copy.deepcopy(plain(d)), box.a))
    return states


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(OPS, st.data())
def test_rollback_to_any_mark_restores_the_state_at_that_mark(
    ops: list[tuple[str, str, int]], data: Any
) -> None:
    log = UndoLog()
    d = log.new_dict()
    box = Box()
    states = apply_ops(log, d, box, ops)
    # Roll back to marks in decreasing order, checking each state exactly.
    picks = sorted(
        set(data.draw(st.lists(st.sampled_from(range(len(states))), min_size=1, max_size=4))),
        reverse=True,
    )
    for i in picks:
        mark, state, attr = states[i]
        log.rollback(mark)
        assert plain(d) == state
        assert box.a == attr
        assert log.mark() == mark


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(OPS, st.data())
def test_as_of_any_mark_reads_the_state_at_that_mark_and_changes_nothing(
    ops: list[tuple[str, str, int]], data: Any
) -> None:
    """A read as of a mark (the driver's committed reads) sees exactly the state at the mark;
    afterwards the state, the log and every later rollback are as if it never ran, even when
    the read itself logged writes (a derived cache)."""
    log = UndoLog()
    d = log.new_dict()
    box = Box()
    states = apply_ops(log, d, box, ops)
    end = log.mark()
    picks = data.draw(st.lists(st.sampled_from(range(len(states))), min_size=1, max_size=4))
    for i in picks:
        mark, state, attr = states[i]

        def read() -> tuple[Any, int]:
            seen = (copy.deepcopy(plain(d)), box.a)
            d["scratch"] = 1  # logged by the read: undone with the rest
            log.set_attr(box, "a", -1)
            return seen

        assert log.as_of(mark, read) == (state, attr)
        assert (plain(d), box.a, log.mark()) == (states[-1][1], states[-1][2], end)
    for mark, state, attr in reversed(states):  # the log undoes as before
        log.rollback(mark)
        assert (plain(d), box.a) == (state, attr)


def test_as_of_a_released_mark_raises_and_an_error_in_the_read_restores() -> None:
    log = UndoLog()
    d = log.new_dict()
    d["a"] = 1
    log.release(log.mark())
    d["a"] = 2
    with pytest.raises(ValueError, match="released"):
        log.as_of(0, lambda: None)

    def failing() -> None:
        assert plain(d) == {"a": 1}
        raise KeyError("read failed")

    with pytest.raises(KeyError):
        log.as_of(1, failing)
    assert plain(d) == {"a": 2}
    log.rollback(1)
    assert plain(d) == {"a": 1}


def test_build_member_equals_the_dataclass_constructor() -> None:
    from dataclasses import fields

    from coordinator.core.model import (
        ClassicMemberMetadata,
        ConsumerGroupMember,
        MemberState,
        build_member,
    )

    kwargs = dict(
        member_id="m",
        instance_id="i",
        rack_id="r",
        client_id="c",
        client_host="/h",
        subscribed_topic_names=("a", "b"),
        subscribed_topic_regex="x.*",
        server_assignor_name="range",
        rebalance_timeout_ms=7,
        classic_member_metadata=ClassicMemberMetadata(session_timeout_ms=9),
        member_epoch=3,
        previous_member_epoch=2,
        state=MemberState.UNREVOKED_PARTITIONS,
        assigned_partitions={"t": frozenset({1})},
        partitions_pending_revocation={"t": frozenset({2})},
        assignment_epochs={1: {"t": frozenset({1})}, 3: {"t": frozenset({2})}},
    )
    assert [f.name for f in fields(ConsumerGroupMember)] == list(
        kwargs
    )  # same order as build_member
    built = build_member(*kwargs.values())
    assert built == ConsumerGroupMember(**kwargs)
    assert hash(built.member_id) == hash("m") and built.state is MemberState.UNREVOKED_PARTITIONS


def test_codec_fast_value_constructors_equal_the_dataclass_constructors() -> None:
    from coordinator.core import codec
    from coordinator.core import records as r

    for epochs in (None, {2: {"t": frozenset({1})}}):
        assert codec._current_assignment(
            3, 2, 1, {"t": frozenset({1})}, {}, epochs
        ) == r.ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=3,
            previous_member_epoch=2,
            state=1,
            assigned_partitions={"t": frozenset({1})},
            partitions_pending_revocation={},
            assignment_epochs=epochs,
        )
    assert codec._member_metadata(
        "i", "r", "c", "h", ("a",), "x", 5, "range", None
    ) == r.ConsumerGroupMemberMetadataValue(
        instance_id="i",
        rack_id="r",
        client_id="c",
        client_host="h",
        subscribed_topic_names=("a",),
        subscribed_topic_regex="x",
        rebalance_timeout_ms=5,
        server_assignor="range",
        classic_member_metadata=None,
    )


def test_a_closed_shard_applies_nothing_and_its_state_goes_by_reference_counting() -> None:
    """A dropped partition's shard, closed: a command that would change it raises (its state
    must not be used after the drop), its undo log is emptied; ``free(n)`` throws away ``n``
    groups' worth a call (consumer groups, then offsets, each counting its members or
    offsets) and, once none is left, cuts the references between its parts, so that with no
    cyclic collection at all nothing of it stays alive."""
    ids = SequentialIds()
    registry = TopicRegistry(ids)
    registry.create_topics([NewTopic(name="t", num_partitions=4)])
    shard = new_shard(config=GroupCoordinatorConfig(), assignors=[UniformAssignor()], ids=ids)
    shard.set_topics(registry.image())
    for i in range(10):
        joined = shard.consumer_group_heartbeat(join(f"g{i}", member_id="m"), 0).response
        assert joined is not None
        shard.offset_commit(commit(f"g{i}", {("t", 0): i}, joined.member_epoch, "m"), 0)
    assert len(shard.undo) > 0  # not released: as in a batch still in flight
    with pytest.raises(IllegalStateError, match="not closed"):
        shard.free(1)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        refs = [weakref.ref(x) for x in (shard, shard.undo, shard.groups, shard.classic_groups)]
        refs += [weakref.ref(shard.groups[g]) for g in shard.groups]
        shard.close()
        assert len(shard.undo) == 0
        with pytest.raises(IllegalStateError, match="dropped coordinator partition"):
            shard.consumer_group_heartbeat(join("new", member_id="n"), 0)
        assert shard.describe_group("g0") is not None  # still readable until freed
        done = [shard.free(4) for _ in range(10)]
        # 10 groups of one member, 10 of one offset: each weighs 2, so 2 go a call
        assert done == [False] * 9 + [True]
        with pytest.raises(AttributeError):
            shard.groups.describe_group("g0")  # taken apart
        del shard
        assert [ref() for ref in refs] == [None] * len(refs)
    finally:
        if gc_was_enabled:
            gc.enable()
