"""The server's event loop: both kinds run a coroutine, with the server's GIL switch interval
and the cyclic garbage collector run between its callbacks (coordinator/runtime/collector.py)."""

from __future__ import annotations

import asyncio
import gc
import sys
import weakref

import pytest

from coordinator.runtime import collector
from coordinator.server.loop import LOOPS, SWITCH_INTERVAL_S, run


@pytest.mark.parametrize("kind", LOOPS)
def test_a_server_loop_runs_with_the_short_switch_interval(kind: str) -> None:
    before = sys.getswitchinterval()

    async def seen() -> float:
        return sys.getswitchinterval()

    try:
        assert run(seen(), kind) == pytest.approx(SWITCH_INTERVAL_S)
    finally:
        sys.setswitchinterval(before)
    assert SWITCH_INTERVAL_S < 0.005  # shorter than CPython's default


def test_an_unknown_loop_is_refused() -> None:
    async def nothing() -> None:
        return None

    coro = nothing()
    with pytest.raises(ValueError, match="unknown event loop 'tokio'"):
        run(coro, "tokio")
    coro.close()


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: tracked by the collector, freed only by it


def test_a_server_loop_collects_between_callbacks_never_inside_one() -> None:
    """The cyclic collector runs on the loop's ticks: a callback that allocates a great many
    objects is not interrupted by a collection (CPython's own collector would run hundreds of
    times inside it), and the garbage cycles it left are collected by a later tick."""
    seen: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    async def scenario() -> tuple[bool, int, int, bool]:
        enabled = gc.isenabled()
        seen.clear()
        garbage = weakref.WeakSet(Node() for _ in range(200_000))  # cycles, garbage at once
        during = len(seen)
        for _ in range(200):  # bounded: 2 s of ticks
            if not garbage:
                break
            await asyncio.sleep(0.01)
        return enabled, during, len(seen), not garbage

    gc.callbacks.append(record)
    try:
        enabled, during, after, collected = run(scenario(), "asyncio")
    finally:
        gc.callbacks.remove(record)
    assert not enabled  # CPython's automatic collector is off inside
    assert during == 0  # nothing collected while the callback ran
    assert after >= 1 and collected  # ... a tick collected its garbage
    assert gc.isenabled()  # and it is back on outside


def test_what_survives_a_full_collection_is_frozen_and_a_big_state_change_frozen_at_once() -> None:
    """What survives the loop's full collections is frozen (later collections skip it); state
    built in bulk between ``collect_all`` and ``freeze_new`` is frozen without being scanned;
    without a server loop both do nothing."""

    async def scenario() -> tuple[int, int]:
        kept = [Node() for _ in range(1_000)]
        base = gc.get_freeze_count()
        for _ in range(300):  # bounded: 3 s of ticks, enough for a full collection
            if gc.get_freeze_count() >= base + 1_000:
                break
            await asyncio.sleep(0.01)
        survived = gc.get_freeze_count() - base
        collector.collect_all()
        state = [Node() for _ in range(5_000)]
        before = gc.get_freeze_count()
        collector.freeze_new()
        bulk = gc.get_freeze_count() - before
        assert all(n.me is n for n in kept + state)  # alive and untouched
        return survived, bulk

    gc.unfreeze()
    try:
        survived, bulk = run(scenario(), "asyncio")
        assert survived >= 1_000
        assert bulk >= 5_000
        frozen = gc.get_freeze_count()
        outside = [Node() for _ in range(1_000)]
        collector.collect_all()
        collector.freeze_new()
        gc.collect(2)  # outside a server loop: nothing is frozen
        # (frozen objects that die meanwhile leave the count: it may only shrink)
        assert gc.get_freeze_count() <= frozen
        assert all(n.me is n for n in outside)
    finally:
        gc.unfreeze()


def test_no_collections_while_a_store_loads() -> None:
    """``no_collections`` (the loader's, in its own thread) holds the loop's ticks back."""
    seen: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    async def scenario() -> tuple[int, int]:
        with collector.no_collections():
            garbage = [Node() for _ in range(50_000)]
            del garbage
            await asyncio.sleep(0.3)  # thirty ticks
            during = len(seen)
        await asyncio.sleep(0.3)
        return during, len(seen)

    gc.callbacks.append(record)
    try:
        during, after = run(scenario(), "asyncio")
    finally:
        gc.callbacks.remove(record)
    assert during == 0
    assert after >= 1
